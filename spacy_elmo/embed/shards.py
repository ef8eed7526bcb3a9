"""Sharded `embed`: shard i of n takes the lines whose index is i modulo n (deterministic, balanced, known
while streaming) into its own resumable file; `merge_shards` joins the shards into the very file one run
would have written.
"""

import contextlib
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy

from ..io.atomic import remove_stale_temporaries
from ..launch_env import launch_env
from .store import (
    INFORMATIONAL,
    OutputError,
    add_dataset,
    check_digest,
    check_output_path,
    differences,
    finished_output,
    partial_dir,
    read_binding,
    write_finished,
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
    """Join finished shard files into the file one run would have written; returns the number of lines
    written now (0 when the output is this merge, finished and undamaged). Every shard must be there once,
    finished, bound to the same model, input and settings, undamaged, and every line there exactly once;
    a ShardError names what is not, and then nothing is written. An existing file is never replaced."""
    import h5py

    if not shard_files:
        raise ShardError("no shard files given")
    check_output_path(output_path, map(Path, shard_files), "shard file")
    remove_stale_temporaries(output_path)
    shards: dict[int, Path] = {}
    first: Optional[tuple[Path, dict[str, Any], int]] = None
    for path in map(Path, shard_files):
        if not path.exists():
            raise FileNotFoundError(f"shard file not found: {path}{_unfinished_hint(path)}")
        binding, n_lines = _shard_binding(path)
        index, count = binding["shard"]
        first = first or (path, binding, n_lines)  # each shard is compared with the first
        differ = differences(first[1], binding, ignore=(*INFORMATIONAL, "shard"))
        if first[1]["shard"][1] != count:
            differ.insert(0, f"shard count: {first[1]['shard'][1]} in {first[0]}, {count} here")
        if first[2] != n_lines:
            differ.insert(0, f"input lines: {first[2]} in {first[0]}, {n_lines} here")
        if differ:
            raise ShardError(f"{path}: does not belong with {first[0]}: {'; '.join(differ)}")
        if index in shards:
            raise ShardError(f"shard {index} of {count} given twice: {shards[index]} and {path}")
        shards[index] = path
    assert first is not None
    binding = first[1]  # the first shard's (count and n_lines are every shard's)
    missing = [i for i in range(count) if i not in shards]
    if missing:
        paths = [shard_path(output_path, (i, count)) for i in missing]
        expected = ", ".join(f"{path}{_unfinished_hint(path)}" for path in paths)
        raise ShardError(f"missing shard(s) {missing} of {count}: expected {expected}")
    merged = {**binding, "shard": None}
    if finished_output(output_path, merged):
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
        write_finished(output_path, merged, _interleaved(handles, [shards[i] for i in range(count)], n_lines), n_lines)
    return n_lines


def _unfinished_hint(path: Path) -> str:
    partial = partial_dir(path)
    return f" (its unfinished work is in {partial}: run that shard again to finish it)" if partial.exists() else ""


def _shard_binding(path: Path) -> tuple[dict[str, Any], int]:
    try:
        binding, attrs = read_binding(path, what="shard")
        n_lines = int(attrs["n_input_lines"])
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
        recorded = handle.attrs.get("content_sha256")
        check_digest(path, digest.hexdigest(), recorded, "shard", "delete it and run that shard again", ShardError)
