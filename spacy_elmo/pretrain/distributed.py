"""The process group of a `torchrun` launch: joined, used for the few collectives training needs, torn down.

Every helper is a no-op for a single process, so the loop has one code path. NCCL on GPUs, gloo on CPUs.
"""

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.distributed as dist
from torch import nn

from ..launch_env import launch_env

Log = Callable[[str], None]


def main_process_log(log: Log, rank: int) -> Log:
    """`log` on rank 0, nothing on the other ranks: one copy of every line is enough."""
    return log if rank == 0 else lambda message: None


@dataclass(frozen=True)
class Placement:
    """Where this process trains: its device, its rank among the processes and how many there are."""

    device: torch.device
    rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: it evaluates and writes the outputs."""
        return self.rank == 0


def process_group_exists() -> bool:
    """Whether a default process group is up (ours, or one the caller made before calling us)."""
    return dist.is_available() and dist.is_initialized()


def init_distributed(device: torch.device) -> tuple[int, int]:
    """(rank, world size): joins the process group torchrun describes, unless the caller already has.

    torch.distributed.nn, which DistributedDataParallel imports, binds the default group as a default argument
    when first imported: imported after the group is made, it keeps gloo's threads alive past
    `destroy_process_group`, and a rank can abort at exit after a successful run. Imported first, it binds None.
    """
    if not launch_env().distributed:
        return 0, 1
    if not dist.is_initialized():
        importlib.import_module("torch.distributed.nn.functional")
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size()


def end_distributed() -> None:
    """Tear down the process group: left to interpreter exit, gloo's threads can be destroyed while still
    joinable, and a rank then aborts (SIGABRT) after a successful run."""
    if process_group_exists():
        dist.destroy_process_group()


def barrier(world: int) -> None:
    """Wait for every process: the others read what rank 0 wrote (corpus cache), or wait for its last write."""
    if world > 1:
        dist.barrier()


def any_process(flags: Sequence[bool], world: int, device: torch.device) -> list[bool]:
    """Each of `flags` or'ed over all processes, in one all-reduce: all must stop at the same step (or the others
    hang in the next all-reduce), and all know why."""
    if world == 1:
        return list(flags)
    tensor = torch.tensor([1.0 if flag else 0.0 for flag in flags], device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [bool(value) for value in tensor.tolist()]


def gather_bytes(value: bytes, world: int) -> list[Optional[bytes]]:
    """`value` of every process, in rank order (each rank's generator state, for rank 0's checkpoint)."""
    if world == 1:
        return [value]
    gathered: list[Optional[bytes]] = [None] * world
    dist.all_gather_object(gathered, value)
    return gathered


def data_parallel(model: nn.Module, device: torch.device, world: int) -> nn.Module:
    """`model` for training: wrapped in DistributedDataParallel (gradients averaged) when there are peers."""
    if world == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=False
    )
