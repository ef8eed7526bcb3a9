"""Sharded `embed`: a corpus too large for one machine (or one process) cut into shards.

Shard i of n takes the lines whose index is i modulo n (deterministic, balanced, and known while
streaming), writes its own file (`out.shard{i}-of-{n}.hdf5`, resumable like any output) and records
when it is complete; `merge_shards` joins complete shards into one file with the layout of a single
run, checking that every line is there exactly once.
"""

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from ..io.atomic import atomic_path
from ..launch_env import launch_env


class ShardError(ValueError):
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
    """Join complete shard files into one file with the layout of a single run (dataset "i" = line i);
    returns the number of lines. Every shard 0..n-1 must be there once, complete, with the same settings
    and input, and every line of the input exactly once; a ShardError names what is not."""
    import h5py

    if not shard_files:
        raise ShardError("no shard files given")
    shards: dict[int, Path] = {}
    described: dict[str, object] = {}
    for path in shard_files:
        if not Path(path).exists():
            raise FileNotFoundError(f"shard file not found: {path}")
        try:
            handle = h5py.File(path, "r")
        except OSError as err:
            raise ShardError(f"{path}: not a readable HDF5 file ({err}); run its shard again to rewrite it") from None
        with handle:
            if "shard" not in handle.attrs:
                raise ShardError(f"{path}: not a shard file (written without --shard)")
            index, count = json.loads(handle.attrs["shard"])
            if not handle.attrs.get("complete", False):
                raise ShardError(f"{path}: shard {index} of {count} is incomplete: run it again to resume it")
            for key, value in (
                ("count", count),
                ("settings", handle.attrs["settings"]),
                ("n_input_lines", int(handle.attrs["n_input_lines"])),
            ):
                if described.setdefault(key, value) != value:
                    raise ShardError(f"{path}: its {key} ({value}) differs from the other shards' ({described[key]})")
        if index in shards:
            raise ShardError(f"shard {index} of {count} given twice: {shards[index]} and {path}")
        shards[index] = Path(path)
    count = int(described["count"])  # type: ignore[call-overload]
    missing = [i for i in range(count) if i not in shards]
    if missing:
        expected = ", ".join(str(shard_path(output_path, (i, count))) for i in missing)
        raise ShardError(f"missing shard(s) {missing} of {count}: expected {expected}")
    n_lines = int(described["n_input_lines"])  # type: ignore[call-overload]
    with atomic_path(output_path) as tmp, h5py.File(tmp, "w") as out:
        out.attrs["settings"] = described["settings"]
        seen: set = set()
        for index in range(count):
            with h5py.File(shards[index], "r") as handle:
                names = set(handle.keys())
                expected_lines = {str(i) for i in range(index, n_lines, count)}
                if names != expected_lines:
                    absent = sorted(expected_lines - names, key=int)[:10]
                    strays = sorted(names - expected_lines)[:10]
                    raise ShardError(
                        f"{shards[index]}: lines missing {absent} / not of this shard {strays}; run the shard again"
                    )
                for name in sorted(names, key=int):
                    handle.copy(handle[name], out, name=name)
                seen |= names
        out.attrs["n_input_lines"] = n_lines
        out.attrs["complete"] = True
    return len(seen)
