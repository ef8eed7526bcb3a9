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


# --- OpenMP's wait policy --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "spins"),
    [
        ({}, True),  # libgomp spins 300,000 times, Intel's OpenMP 200 ms
        ({"OMP_WAIT_POLICY": "PASSIVE"}, False),
        ({"OMP_WAIT_POLICY": " passive "}, False),
        ({"OMP_WAIT_POLICY": "ACTIVE"}, True),
        ({"GOMP_SPINCOUNT": "0"}, False),
        ({"GOMP_SPINCOUNT": "10000", "OMP_WAIT_POLICY": "PASSIVE"}, True),  # libgomp: the spin count wins
        ({"GOMP_SPINCOUNT": "0", "OMP_WAIT_POLICY": "ACTIVE"}, False),
        ({"KMP_BLOCKTIME": "0"}, False),
        ({"KMP_BLOCKTIME": "200"}, True),
    ],
)
def test_openmp_spins_reads_the_environment_as_the_runtimes_do(environ, spins):
    assert cpus.openmp_spins(environ) is spins


# --- other work on the CPUs ------------------------------------------------------------------------------


class Clocks:
    """A fake wall clock and process CPU clock, in seconds."""

    def __init__(self) -> None:
        self.wall = 100.0
        self.own = 5.0


def proc_stat(busy: list[int], idle: list[int]) -> str:
    """/proc/stat with a cpu line a CPU: busy ticks split over user, system and steal; idle over idle, iowait."""
    lines = [f"cpu  {sum(busy)} 0 0 {sum(idle)} 0 0 0 0 0 0"]
    for n, (b, i) in enumerate(zip(busy, idle)):
        lines.append(f"cpu{n} {b - b // 2 - b // 4} 0 {b // 2} {i - i // 3} {i // 3} 0 0 {b // 4} 0 0")
    return "\n".join([*lines, "intr 12345 0 0", "ctxt 999"])


@pytest.fixture
def two_cpus(tmp_path, monkeypatch):
    """CPUs 0 and 1 by affinity, /proc/stat faked (100 ticks a second), fake clocks."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(cpus, "_ticks_per_second", lambda: 100)
    tree(tmp_path, {"proc/stat": proc_stat([1000, 1000], [5000, 5000])})
    clocks = Clocks()
    work = cpus.OtherWork(tmp_path, clock=lambda: clocks.wall, own_cpu=lambda: clocks.own)
    return tmp_path, clocks, work


def advance(root: Path, clocks: Clocks, seconds: float, busy: list[int], own: float) -> None:
    """`seconds` pass, in which the CPUs were busy for `busy` ticks each and this process used `own` CPU s."""
    before = (root / "proc/stat").read_text().splitlines()
    ticks = [[int(x) for x in line.split()[1:]] for line in before if line.startswith("cpu") and line[3] != " "]
    new_busy = [sum(t) - t[3] - t[4] + b for t, b in zip(ticks, busy)]
    new_idle = [t[3] + t[4] + int(seconds * 100) - b for t, b in zip(ticks, busy)]
    tree(root, {"proc/stat": proc_stat(new_busy, new_idle)})
    clocks.wall += seconds
    clocks.own += own


def test_other_work_is_the_cpus_busy_time_less_this_process(two_cpus):
    root, clocks, work = two_cpus
    advance(root, clocks, 1.0, [100, 100], own=0.5)  # both CPUs busy, half a CPU of it this process's
    assert work.cpus() == (2, pytest.approx(1.5))
    assert cpus.threads_beside_other_work(2, work) == 1  # within the window: the last value (1.5)
    (root / "proc/stat").rename(root / "stat")
    assert work.cpus() == (2, pytest.approx(1.5))  # /proc/stat not read again within the window
    (root / "stat").rename(root / "proc/stat")
    advance(root, clocks, 2.0, [200, 200], own=2.0)
    assert work.cpus() == (2, pytest.approx(1.0))
    advance(root, clocks, 1.0, [100, 0], own=1.0)  # this process alone
    assert work.cpus() == (2, pytest.approx(0.0))


@pytest.mark.parametrize(("others_ticks", "threads"), [(0, 2), (40, 2), (60, 1), (100, 1), (200, 1)])
def test_threads_beside_other_work_leave_the_cpus_it_holds(two_cpus, others_ticks, threads):
    """Half a CPU or more of other work takes a thread; never fewer than 1, never more than the limit."""
    root, clocks, work = two_cpus
    advance(root, clocks, 1.0, [others_ticks // 2, others_ticks - others_ticks // 2], own=0.0)
    assert cpus.threads_beside_other_work(2, work) == threads
    assert cpus.threads_beside_other_work(1, work) == 1
    assert cpus.threads_beside_other_work(8, work) <= 2  # the CPUs it may run on


def test_other_work_needs_a_window_and_every_cpu_of_the_affinity(two_cpus, monkeypatch):
    root, clocks, work = two_cpus
    advance(root, clocks, 0.1, [10, 10], own=0.0)
    assert work.cpus() is None and cpus.threads_beside_other_work(2, work) == 2  # not measured yet: the limit
    advance(root, clocks, 0.5, [50, 50], own=0.0)
    assert work.cpus() == (2, pytest.approx(2.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 7}, raising=False)  # cpu7: not in /proc/stat
    advance(root, clocks, 1.0, [100, 100], own=0.0)
    assert work.cpus() is None and cpus.threads_beside_other_work(2, work) == 2
    assert cpus.OtherWork(root / "nothing").cpus() is None  # no /proc (not Linux)


def test_other_work_on_this_machine():
    work = cpus.OtherWork(window_s=0.0)
    measured = work.cpus()
    assert measured is None or (measured[0] == len(os.sched_getaffinity(0)) and measured[1] >= 0)
