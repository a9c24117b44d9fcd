"""The local cluster's kubelets and their cgroups on this host. What the host has decides the
kubelet's cgroup driver, where its cgroup root is made and where a pod's cgroup is found:

- cgroup v1 (a legacy or hybrid tree, as on the development host): the cgroupfs driver, the
  root /itx-k8s made in every v1 hierarchy, a pod's cgroup at
  /sys/fs/cgroup/<hierarchy>/itx-k8s/kubepods/<qos>/pod<uid>.
- cgroup v2 with systemd as PID 1 (Debian 12 and 13, Ubuntu, Fedora, RHEL 9): the systemd
  driver, with containerd's runc and gVisor's shim to match. The kubelet reads its cgroupRoot
  (/itx-k8s, the same setting) as a cgroupfs path and names each group with CgroupName.ToSystemd
  (k8s.io/kubernetes v1.37.2, pkg/kubelet/cm/cgroup_manager_linux.go): every part's '-' becomes
  '_', the parts are joined with '-' plus ".slice", and systemd's slice expansion
  (opencontainers/cgroups systemd.ExpandSlice) nests each prefix. So the root is the slice
  itx_k8s.slice and a Burstable pod's cgroup
  /sys/fs/cgroup/itx_k8s.slice/itx_k8s-kubepods.slice/itx_k8s-kubepods-burstable.slice/
  itx_k8s-kubepods-burstable-pod<uid, '-' as '_'>.slice. Those slices are systemd units: the
  kubelet makes them as transient units through systemd, so they are stopped with systemctl,
  never removed with rmdir under systemd's feet.
- cgroup v2 without systemd: the cgroupfs driver, the root /sys/fs/cgroup/itx-k8s, with the
  kubelet's controllers enabled in /sys/fs/cgroup/cgroup.subtree_control.

Before it starts, the kubelet checks (cgroupManager.Validate) that its root exists and, on v2,
that it has every controller the kubelet uses (cpu, cpuset, memory, hugetlb, pids) that the
host's root has: make_root() sees to that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from isotax.host import command
from isotax.host.facts.cgroups import cpu_limit, memory_limit, remove_cgroup_tree
from isotax.parsers import procfs

CGROUP = Path("/sys/fs/cgroup")
# The controllers the kubelet needs in its root on v2 (getSupportedUnifiedControllers), where
# the host's root has them.
KUBELET_CONTROLLERS = ("cpu", "cpuset", "memory", "hugetlb", "pids")
# systemd's word for "enable this controller for the slice" (systemd.resource-control(5)):
# systemd then keeps it enabled in the root's cgroup.subtree_control itself. hugetlb has none:
# systemd does not manage it, and leaves it as the kubelet's runc (or isotax) enables it.
SLICE_PROPERTIES = ("CPUAccounting=yes", "MemoryAccounting=yes", "TasksAccounting=yes",
                    "IOAccounting=yes")
SYSTEMD_RUNTIME = Path("/run/systemd/system")  # sd_booted(3): systemd is the init system
DROP_INS = Path("/run/systemd/system.control")  # where `systemctl set-property --runtime` writes


@dataclass(frozen=True)
class CgroupLayout:
    """The host's cgroup tree as the kubelet sees it."""

    version: int  # 1: v1 hierarchies (legacy or hybrid); 2: the unified hierarchy only
    systemd: bool  # v2 under systemd: the systemd driver

    @property
    def driver(self) -> str:
        return "systemd" if self.systemd else "cgroupfs"

    def words(self) -> str:
        return {(1, False): "cgroup v1, the cgroupfs driver",
                (2, False): "cgroup v2 without systemd, the cgroupfs driver",
                (2, True): "cgroup v2 under systemd, the systemd driver"}[
            (self.version, self.systemd)]


V1 = CgroupLayout(1, False)
V2 = CgroupLayout(2, False)
V2_SYSTEMD = CgroupLayout(2, True)


def detect(mountinfo: str, pid1_comm: str, systemd_runtime_dir: bool) -> CgroupLayout:
    """The host's layout from its /proc/self/mountinfo, /proc/1/comm and whether
    /run/systemd/system is a directory. Pure. v2 where /sys/fs/cgroup itself is cgroup2 (the
    mount on top there: a hybrid host's cgroup2 is at /sys/fs/cgroup/unified); the systemd
    driver only where systemd both booted the host (sd_booted's test) and is PID 1: a
    container with a stray /run/systemd/system has no systemd to create slices."""
    on_top = [m.fstype for m in procfs.parse_mountinfo(mountinfo) if m.point == str(CGROUP)]
    if not on_top or on_top[-1] != "cgroup2":
        return V1
    return V2_SYSTEMD if systemd_runtime_dir and pid1_comm.strip() == "systemd" else V2


@lru_cache(maxsize=1)
def host() -> CgroupLayout:
    """This host's layout (it does not change while isotax runs)."""
    try:
        comm = Path("/proc/1/comm").read_text()
    except OSError:
        comm = ""
    return detect(Path("/proc/self/mountinfo").read_text(), comm, SYSTEMD_RUNTIME.is_dir())


# -- names (pure) -----------------------------------------------------------------------------

def to_systemd(parts: Sequence[str]) -> str:
    """The cgroupfs path the kubelet's systemd driver gives a cgroup name (its parts):
    CgroupName.ToSystemd, then systemd's slice expansion. Pure.
    ["itx-k8s", "kubepods"] -> "/itx_k8s.slice/itx_k8s-kubepods.slice"."""
    if not parts:
        return "/"
    name = "-".join(p.replace("-", "_") for p in parts)
    out, prefix = "", ""
    for component in name.split("-"):
        if not component:
            raise ValueError(f"cgroup name {list(parts)!r} has an empty part")
        out += f"/{prefix}{component}.slice"
        prefix += component + "-"
    return out


def group_path(layout: CgroupLayout, parts: Sequence[str]) -> str:
    """Where the kubelet puts the cgroup of that name, below a hierarchy's mount. Pure."""
    return to_systemd(parts) if layout.systemd else "/" + "/".join(parts)


def root_unit(root: str) -> str:
    """The slice unit a kubelet's cgroupRoot becomes under systemd: itx-k8s -> itx_k8s.slice.
    Pure."""
    return to_systemd([root]).rsplit("/", 1)[-1]


def root_dirs(layout: CgroupLayout, root: str, hierarchies: Sequence[str] = ()) -> list[Path]:
    """The directories of a kubelet's cgroup root: on v1 one in each hierarchy named, on v2
    the one. Pure."""
    rel = group_path(layout, [root]).lstrip("/")
    if layout.version == 1:
        return [CGROUP / h / rel for h in hierarchies]
    return [CGROUP / rel]


def pod_dir(layout: CgroupLayout, root: str, qos: str, uid: str, hierarchy: str) -> Path:
    """A pod's cgroup as its kubelet names it: under the root's kubepods, in its QoS class's
    group ("" for Guaranteed, "burstable", "besteffort"), named pod<uid>; on v1 in the
    hierarchy named, on v2 in the one tree (hierarchy unused). Pure."""
    parts = [root, "kubepods", *([qos] if qos else []), f"pod{uid}"]
    base = CGROUP / hierarchy if layout.version == 1 else CGROUP
    return base / group_path(layout, parts).lstrip("/")


# -- limits -----------------------------------------------------------------------------------

def limits_words(cpus: float | None, memory: int | None, cpuset: str) -> str:
    """A cgroup's limits in words. Pure."""
    return (f"CPU {'unlimited' if cpus is None else f'{cpus:g}'}, memory "
            f"{'unlimited' if memory is None else f'{memory >> 20} MiB'}, CPUs {cpuset or '?'}")


def read_limits(layout: CgroupLayout, dirs: dict[str, Path | None]) -> str:
    """The limits a cgroup really has, in words, read from its directories (by v1 hierarchy:
    cpu, memory, cpuset; on v2 every name is the one directory): cpu.max, memory.max and
    cpuset.cpus.effective on v2; the v1 files of the same meaning on v1. "" when unreadable."""
    def text(hierarchy: str, name: str) -> str:
        d = dirs.get(hierarchy)
        return (d / name).read_text() if d is not None else ""

    try:
        if layout.version == 2:
            return limits_words(cpu_limit(text("cpu", "cpu.max")),
                                memory_limit(text("memory", "memory.max")),
                                text("cpuset", "cpuset.cpus.effective").strip())
        return limits_words(cpu_limit(text("cpu", "cpu.cfs_quota_us"),
                                      text("cpu", "cpu.cfs_period_us")),
                            memory_limit(text("memory", "memory.limit_in_bytes")),
                            text("cpuset", "cpuset.effective_cpus").strip())
    except (OSError, ValueError):
        return ""


# -- making and removing a kubelet's root -----------------------------------------------------

class RootError(Exception):
    """A kubelet's cgroup root cannot be made; one line with the fix."""


def _v1_hierarchies(unified: bool = False) -> list[Path]:
    """The v1 hierarchies' mounts (cpu and cpuacct may be links to "cpu,cpuacct"); with
    unified, a hybrid host's cgroup2 too (runc puts a v1 container's processes there as
    well)."""
    return [h for h in CGROUP.iterdir() if (unified or h.name != "unified") and h.is_dir()
            and not h.is_symlink()]


def make_root(layout: CgroupLayout, root: str) -> None:
    """Make a kubelet's cgroupRoot as it checks it: in every v1 hierarchy (name=systemd
    included; cpuset's with the parent's CPUs and memory nodes), or on v2 the group (under
    systemd: its slice, started) with the kubelet's controllers."""
    if layout.version == 1:
        for hierarchy in _v1_hierarchies():
            (hierarchy / root).mkdir(exist_ok=True)
        cpuset = CGROUP / "cpuset"
        if (cpuset / root).is_dir():
            for f in ("cpuset.cpus", "cpuset.mems"):
                (cpuset / root / f).write_text((cpuset / f).read_text())
        return
    wanted = [c for c in KUBELET_CONTROLLERS
              if c in (CGROUP / "cgroup.controllers").read_text().split()]
    if layout.systemd:
        unit = root_unit(root)
        effective = CGROUP / "cpuset.cpus.effective"  # only where the host has cpuset
        cpus = effective.read_text().strip() if effective.exists() else ""
        for argv in (["systemctl", "set-property", "--runtime", unit, *SLICE_PROPERTIES,
                      *([f"AllowedCPUs={cpus}"] if cpus else [])],
                     ["systemctl", "start", unit]):
            done = command.run(argv, 60)
            if done.returncode != 0:
                raise RootError(f"{' '.join(argv)}: {done.stderr.strip()[-200:]}")
    # Enabled at the root as the kubelet's runc does for the groups below (fs2's
    # CreateCgroupPath): what systemd manages it keeps, hugetlb it leaves alone.
    control = CGROUP / "cgroup.subtree_control"
    missing = [c for c in wanted if c not in control.read_text().split()]
    if missing:
        try:
            control.write_text(" ".join(f"+{c}" for c in missing))
        except OSError as e:
            raise RootError(f"enabling the controllers {', '.join(missing)} in {control}: "
                            f"{e.strerror}") from None
    d = root_dirs(layout, root)[0]
    d.mkdir(exist_ok=True)  # under systemd the started slice made it
    lacking = [c for c in wanted if c not in (d / "cgroup.controllers").read_text().split()]
    if lacking:
        raise RootError(f"{d} lacks the controllers {', '.join(lacking)} the kubelet needs: "
                        f"enable them in {control}")


def remove_roots(layout: CgroupLayout, roots: Sequence[str], problems: list[str]) -> None:
    """Remove kubelets' cgroup roots and what is below them: under systemd by stopping the
    slices (their pods' slices and containers' scopes stop with them) and dropping the
    properties `make_root` set; otherwise (cgroupfs) by rmdir, deepest first."""
    if layout.systemd:
        units = [root_unit(r) for r in roots]
        command.run(["systemctl", "stop", *units], 120)
        command.run(["systemctl", "revert", *units], 60)
    hierarchies = [h.name for h in _v1_hierarchies(True)] if layout.version == 1 else []
    for root in roots:
        for d in root_dirs(layout, root, hierarchies):
            try:
                remove_cgroup_tree(d)
            except OSError as e:
                problems.append(f"cgroup {d}: {e.strerror}")


def roots_present(layout: CgroupLayout, roots: Sequence[str]) -> list[str]:
    """The kubelets' cgroup roots (and systemd's runtime properties for them) on this host,
    one line each."""
    hierarchies = [h.name for h in _v1_hierarchies(True)] if layout.version == 1 else []
    out = [f"cgroup {d}" for r in roots for d in root_dirs(layout, r, hierarchies)
           if d.is_dir()]
    if layout.systemd:
        with contextlib.suppress(OSError):
            out += [f"systemd properties {p}" for r in roots
                    if (p := DROP_INS / f"{root_unit(r)}.d").exists()]
    return out
