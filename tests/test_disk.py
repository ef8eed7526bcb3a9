"""Durable writes: a failed write leaves the target as it was and no temporary behind; the temporaries of
killed writers are removed, a live writer's kept."""

import os
import subprocess
import sys

import pytest

from spacy_elmo.disk import (
    atomic_directory,
    atomic_path,
    atomic_write_bytes,
    atomic_write_text,
    remove_stale_temporaries,
    temporary_sibling,
)


def test_write_replaces_the_target_whole(tmp_path):
    target = tmp_path / "sub" / "model.bin"
    atomic_write_bytes(target, b"first")
    atomic_write_text(target, "second")
    assert target.read_text() == "second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.bin"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk on fire"):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half a ne")
            raise RuntimeError("disk on fire")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.bin"]


def test_the_temporary_names_the_writing_process(tmp_path):
    assert temporary_sibling(tmp_path / "x.ckpt").name == f"x.ckpt.tmp{os.getpid()}"


def test_directories_appear_whole_and_a_racing_writer_keeps_the_first(tmp_path):
    target = tmp_path / "entry"
    with atomic_directory(target) as tmp:
        (tmp / "a.npy").write_bytes(b"a")
        assert not target.exists()
    assert (target / "a.npy").read_bytes() == b"a"
    with atomic_directory(target) as tmp:  # another process finished the same entry first
        (tmp / "a.npy").write_bytes(b"b")
    assert (target / "a.npy").read_bytes() == b"a"
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]
    with pytest.raises(KeyError):
        with atomic_directory(tmp_path / "other") as tmp:
            raise KeyError("stop")
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_the_temporaries_of_every_target_a_pattern_names_are_removed(tmp_path):
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True).stdout)
    stale = [tmp_path / f"step_1.ckpt.tmp{dead}", tmp_path / f"step_2.ckpt.tmp{os.getpid()}"]
    kept = [tmp_path / f"step_3.ckpt.tmp{os.getppid()}", tmp_path / f"model.bin.tmp{dead}", tmp_path / "step_4.ckpt"]
    for path in stale + kept:
        path.write_bytes(b"half")
    assert remove_stale_temporaries(tmp_path, "step_*.ckpt") == [stale[0]]  # this process's own is kept
    assert sorted(remove_stale_temporaries(tmp_path, "step_*.ckpt", keep_own=False)) == [stale[1]]
    assert sorted(tmp_path.iterdir()) == sorted(kept)
