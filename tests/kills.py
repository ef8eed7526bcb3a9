"""Killing a run at a chosen point: a forked child runs it and SIGKILLs itself there (no cleanup, no
`finally`, no flush: what a power cut or the OOM killer leaves), under a timeout."""

import hashlib
import os
import signal
import time
from typing import Callable

import h5py
import pytest


def sha256_of(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_killed(job: Callable[[], object], patch: Callable[[Callable[[], None]], None], timeout: float = 120) -> None:
    """Run `job` in a forked child after `patch(die)` placed `die` (SIGKILL now) where the kill belongs;
    fails if the child was not killed there (it finished, or raised)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 3
        try:
            patch(lambda: os.kill(os.getpid(), signal.SIGKILL))
            job()
            status = 0
        except BaseException:
            status = 4
        finally:
            os._exit(status)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"the killed run did not stop within {timeout} s")
        time.sleep(0.02)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"the run was not killed at the chosen point (exit status {os.WEXITSTATUS(status)}: 0 = it finished)"
    )


def at_nth_dataset(n: int) -> Callable[[Callable[[], None]], None]:
    """Die right after the n-th HDF5 dataset is created: the file being written is open, not flushed."""

    def patch(die: Callable[[], None]) -> None:
        original = h5py.Group.create_dataset
        calls = [0]

        def create_dataset(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            calls[0] += 1
            if calls[0] == n:
                die()
            return result

        h5py.Group.create_dataset = create_dataset

    return patch


def at_call(owner: object, name: str, after: bool = False, n: int = 1) -> Callable[[Callable[[], None]], None]:
    """Die at the n-th call of `owner.name` (before it runs, or right after it returned)."""

    def patch(die: Callable[[], None]) -> None:
        original = getattr(owner, name)
        calls = [0]

        def wrapper(*args, **kwargs):
            calls[0] += 1
            if calls[0] == n and not after:
                die()
            result = original(*args, **kwargs)
            if calls[0] == n and after:
                die()
            return result

        setattr(owner, name, wrapper)

    return patch
