"""How many CPUs this process may use: its CPU affinity (`taskset`, a container's cpuset), capped by the
CPU quota of its cgroup and of the cgroups above it (v2 `cpu.max`, v1 `cpu.cfs_quota_us`). torch and ONNX
Runtime start a thread per core they see and read no quota; threads beyond what a process may use wait on
each other, and a run with them is several times slower than one with fewer."""

import math
import os
from pathlib import Path
from typing import Optional

FILES_ROOT = Path("/")  # where /proc and /sys are read (a test points it at a fake tree)
V1_CPU_MOUNTS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")  # the cpu controller's mount in sys/fs/cgroup


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


def cgroup_cpu_quota(root: Path) -> Optional[float]:
    """The tightest CPU quota (in CPUs) over this process's cgroup and those above it, v2 and v1, or None."""
    own = _own_cgroups(root)
    mount = root / "sys/fs/cgroup"
    quotas = [_quota(*_read(d / "cpu.max").partition(" ")[::2]) for d in _lineage(mount, own.get("", "/"))]
    for name in V1_CPU_MOUNTS:
        if (mount / name).is_dir():
            lineage = _lineage(mount / name, own.get("cpu", "/"))
            quotas += [_quota(_read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")) for d in lineage]
            break
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


def _read(file: Path) -> str:
    try:
        return file.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""
