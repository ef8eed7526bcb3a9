"""Checkpoint files: half-written temporaries of killed writers do not pile up."""

import os
import subprocess
import sys

from spacy_elmo.pretrain import checkpoint as ckpt


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_temporaries_of_killed_writers_are_removed_on_the_next_start(tmp_path):
    stale = tmp_path / f"step_00000040.ckpt.tmp{dead_pid()}"
    live = tmp_path / f"step_00000040.ckpt.tmp{os.getppid()}"  # a writer that is still running
    for path in (stale, live):
        path.write_bytes(b"half a checkpoint")
    ckpt.write_checkpoint(tmp_path, 20, {"step": 20})
    warnings = []
    found = ckpt.latest_checkpoint(tmp_path, warn=warnings.append)
    assert found is not None and found[1] == {"step": 20}
    assert not stale.exists() and live.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "step_00000020.ckpt"])


def test_latest_checkpoint_says_what_it_removed(tmp_path):
    stale = tmp_path / f"step_00000010.ckpt.tmp{dead_pid()}"
    stale.write_bytes(b"x")
    warnings = []
    assert ckpt.latest_checkpoint(tmp_path, warn=warnings.append) is None
    assert not stale.exists() and any(stale.name in w for w in warnings)
