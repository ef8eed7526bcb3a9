"""Training checkpoints: pickle-free, checksummed, written atomically, resumed exactly.

A checkpoint is one msgpack file, {"format", "sha256", "payload"}, the payload itself msgpack (what
`Checkpointer.save` writes). Loading never executes code; a file whose checksum or structure is wrong is
refused, and `latest_checkpoint` falls back to the newest older one, so a crash while writing costs one interval.
"""

import hashlib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import srsly
import torch

from ..bilm.bilm import BiLM
from ..disk import atomic_write_bytes, remove_stale_temporaries
from ..io.native import bilm_to_bytes, decode_array, encode_array
from .distributed import Log, Placement, gather_bytes

FORMAT = "spacy-elmo.checkpoint.v1"
NAME = re.compile(r"^step_(\d+)\.ckpt$")
PATTERN = "step_*.ckpt"  # NAME as a glob, for the temporaries of killed writers


class CheckpointError(ValueError):
    """A checkpoint file that is truncated, corrupt or not a spacy-elmo checkpoint."""


def encode_tree(value: Any) -> Any:
    """Tensors -> encoded arrays, recursively; dicts as [key, value] pairs (msgpack keeps their int keys so)."""
    if isinstance(value, torch.Tensor):
        return {"__array__": encode_array(value.detach().cpu().numpy())}
    if isinstance(value, dict):
        return {"__dict__": [[encode_tree(k), encode_tree(v)] for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [encode_tree(v) for v in value]
    return value


def decode_tree(value: Any) -> Any:
    if isinstance(value, dict):
        if "__array__" in value:
            return torch.from_numpy(decode_array(value["__array__"]))
        return {decode_tree(k): decode_tree(v) for k, v in value["__dict__"]}
    if isinstance(value, list):
        return [decode_tree(v) for v in value]
    return value


def checkpoint_path(directory: Path, step: int) -> Path:
    return Path(directory) / f"step_{step:08d}.ckpt"


def write_checkpoint(directory: Path, step: int, payload: dict[str, Any]) -> Path:
    """Write atomically (spacy_elmo/disk.py): a reader never sees a partial file."""
    body = srsly.msgpack_dumps(payload)
    blob = srsly.msgpack_dumps({"format": FORMAT, "sha256": hashlib.sha256(body).hexdigest(), "payload": body})
    remove_stale_temporaries(directory, PATTERN, keep_own=False)
    return atomic_write_bytes(checkpoint_path(directory, step), blob)


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
    matches = ((NAME.match(path.name), path) for path in Path(directory).glob(PATTERN))
    return sorted(((int(match.group(1)), path) for match, path in matches if match), reverse=True)


def latest_checkpoint(directory: Path, warn=print) -> Optional[tuple[Path, dict[str, Any]]]:
    """The newest checkpoint that reads. A corrupt one is renamed to `*.corrupt`: kept to inspect, but out of
    the rotation, so that pruning never deletes a good checkpoint to make room for it."""
    for stale in remove_stale_temporaries(directory, PATTERN, keep_own=False):
        warn(f"removed {stale.name}, left by a checkpoint writer that was stopped")
    for _, path in list_checkpoints(directory):
        try:
            return path, read_checkpoint(path)
        except CheckpointError as err:
            aside = path.with_name(path.name + ".corrupt")
            path.replace(aside)
            warn(f"warning: refusing {err}; moved it to {aside.name} and trying the previous checkpoint")
    return None


@dataclass
class TrainState:
    """The loop's counters, which a resumed run needs besides the weights, optimizer and generators."""

    step: int = 0  # optimizer steps taken (checkpoints are named by it)
    epoch: int = 0  # epochs completed: with the seed, it picks the order of the windows (`WindowBatcher`)
    index: int = 0  # the next batch of the current epoch
    tokens: int = 0  # training tokens seen, all processes together
    wall_s: float = 0.0  # seconds spent training (evaluations left out), for `max_minutes`


@dataclass
class Checkpointer:
    """The checkpoints of a run: writing, pruning to the `keep` newest and restoring them. `save` is
    collective: every process calls it at the same step."""

    directory: Path
    bilm: BiLM
    optimizer: torch.optim.Optimizer
    sampler_rng: torch.Generator
    place: Placement
    keep: int
    config_text: str
    say: Log  # rank 0's log
    data: dict[str, list[list[str]]] = field(default_factory=dict)  # the data's `file_digests`, by role
    saved_step: Optional[int] = field(default=None, init=False)  # of the newest checkpoint written or restored

    def save(self, state: TrainState) -> None:
        """Write a checkpoint (rank 0) with every rank's random state, then prune."""
        place = self.place
        torch_states = gather_bytes(_bytes(torch.get_rng_state()), place.world)
        cuda_states = None
        if place.device.type == "cuda":
            cuda_states = gather_bytes(_bytes(torch.cuda.get_rng_state(place.device)), place.world)
        self.saved_step = state.step
        if not place.is_main:
            return
        payload = {
            "model": bilm_to_bytes(self.bilm),
            "optimizer": encode_tree(self.optimizer.state_dict()),
            "trainer": asdict(state),
            "rng": {"sampler": _bytes(self.sampler_rng.get_state()), "torch": torch_states, "cuda": cuda_states},
            "config": self.config_text,
            "data": self.data,
        }
        path = write_checkpoint(self.directory, state.step, payload)
        # never fewer than 2 kept: the newest may be damaged later, and the one before it is the fallback
        for _, old in list_checkpoints(self.directory)[max(self.keep, 2) :]:
            old.unlink(missing_ok=True)
        self.say(f"checkpoint {path}")

    def restore(self, path: Path, payload: dict[str, Any]) -> TrainState:
        """Restore all but the weights (already in the model), so that the losses repeat the uninterrupted run's."""
        self.optimizer.load_state_dict(decode_tree(payload["optimizer"]))
        state = TrainState(**payload["trainer"])
        self.sampler_rng.set_state(_state(payload["rng"]["sampler"]))
        rank, device = self.place.rank, self.place.device
        torch.set_rng_state(_state(payload["rng"]["torch"][rank]))
        if device.type == "cuda" and payload["rng"].get("cuda"):
            torch.cuda.set_rng_state(_state(payload["rng"]["cuda"][rank]), device)
        self.saved_step = state.step
        self.say(f"resumed from {path} (step {state.step}, epoch {state.epoch}, {state.tokens} tokens)")
        return state


def _bytes(state: torch.Tensor) -> bytes:
    return state.numpy().tobytes()


def _state(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)
