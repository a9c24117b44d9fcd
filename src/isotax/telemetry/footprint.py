"""What one instance costs the host in memory: the PSS of every host process that belongs to it,
plus the kernel memory charged to its cgroup where it has one.

PSS (proportional set size) splits each shared page between the processes that map it, so the
footprints of K instances add up to what they really take together: K containers sharing the
image's libraries from the page cache are not charged K times for them, while each VM's guest
RAM (private to its qemu process) is charged in full. Kernel memory (page tables, slab, socket
buffers, the container's own mount and namespace structures) is not in any process's PSS; a
cgroup counts it (v1: memory.kmem.usage_in_bytes; v2: memory.stat's `kernel`).

Which processes belong to an instance is the environment's answer (`Instance.host_pids()`):
the container's cgroup for runc and crun (there is no shim: `runc run --detach` leaves no
parent process behind), qemu and its children for a VM, the holding process natively. Every
descendant of those processes is included.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from isotax.parsers import procfs
from isotax.protocols import Instance


def parse_smaps_rollup(text: str) -> dict[str, int]:
    """The `Name: N kB` fields of /proc/PID/smaps_rollup, in bytes."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if sep and len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[name.strip()] = int(parts[0]) * 1024
    if "Pss" not in out:
        raise ValueError("no Pss line: not the text of /proc/PID/smaps_rollup")
    return out


def parse_memory_stat_kernel(text: str) -> int:
    """Kernel memory of a cgroup v2 group from its memory.stat, in bytes: the `kernel` field
    (Linux 5.18+), else the sum of the kernel-side fields older kernels list one by one."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            fields[parts[0]] = int(parts[1])
    if "kernel" in fields:
        return fields["kernel"]
    kernel_side = ("kernel_stack", "pagetables", "percpu", "sock", "slab", "vmalloc")
    if not any(k in fields for k in kernel_side):
        raise ValueError("no kernel memory fields: not the text of a cgroup v2 memory.stat")
    return sum(fields.get(k, 0) for k in kernel_side)


def with_descendants(roots: Iterable[int], parents: Mapping[int, int]) -> list[int]:
    """roots and every process below them, given each process's parent."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo += children.get(pid, [])
    return sorted(seen)


def process_parents() -> dict[int, int]:
    out: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                out[int(name)] = procfs.parse_pid_stat(
                    Path(f"/proc/{name}/stat").read_text()).ppid
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile, or a kernel thread's odd line
    return out


@dataclass(frozen=True)
class ProcessMemory:
    pid: int
    name: str
    pss_bytes: int


@dataclass(frozen=True)
class Footprint:
    processes: tuple[ProcessMemory, ...]
    kernel_bytes: int | None  # None where the instance has no cgroup of its own

    @property
    def pss_bytes(self) -> int:
        return sum(p.pss_bytes for p in self.processes)

    @property
    def total_bytes(self) -> int:
        return self.pss_bytes + (self.kernel_bytes or 0)

    def by_program(self) -> dict[str, int]:
        """PSS per program name (e.g. {"qemu-system-x86": ..., "itx-ready": ...})."""
        out: dict[str, int] = {}
        for p in self.processes:
            out[p.name] = out.get(p.name, 0) + p.pss_bytes
        return out


def resident_bytes(rollup: Mapping[str, int]) -> int:
    """A process's share of memory: its PSS plus its hugetlbfs pages, which PSS leaves out
    (a VM whose RAM is on hugepages would otherwise look nearly free). Shared hugepages are
    counted in full: they are mapped by one VM's qemu here."""
    return rollup["Pss"] + rollup.get("Private_Hugetlb", 0) + rollup.get("Shared_Hugetlb", 0)


def program_name(comm: str, cmdline: bytes) -> str:
    """What to call a process in a footprint: its comm, except for programs that re-exec
    themselves through /proc/self/exe (runsc's Sentry and Gofer are all "exe" there), which
    are named by their argv[0] (e.g. "runsc-sandbox")."""
    name = comm.strip()
    args = procfs.parse_cmdline(cmdline)
    if name == "exe" and args:
        return os.path.basename(args[0]) or name
    return name


# gVisor's Sentry runs the sandbox's application threads in stub processes (systrap) or
# tracees (ptrace): re-executions of runsc with no arguments at all, so argv[0] cannot name
# them. They are named after what they are, by their place below the Sentry.
SENTRY, STUB = "runsc-sandbox", "runsc-stub"


def program_names(pids: Sequence[int], parents: Mapping[int, int],
                  proc: Path = Path("/proc")) -> dict[int, str]:
    """program_name() of each process (those that exit meanwhile are left out), with a nameless
    re-executed child of gVisor's Sentry, or of its stubs, called STUB."""
    raw: dict[int, tuple[str, bytes]] = {}
    for pid in pids:
        try:
            raw[pid] = ((proc / str(pid) / "comm").read_text(),
                        (proc / str(pid) / "cmdline").read_bytes())
        except OSError:
            continue
    names = {pid: program_name(comm, cmdline) for pid, (comm, cmdline) in raw.items()}
    nameless = [pid for pid, (comm, cmdline) in raw.items()
                if comm.strip() == "exe" and not cmdline]
    changed = True
    while changed:  # stubs of stubs: until no name changes (a child's PID may be the lower)
        changed = False
        for pid in nameless:
            if names[pid] != STUB and names.get(parents.get(pid, 0)) in (SENTRY, STUB):
                names[pid] = STUB
                changed = True
    return names


def process_memory(pids: Sequence[int], parents: Mapping[int, int]
                   ) -> tuple[ProcessMemory, ...]:
    """PSS of each process (those that exit meanwhile are left out)."""
    names = program_names(pids, parents)
    out = []
    for pid, name in names.items():
        try:
            rollup = parse_smaps_rollup(Path(f"/proc/{pid}/smaps_rollup").read_text())
        except (OSError, ValueError):
            continue
        out.append(ProcessMemory(pid, name, resident_bytes(rollup)))
    return tuple(out)


def cgroup_kernel_bytes(v1_memory_dir: Path | None, v2_dir: Path | None) -> int | None:
    """Kernel memory charged to a cgroup: v1's kmem counter, else v2's memory.stat."""
    if v1_memory_dir is not None:
        try:
            return int((v1_memory_dir / "memory.kmem.usage_in_bytes").read_text().strip())
        except (OSError, ValueError):
            pass
    if v2_dir is not None:
        try:
            return parse_memory_stat_kernel((v2_dir / "memory.stat").read_text())
        except (OSError, ValueError):
            pass
    return None


def measure(inst: Instance) -> Footprint:
    """The host memory one instance holds now."""
    parents = process_parents()
    pids = with_descendants(inst.host_pids(), parents)
    return Footprint(process_memory(pids, parents), inst.kernel_memory_bytes())


def idle_words(inst: Instance) -> str:
    """What the started instance holds on the host before any workload, in words: its total
    and the programs it comes from (a sandbox's Sentry and Gofer, QEMU, an engine's shim)."""
    fp = measure(inst)
    mib = 1024 * 1024
    parts = [f"{name} {b / mib:.1f}" for name, b in
             sorted(fp.by_program().items(), key=lambda kv: -kv[1])[:4]]
    if fp.kernel_bytes:
        parts.append(f"cgroup kernel memory {fp.kernel_bytes / mib:.1f}")
    return f"{fp.total_bytes / mib:.1f} MiB" + (f" ({', '.join(parts)})" if parts else "")
