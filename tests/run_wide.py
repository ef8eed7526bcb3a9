"""Files made once for a whole test run and shared by its xdist workers (an ONNX export, a trained model):
each worker would otherwise make its own copy of what takes the longest."""

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def run_wide(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Path]:
    """A directory shared by every xdist worker of this run (this session's own without xdist), held under
    an exclusive lock: the first worker to get it makes what is missing, the others find it made. Never
    shared between runs, so nothing made by older code is reused."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, above each worker's own
    directory = root / f"shared-{name}"
    directory.mkdir(exist_ok=True)
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield directory
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
