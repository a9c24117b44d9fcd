"""Exact CPU time of a group of processes, from the kernel's cgroup CPU accounting.

Sampling /proc misses what a short-lived process did after the last sample before it exited;
a cgroup's CPU counter does not: it keeps what every member ever used, the exited included.
So isotax reads a cgroup's counter at both ends of a measured run for
  - a container (runc, crun, docker, podman, nspawn): the group its runtime made for it; every
    `exec` joins it;
  - the native environment and the load generator: a group isotax makes for each
    (`itx-native-<tag>`, `itx-lg-<tag>`), which every command they run joins before it starts
    (`CpuGroup.wrap`). Being in a child group costs nothing measurable: cgroup v1's cpuacct
    counts every task in some group anyway (the root one otherwise).
v1 reads cpuacct.usage (ns); v2 reads cpu.stat's usage_usec, present in every v2 group.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path

from isotax.parsers import procfs

ROOT = Path("/sys/fs/cgroup")


def parse_cpuacct_line(text: str) -> str | None:
    """The cpuacct (v1) or unified (v2, "0::") path of /proc/PID/cgroup text; the v1 one when
    both exist. Pure."""
    v1, v2 = procfs.parse_pid_cgroup(text, "cpuacct")
    return v1 if v1 is not None else v2


def parse_cpu_stat_usage(text: str) -> float:
    """Seconds from a v2 cpu.stat's usage_usec. Pure."""
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k == "usage_usec":
            return int(v) / 1e6
    raise ValueError("no usage_usec: not the text of a cgroup v2 cpu.stat")


def _v1_dir() -> Path | None:
    for name in ("cpuacct", "cpu,cpuacct"):
        d = ROOT / name
        if (d / "cpuacct.usage").exists():
            return d
    return None


def _v2_root() -> Path:
    return ROOT / "unified" if (ROOT / "unified").is_dir() else ROOT


def group_dir_of(pid: int) -> Path | None:
    """The directory of pid's CPU-accounting group; None when it is a hierarchy's root (no
    group of its own) or cannot be read."""
    try:
        path = parse_cpuacct_line(Path(f"/proc/{pid}/cgroup").read_text())
    except OSError:
        return None
    if path is None or path in ("/", ""):
        return None
    v1 = _v1_dir()
    d = (v1 if v1 is not None else _v2_root()) / path.lstrip("/")
    return d if d.is_dir() else None


def usage_s(d: Path) -> float:
    """CPU seconds every member of the group at d ever used (its sub-groups included)."""
    acct = d / "cpuacct.usage"
    if acct.exists():
        return int(acct.read_text()) / 1e9
    return parse_cpu_stat_usage((d / "cpu.stat").read_text())


def common_group(pids: Sequence[int]) -> Path | None:
    """The outermost group among pids' groups that holds all the others (a container's group,
    where its init system made sub-groups); None when they share none."""
    dirs = [d for d in (group_dir_of(p) for p in pids) if d is not None]
    if not dirs:
        return None
    top = min(dirs, key=lambda d: len(d.parts))
    return top if all(d == top or top in d.parents for d in dirs) else None


class CpuGroup:
    """A CPU-accounting group isotax makes for commands it starts (native, load generator);
    as a load generator's meter (protocols.ClientsCpu) it keeps its total only."""

    source = "cgroup CPU accounting"
    cpus: int | None = None  # the clients share this host's CPUs

    def __init__(self, name: str) -> None:
        if not name.startswith("itx-"):
            raise ValueError("isotax's cgroups are named itx-*")
        v1 = _v1_dir()
        self.dir = (v1 if v1 is not None else _v2_root()) / name
        self.dir.mkdir(exist_ok=True)

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """argv run so that it joins this group before it starts (its children follow)."""
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(self.dir), *argv]

    def usage_s(self) -> float:
        return usage_s(self.dir)

    def mark(self) -> int | None:
        return None  # a total, not per command

    def busiest_since(self, mark: int) -> float | None:
        return None

    def remove(self) -> None:
        """Remove the group; members still alive are moved to the root group first."""
        procs = self.dir / "cgroup.procs"
        root = self.dir.parent / "cgroup.procs"
        for _ in range(50):
            try:
                left = procs.read_text().split()
            except OSError:
                return  # already gone
            for pid in left:
                with contextlib.suppress(OSError):
                    root.write_text(pid)
            try:
                os.rmdir(self.dir)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)
        raise OSError(f"CPU accounting group {self.dir} kept members for a second")
