"""Training checkpoints: pickle-free, checksummed, written atomically, resumed exactly.

A checkpoint is one msgpack file: {"format", "sha256", "payload"}, the payload itself msgpack of
the model (the native model bytes, vocabulary included), the optimizer state (tensors as encoded
arrays, the rest plain data), the trainer's counters and data position, and the random states
(torch generator states as raw bytes). Loading never executes code. A file whose checksum or
structure is wrong is refused with `CheckpointError`, and `latest_checkpoint` falls back to the
newest older one that reads, so a crash while writing, or a damaged disk, costs one interval.
"""

import hashlib
import os
import re
from pathlib import Path
from typing import Any, Optional

import numpy
import srsly
import torch

from ..io.native import decode_array, encode_array

FORMAT = "spacy-elmo.checkpoint.v1"
NAME = re.compile(r"^step_(\d+)\.ckpt$")
TEMPORARY = re.compile(r"^step_\d+\.ckpt\.tmp(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint file that is truncated, corrupt or not a spacy-elmo checkpoint."""


def encode_tree(value: Any) -> Any:
    """Tensors/arrays -> encoded arrays, recursively; dict keys made strings (msgpack-safe)."""
    if isinstance(value, torch.Tensor):
        return {"__array__": encode_array(value.detach().cpu().numpy())}
    if isinstance(value, numpy.ndarray):
        return {"__array__": encode_array(value)}
    if isinstance(value, dict):
        return {"__dict__": [[encode_tree(k), encode_tree(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [encode_tree(v) for v in value]
    return value


def decode_tree(value: Any) -> Any:
    if isinstance(value, dict):
        if "__array__" in value:
            return torch.from_numpy(decode_array(value["__array__"], source="checkpoint"))
        if "__dict__" in value:
            return {decode_tree(k): decode_tree(v) for k, v in value["__dict__"]}
        return {k: decode_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_tree(v) for v in value]
    return value


def generator_state(generator: torch.Generator) -> bytes:
    return generator.get_state().numpy().tobytes()


def set_generator_state(generator: torch.Generator, state: bytes) -> None:
    generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))


def checkpoint_path(directory: Path, step: int) -> Path:
    return Path(directory) / f"step_{step:08d}.ckpt"


def write_checkpoint(directory: Path, step: int, payload: dict[str, Any]) -> Path:
    """Write atomically: temporary file, fsync, rename; a reader never sees a partial file."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    body = srsly.msgpack_dumps(payload)
    blob = srsly.msgpack_dumps({"format": FORMAT, "sha256": hashlib.sha256(body).hexdigest(), "payload": body})
    remove_stale_temporaries(directory)
    path = checkpoint_path(directory, step)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(blob)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)
    return path


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Delete the half-written `step_*.ckpt.tmpPID` files of writers that were killed (their process is
    gone): they are never read, but each is as large as a checkpoint. Returns what was removed."""
    directory = Path(directory)
    removed = []
    if directory.exists():
        for path in directory.iterdir():
            match = TEMPORARY.match(path.name)
            if match and (int(match.group(1)) == os.getpid() or not _process_exists(int(match.group(1)))):
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def read_checkpoint(path: Path) -> dict[str, Any]:
    path = Path(path)
    try:
        outer = srsly.msgpack_loads(path.read_bytes(), use_list=True)
    except Exception as err:  # msgpack raises several unrelated types on corrupt input
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated ({type(err).__name__}: {err})") from None
    if not isinstance(outer, dict) or outer.get("format") != FORMAT or not isinstance(outer.get("payload"), bytes):
        raise CheckpointError(f"checkpoint {path} is not a spacy-elmo checkpoint (expected format {FORMAT!r})")
    body = outer["payload"]
    if hashlib.sha256(body).hexdigest() != outer.get("sha256"):
        raise CheckpointError(f"checkpoint {path} is corrupt: its checksum does not match its contents")
    try:
        return srsly.msgpack_loads(body, use_list=True)
    except Exception as err:
        raise CheckpointError(f"checkpoint {path} is corrupt ({type(err).__name__}: {err})") from None


def list_checkpoints(directory: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint file, newest first (temporary files are ignored)."""
    directory = Path(directory)
    if not directory.exists():
        return []
    found = []
    for path in directory.iterdir():
        match = NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found, reverse=True)


def latest_checkpoint(directory: Path, warn=print) -> Optional[tuple[Path, dict[str, Any]]]:
    """The newest checkpoint that reads. A corrupt one is reported and renamed to `*.corrupt`: kept
    on disk to inspect, but out of the rotation, so that pruning never deletes a good checkpoint to
    make room for it. Temporary files of killed writers are removed first."""
    for stale in remove_stale_temporaries(directory):
        warn(f"removed {stale.name}, left by a checkpoint writer that was stopped")
    for _, path in list_checkpoints(directory):
        try:
            return path, read_checkpoint(path)
        except CheckpointError as err:
            aside = path.with_name(path.name + ".corrupt")
            path.replace(aside)
            warn(f"warning: refusing {err}; moved it to {aside.name} and trying the previous checkpoint")
    return None


def prune_checkpoints(directory: Path, keep: int) -> None:
    """Delete all but the `keep` newest checkpoints (never fewer than 2 are kept: the newest may be
    damaged later, and the one before it is the fallback)."""
    for _, path in list_checkpoints(directory)[max(keep, 2) :]:
        path.unlink(missing_ok=True)
