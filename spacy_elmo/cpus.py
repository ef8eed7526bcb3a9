"""How many CPUs this process may use: its CPU affinity (`taskset`, a container's cpuset), capped by the
CPU quota of its cgroup and of the cgroups above it (v2 `cpu.max`, v1 `cpu.cfs_quota_us`). torch and ONNX
Runtime start a thread per core they see and read no quota; threads beyond what a process may use wait on
each other, and a run with them is several times slower than one with fewer.

And how many of them other processes leave idle. torch's OpenMP threads spin when out of work (GNU libgomp:
300,000 times, a few milliseconds, before they sleep), so a parallel product waits for whichever of its
threads lost its core to another process: beside other work, every CPU's worth of threads ran the shipped
pipe up to 40x slower than one thread (benchmarks/threads_busy.py, 2 cores). Threads that sleep at once
(OMP_WAIT_POLICY=PASSIVE) avoid that but ran it at half the speed on a quiet machine, and OpenMP reads the
policy only as it loads, with torch, which `import spacy` imports; so the threads are fitted to the CPUs
instead: `threads_beside_other_work`, from the CPUs' busy time in /proc/stat less this process's own.
"""

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

FILES_ROOT = Path("/")  # where /proc and /sys are read (a test points it at a fake tree)
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")  # the cpu controller's mount in sys/fs/cgroup
# what sets OpenMP's wait policy: the standard's, GNU libgomp's spin count (it wins over the standard's), Intel's
OPENMP_WAIT_VARIABLES = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "KMP_BLOCKTIME")
LOAD_WINDOW_S = 0.5  # other work is measured over at least this long (/proc/stat counts in 10 ms ticks)


def usable_cpus(root: Optional[Path] = None) -> int:
    """The CPUs this process may use, at least 1: its affinity, at most the tightest cgroup quota rounded up
    (with a quota of 1.5 CPUs, 2 threads use it all where 1 would leave a third of it unused)."""
    root = FILES_ROOT if root is None else root
    affinity = getattr(os, "sched_getaffinity", None)
    count = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    quota = cgroup_cpu_quota(root)
    if quota is not None:
        count = min(count, math.ceil(quota))
    return max(1, count)


def omp_threads() -> Optional[int]:
    """`OMP_NUM_THREADS` where it is a positive count (torch reads it; ONNX Runtime does not), else None."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def openmp_spins(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether OpenMP's threads spin when out of work, as the environment says (read as the runtimes read it:
    GOMP_SPINCOUNT, where set, over OMP_WAIT_POLICY; KMP_BLOCKTIME=0 for Intel's). The environment as it was
    when torch was imported counts; this reads it now."""
    environ = os.environ if environ is None else environ
    spin_count = environ.get("GOMP_SPINCOUNT", "").strip()
    if spin_count:
        return spin_count != "0"
    if environ.get("OMP_WAIT_POLICY", "").strip().lower() == "passive":
        return False
    return environ.get("KMP_BLOCKTIME", "").strip() != "0"


@dataclass(frozen=True)
class CpuTimes:
    """At one moment: the wall clock, busy seconds of the CPUs in this process's affinity (all their work,
    this process's included; time the hypervisor stole counts as busy), this process's CPU seconds."""

    wall: float
    cpus: int
    busy: float
    own: float


class OtherWork:
    """CPUs' worth of other processes' work on the CPUs this process may run on, measured between readings:
    their busy time (/proc/stat) less this process's own CPU time, over the wall time."""

    def __init__(
        self,
        root: Optional[Path] = None,
        clock: Callable[[], float] = time.monotonic,
        own_cpu: Callable[[], float] = time.process_time,
        window_s: float = LOAD_WINDOW_S,
    ) -> None:
        self.root, self.clock, self.own_cpu, self.window_s = root, clock, own_cpu, window_s
        self._last = self.sample()
        self._measured: Optional[tuple[int, float]] = None

    def sample(self) -> Optional[CpuTimes]:
        """The CPU times now; None where /proc/stat does not name the CPUs of this process's affinity."""
        wall, own = self.clock(), self.own_cpu()
        affinity = getattr(os, "sched_getaffinity", None)
        cpus = {f"cpu{n}" for n in (affinity(0) if affinity is not None else ())}
        ticks = 0
        found = 0
        for line in _read((FILES_ROOT if self.root is None else self.root) / "proc/stat").splitlines():
            fields = line.split()
            if fields and fields[0] in cpus:
                counts = [int(field) for field in fields[1:9] if field.isdigit()]
                if len(counts) < 4:
                    return None
                counts += [0] * (8 - len(counts))  # user nice system idle iowait irq softirq steal
                ticks += sum(counts) - counts[3] - counts[4]
                found += 1
        if not cpus or found != len(cpus):
            return None
        return CpuTimes(wall, found, ticks / _ticks_per_second(), own)

    def cpus(self) -> Optional[tuple[int, float]]:
        """(CPUs in this process's affinity, others' work on them in CPUs) over the time since the reading
        before, read once at least `window_s` has passed (within it, the last value, /proc/stat unread); None
        where it cannot be measured."""
        if self._last is not None and self.clock() - self._last.wall < self.window_s:
            return self._measured
        now = self.sample()
        if now is None or self._last is None or now.cpus != self._last.cpus:
            self._last, self._measured = now, None
            return None
        others = (now.busy - self._last.busy) - (now.own - self._last.own)
        self._measured = (now.cpus, max(0.0, others / (now.wall - self._last.wall)))
        self._last = now
        return self._measured


def threads_beside_other_work(limit: int, other_work: Optional[OtherWork] = None) -> int:
    """At most `limit` threads, and, where other processes are at work on this process's CPUs, no more than
    the CPUs they leave idle (at least 1; half a CPU or more of their work takes a thread). `limit` where
    the work cannot be measured (no /proc/stat naming this process's CPUs), or in the first `LOAD_WINDOW_S`
    after this module is imported (which importing spacy_elmo does)."""
    measured = (OTHER_WORK if other_work is None else other_work).cpus()
    if measured is None or limit <= 1:
        return limit
    cpus, others = measured
    return max(1, min(limit, math.floor(cpus - others + 0.5)))


def cgroup_cpu_quota(root: Path) -> Optional[float]:
    """The tightest CPU quota (in CPUs) over this process's cgroup and those above it, v2 and v1, or None."""
    own = _own_cgroups(root)
    mount = root / "sys/fs/cgroup"
    quotas = [_quota(*_read(d / "cpu.max").partition(" ")[::2]) for d in _lineage(mount, own.get("", "/"))]
    v1 = next((mount / name for name in V1_CPU_MOUNTS if (mount / name).is_dir()), None)
    if v1 is not None:
        lineage = _lineage(v1, own.get("cpu", "/"))
        quotas += [_quota(_read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")) for d in lineage]
    return min((q for q in quotas if q is not None), default=None)


def _own_cgroups(root: Path) -> dict[str, str]:
    """Controller -> this process's cgroup path, from /proc/self/cgroup ("" names the v2 hierarchy)."""
    paths = {}
    for line in _read(root / "proc/self/cgroup").splitlines():
        fields = line.split(":", 2)
        if len(fields) == 3:
            for controller in fields[1].split(","):
                paths[controller] = fields[2]
    return paths


def _lineage(mount: Path, path: str) -> list[Path]:
    """The directory of cgroup `path` under `mount` and those above it up to the mount; the mount alone where
    `path` is not under it (in a cgroup namespace, a container's, the mount is the process's own cgroup)."""
    parts = Path(path.lstrip("/")).parts
    if not mount.joinpath(*parts).is_dir():
        return [mount]
    return [mount.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _quota(quota: str, period: str) -> Optional[float]:
    """quota / period in CPUs; None for no limit ("max" in v2, -1 in v1) or a missing or unreadable file."""
    try:
        quota_us, period_us = int(quota), int(period)
    except ValueError:
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def _ticks_per_second() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (AttributeError, ValueError, OSError):
        return 100


def _read(file: Path) -> str:
    try:
        return file.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


OTHER_WORK = OtherWork()  # measured from when spacy_elmo is imported
