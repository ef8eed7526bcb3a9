"""The CPUs a process may use: affinity capped by the cgroup CPU quota (v1 and v2, this process's cgroup and
those above it), read from a faked /proc and /sys tree; and what ONNX Runtime's session is given for it."""

import os
from pathlib import Path

import pytest

from spacy_elmo import cpus
from spacy_elmo.cpus import cgroup_cpu_quota, usable_cpus


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    return root


@pytest.fixture
def eight_cpus(monkeypatch):
    """A process allowed 8 CPUs by its affinity."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)


def test_a_v2_quota_of_one_cpu_gives_one(tmp_path, eight_cpus):
    assert usable_cpus(tree(tmp_path, {"sys/fs/cgroup/cpu.max": "100000 100000"})) == 1


def test_a_v1_quota_of_one_cpu_gives_one(tmp_path, eight_cpus):
    files = {"sys/fs/cgroup/cpu/cpu.cfs_quota_us": "50000", "sys/fs/cgroup/cpu/cpu.cfs_period_us": "50000"}
    assert usable_cpus(tree(tmp_path, files)) == 1


@pytest.mark.parametrize(
    "files",
    [
        {},  # no cgroup file system (not Linux), or no cpu controller
        {"sys/fs/cgroup/cpu.max": "max 100000"},
        {"sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1", "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"},
        {"sys/fs/cgroup/cpu/cpu.cfs_quota_us": "100000"},  # no period file
        {"sys/fs/cgroup/cpu.max": "garbage"},
        {"sys/fs/cgroup/cpu.max": "100000 0"},
        {"proc/self/cgroup": "not a cgroup line"},
    ],
)
def test_no_quota_gives_the_affinity(tmp_path, eight_cpus, files):
    root = tree(tmp_path, files)
    assert cgroup_cpu_quota(root) is None
    assert usable_cpus(root) == 8


@pytest.mark.parametrize(
    ("quota", "expected"), [("150000 100000", 2), ("50000 100000", 1), ("1000 100000", 1), ("250000 100000", 3)]
)
def test_a_fractional_quota_rounds_up_and_never_to_zero(tmp_path, eight_cpus, quota, expected):
    root = tree(tmp_path, {"sys/fs/cgroup/cpu.max": quota})
    assert cgroup_cpu_quota(root) == int(quota.split()[0]) / 100000
    assert usable_cpus(root) == expected


def test_an_affinity_smaller_than_the_quota_wins(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5}, raising=False)
    assert usable_cpus(tree(tmp_path, {"sys/fs/cgroup/cpu.max": "400000 100000"})) == 2


def test_without_affinity_the_cpu_count(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert usable_cpus(tmp_path) == 6
    assert usable_cpus(tree(tmp_path, {"sys/fs/cgroup/cpu.max": "300000 100000"})) == 3
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # undeterminable
    assert usable_cpus(tmp_path / "nothing") == 1


def test_the_process_own_v2_cgroup_and_those_above_it(tmp_path, eight_cpus):
    root = tree(
        tmp_path,
        {
            "proc/self/cgroup": "0::/jobs.slice/job-1",
            "sys/fs/cgroup/cpu.max": "max 100000",
            "sys/fs/cgroup/jobs.slice/cpu.max": "300000 100000",  # a parent's quota holds for its children
            "sys/fs/cgroup/jobs.slice/job-1/cpu.max": "max 100000",
            "sys/fs/cgroup/jobs.slice/job-2/cpu.max": "100000 100000",  # another process's cgroup
        },
    )
    assert cgroup_cpu_quota(root) == 3.0 and usable_cpus(root) == 3
    (root / "sys/fs/cgroup/jobs.slice/job-1/cpu.max").write_text("200000 100000\n")
    assert usable_cpus(root) == 2  # the tightest


def test_in_a_cgroup_namespace_the_mount_is_the_process_cgroup(tmp_path, eight_cpus):
    """A container's /proc/self/cgroup may name a host path that its /sys/fs/cgroup does not hold."""
    root = tree(tmp_path, {"proc/self/cgroup": "0::/docker/0123abcd", "sys/fs/cgroup/cpu.max": "200000 100000"})
    assert usable_cpus(root) == 2


def test_the_v1_cpu_controller_by_its_mount_and_path(tmp_path, eight_cpus):
    root = tree(
        tmp_path,
        {
            "proc/self/cgroup": "5:memory:/elsewhere\n4:cpu,cpuacct:/batch/task\n0::/",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000",
            "sys/fs/cgroup/cpu,cpuacct/batch/task/cpu.cfs_quota_us": "100000",
            "sys/fs/cgroup/cpu,cpuacct/batch/task/cpu.cfs_period_us": "100000",
        },
    )
    assert usable_cpus(root) == 1


def test_v1_and_v2_together_the_tightest(tmp_path, eight_cpus):
    files = {
        "sys/fs/cgroup/cpu.max": "300000 100000",
        "sys/fs/cgroup/cpu/cpu.cfs_quota_us": "200000",
        "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000",
    }
    assert usable_cpus(tree(tmp_path, files)) == 2


def test_this_machine():
    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)


def test_onnxruntime_threads_follow_the_usable_cpus(tmp_path, monkeypatch, fixture_graph_file):
    """ONNX Runtime's default (intra_op_num_threads 0) reads neither affinity nor quota."""
    pytest.importorskip("onnxruntime")
    from spacy_elmo.onnx.runtime import OnnxRunner

    graph = fixture_graph_file.path.read_bytes()

    def threads(**settings) -> int:
        return OnnxRunner(graph, **settings).session().get_session_options().intra_op_num_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(os.cpu_count() or 1)), raising=False)
    monkeypatch.setattr(cpus, "FILES_ROOT", tmp_path)
    monkeypatch.delenv("OMP_NUM_THREADS")  # tests/conftest.py sets it
    assert threads() == 0  # every CPU usable: ONNX Runtime's own default
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert threads() == 1  # as torch reads it
    monkeypatch.setenv("OMP_NUM_THREADS", "64")
    assert threads() == (os.cpu_count() or 1)  # never more than the usable CPUs
    monkeypatch.setenv("OMP_NUM_THREADS", "a few")
    assert threads() == 0  # not a count: as if unset
    monkeypatch.delenv("OMP_NUM_THREADS")
    tree(tmp_path, {"sys/fs/cgroup/cpu.max": "100000 100000"})
    assert threads() == 1
    assert threads(n_threads=3) == 3  # the user's choice, as given
