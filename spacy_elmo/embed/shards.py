"""Sharded `embed`: shard i of n takes the lines whose index is i modulo n (deterministic, balanced, known
while streaming) into its own resumable file; `merge_shards` joins the shards into the very file one run
would have written."""

import contextlib
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy

from ..disk import remove_stale_temporaries
from ..launch_env import launch_env
from .store import (
    INFORMATIONAL,
    Hdf5Output,
    OutputError,
    PartialRun,
    add_dataset,
    check_digest,
    check_output_path,
    differences,
    partial_dir,
    read_binding,
)


class ShardError(OutputError):
    """Shard files that do not make up one whole run: missing, duplicated, incomplete or mismatched."""


Shard = tuple[int, int]  # (index, count)


def parse_shard(spec: str) -> Shard:
    """ "I/N" -> (I, N), with 0 <= I < N."""
    try:
        index, count = (int(part) for part in spec.split("/"))
    except ValueError:
        raise ValueError(f"--shard must be I/N (e.g. 0/4), got {spec!r}") from None
    if not 0 <= index < count:
        raise ValueError(f"--shard {spec}: the index must be in 0..{count - 1}")
    return index, count


def shard_from_env(environ: Optional[Mapping[str, str]] = None) -> Optional[Shard]:
    """(RANK, WORLD_SIZE) as torchrun and most cluster launchers set them, or None for one process."""
    env = launch_env(environ)
    return (env.rank, env.world_size) if env.distributed else None


def shard_path(output_path: Path, shard: Shard) -> Path:
    index, count = shard
    return output_path.with_name(f"{output_path.stem}.shard{index}-of-{count}{output_path.suffix}")


def merge_shards(shard_files: Sequence[Path], output_path: Path) -> int:
    """Join finished shard files into the file one run would have written (never replacing an existing
    file); returns the lines written now (0 when the output is this merge already). A ShardError names a
    shard or line missing, a shard given twice, damaged or bound to another run; then nothing is written."""
    import h5py

    if not shard_files:
        raise ShardError("no shard files given")
    paths = [Path(file) for file in shard_files]
    check_output_path(output_path, paths, "shard file")
    remove_stale_temporaries(output_path)
    first = paths[0]  # each shard is compared with the first
    first_record = _shard_binding(first)
    binding, n_lines = first_record
    count = binding["shard"][1]
    shards: dict[int, Path] = {}
    for path in paths:
        other, other_lines = first_record if path is first else _shard_binding(path)  # each read once, in order
        index, other_count = other["shard"]
        differ = differences(binding, other, ignore=(*INFORMATIONAL, "shard"))
        if other_count != count:
            differ.insert(0, f"shard count: {count} in {first}, {other_count} here")
        if other_lines != n_lines:
            differ.insert(0, f"input lines: {n_lines} in {first}, {other_lines} here")
        if differ:
            raise ShardError(f"{path}: does not belong with {first}: {'; '.join(differ)}")
        if index in shards:
            raise ShardError(f"shard {index} of {count} given twice: {shards[index]} and {path}")
        shards[index] = path
    missing = [i for i in range(count) if i not in shards]
    if missing:
        paths = [shard_path(output_path, (i, count)) for i in missing]
        expected = ", ".join(f"{path}{_unfinished_hint(path)}" for path in paths)
        raise ShardError(f"missing shard(s) {missing} of {count}: expected {expected}")
    merged = {**binding, "shard": None}
    if PartialRun(output_path, merged).finished():
        return 0
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(h5py.File(shards[i], "r")) for i in range(count)]
        for index, handle in enumerate(handles):
            names, expected_names = set(handle.keys()), {str(i) for i in range(index, n_lines, count)}
            if names != expected_names:
                absent = sorted(expected_names - names, key=int)[:10]
                strays = sorted(names - expected_names)[:10]
                raise ShardError(
                    f"{shards[index]}: lines missing {absent} / not of this shard {strays}; run the shard again"
                )
        datasets = _interleaved(handles, [shards[i] for i in range(count)], n_lines)
        Hdf5Output(output_path).write(datasets, merged, n_lines)
    return n_lines


def _unfinished_hint(path: Path) -> str:
    partial = partial_dir(path)
    return f" (its unfinished work is in {partial}: run that shard again to finish it)" if partial.exists() else ""


def _shard_binding(path: Path) -> tuple[dict[str, Any], int]:
    if not path.exists():
        raise FileNotFoundError(f"shard file not found: {path}{_unfinished_hint(path)}")
    try:
        record = read_binding(path, what="shard")
        binding, n_lines = record["binding"], int(record["n_input_lines"])
    except OutputError as err:
        raise ShardError(str(err)) from None
    except (OSError, KeyError, ValueError) as err:
        raise ShardError(f"{path}: damaged ({err}); run its shard again to rewrite it") from None
    if binding.get("shard") is None:
        raise ShardError(f"{path}: not a shard file (written without --shard)")
    return binding, n_lines


def _interleaved(handles: list, paths: list[Path], n_lines: int) -> Iterator[tuple[str, numpy.ndarray]]:
    """Line i from shard i % n, each shard's content digest checked once its last line is read."""
    count = len(handles)
    digests = [hashlib.sha256() for _ in handles]
    for line in range(n_lines):
        index = line % count
        array = handles[index][str(line)][...]
        add_dataset(digests[index], str(line), array)
        yield str(line), array
    for handle, path, digest in zip(handles, paths, digests):
        recorded = handle.attrs.get("vectors_sha256")
        check_digest(path, digest.hexdigest(), recorded, "shard", "delete it and run that shard again", ShardError)
