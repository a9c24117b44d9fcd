"""The host's cgroup layout, as far as the container runtimes care: crun (1.8) refuses a
hybrid host, cgroup v1 hierarchies beside a cgroup2 mounted at /sys/fs/cgroup/unified that has
controllers (this development VM's layout). isotax's crun (environments.oci) and the engines'
crun (dockerd, podman) then run with that mount detached in a private mount namespace. A fact
of the host, shared by those plugins, so none imports another for it. Also the removal of a
cgroup tree an instance made (nspawn's, a private dockerd's), and the processes in one."""

from __future__ import annotations

import contextlib
from pathlib import Path

from isotax.parsers import procfs

UNIFIED = "/sys/fs/cgroup/unified"


def hybrid_cgroup2_with_controllers(mountinfo: str, controllers: str) -> bool:
    """True when the host mounts cgroup v1 hierarchies and, beside them, a cgroup2 at
    /sys/fs/cgroup/unified that has controllers (the layout crun refuses). Pure."""
    v1 = v2_unified = False
    for m in procfs.parse_mountinfo(mountinfo):
        if m.fstype == "cgroup" and m.point.startswith("/sys/fs/cgroup/"):
            v1 = True
        if m.fstype == "cgroup2" and m.point == UNIFIED:
            v2_unified = True
    return v1 and v2_unified and bool(controllers.split())


def crun_needs_unified_detached() -> bool:
    """Whether crun must run here with /sys/fs/cgroup/unified detached (this host's layout)."""
    try:
        mi = Path("/proc/self/mountinfo").read_text()
        ctl = Path(UNIFIED, "cgroup.controllers")
        return hybrid_cgroup2_with_controllers(mi, ctl.read_text() if ctl.exists() else "")
    except OSError:
        return False


def remove_cgroup_tree(d: Path) -> None:
    """Remove a cgroup and the groups below it, deepest first (a runtime or the container's
    own systemd made groups below ours). One already gone is fine; an OSError says the top
    one could not be removed (tasks are still in it)."""
    if not d.is_dir():
        return
    for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                      reverse=True):
        with contextlib.suppress(OSError):
            sub.rmdir()
    d.rmdir()


def tree_pids(d: Path) -> list[int]:
    """Every process in the cgroup at d and its sub-groups, sorted; [] where none can be read
    (a group that went meanwhile)."""
    pids: set[int] = set()
    for procs in sorted(d.rglob("cgroup.procs")):
        with contextlib.suppress(OSError, ValueError):
            pids.update(procfs.parse_pids(procs.read_text()))
    return sorted(pids)


# -- limits, on either version ------------------------------------------------------------

def cpu_limit(quota: str, period: str = "") -> float | None:
    """CPUs a cgroup may use: v2's cpu.max ("max 100000", "150000 100000") alone, or v1's
    cpu.cfs_quota_us and cpu.cfs_period_us; None when unlimited. Pure."""
    if not period:
        quota, _, period = quota.strip().partition(" ")
    q = quota.strip()
    if q in ("max", "-1"):
        return None
    return int(q) / int(period)


def memory_limit(text: str) -> int | None:
    """Bytes from v2's memory.max or v1's memory.limit_in_bytes; None when unlimited (v2
    "max"; v1's largest value, page-aligned LONG_MAX). Pure."""
    t = text.strip()
    if t == "max":
        return None
    value = int(t)
    return None if value >= (1 << 62) else value
