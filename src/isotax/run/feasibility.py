"""Whether this host can run a plan at all, decided when the plan is loaded: a plan that asks
more than the host has is refused in one line (exit 2), before the store, the image or any
environment is touched. `isotax run` asks it of every plan, a resumed run's stored one too.

The plan itself (isotax.plan) checks what needs no host: kinds, each kind's declared options,
networks and storages. Here, against this host's facts (HostFacts.here()):

  - an environment's memory_mib against the host's memory (MemTotal), its vcpus against the
    host's CPUs, its numa_node against the host's NUMA nodes and the kind's supports_numa;
  - each workload point's Needs (the workload's host_needs(): the memory it takes inside the
    environment, host memory beside it, open files in one process, disk) against what the
    environment can give: its memory_mib, else the host's memory; the lower of the
    RLIMIT_NOFILE hard limit (which the environments and the load generator's clients
    inherit) and fs.nr_open; the size of the filesystem a run's files go to.

Each problem is one line: the place in the plan, what it asks, what the host has, and the fix.
Needs are lower bounds: a point that passes may still fail when it runs (its cell says why);
one refused here could not have run.
"""

from __future__ import annotations

import functools
import os
import resource
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isotax import protocols
from isotax.environments.base import mem_total_bytes
from isotax.host.facts import numa
from isotax.plan import EnvironmentEntry, Plan, PlanError
from isotax.protocols import Need

MIB = 1 << 20
# Where the runner makes each run's work directory (Runner.run): fio's files, the VMs' disks,
# the containers' volumes and overlay roots live under it.
WORK_ROOT = Path("/var/tmp")
NR_OPEN = Path("/proc/sys/fs/nr_open")


@dataclass(frozen=True)
class HostFacts:
    """What a plan is checked against (HostFacts.here(), or made up in tests)."""

    memory_bytes: int  # MemTotal
    cpus: int
    numa_nodes: Mapping[int, Sequence[int]]  # node -> its CPUs
    open_files: int  # descriptors one process may hold: min(RLIMIT_NOFILE hard, fs.nr_open)
    open_files_words: str = ""  # where that number comes from
    disk_bytes: int | None = None  # the size of WORK_ROOT's filesystem; None: unknown
    disk_where: str = str(WORK_ROOT)

    @classmethod
    def here(cls) -> HostFacts:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        try:
            nr_open: int | None = int(NR_OPEN.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            nr_open = None
        limits = [v for v in (None if hard == resource.RLIM_INFINITY else hard, nr_open)
                  if v is not None]
        words = ", ".join(w for w in (
            f"RLIMIT_NOFILE hard limit {hard}" if hard != resource.RLIM_INFINITY else "",
            f"fs.nr_open {nr_open}" if nr_open is not None else "") if w)
        try:
            st = os.statvfs(WORK_ROOT)
            disk: int | None = st.f_blocks * st.f_frsize
        except OSError:
            disk = None
        return cls(memory_bytes=mem_total_bytes(), cpus=os.cpu_count() or 1,
                   numa_nodes=numa.nodes(), open_files=min(limits) if limits else 1 << 30,
                   open_files_words=words, disk_bytes=disk)


def size_words(n: float) -> str:
    """Bytes in the largest binary unit that keeps a number >= 1: "23.5 GiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # unreachable


def _env_place(i: int, e: EnvironmentEntry) -> str:
    return f'environments[{i}] ("{e.name}")'


def environment_problems(plan: Plan, source: str, host: HostFacts) -> list[str]:
    """What each environment asks beyond the host: memory, CPUs, a NUMA node."""
    out = []
    kinds = protocols.environments()
    for i, e in enumerate(plan.environments):
        at = f"{source}: {_env_place(i, e)}"
        if e.memory_mib is not None and e.memory_mib * MIB > host.memory_bytes:
            out.append(f"{at}.memory_mib: {e.memory_mib} MiB ({size_words(e.memory_mib * MIB)})"
                       f" is more than this host's memory, {size_words(host.memory_bytes)} "
                       f"(MemTotal); lower memory_mib to {host.memory_bytes // MIB} at most")
        if e.vcpus is not None and e.vcpus > host.cpus:
            out.append(f"{at}.vcpus: {e.vcpus} is more than this host's {host.cpus} CPUs; "
                       f"lower vcpus to {host.cpus} at most")
        if e.numa_node is not None:
            if not kinds[e.kind].supports_numa:  # the kind's declared fact
                out.append(f"{at}.numa_node: kind {e.kind!r} does not place CPUs and memory "
                           "on a NUMA node; remove numa_node from it")
            elif e.numa_node not in host.numa_nodes:
                have = ", ".join(map(str, sorted(host.numa_nodes))) or "none"
                out.append(f"{at}.numa_node: NUMA node {e.numa_node} does not exist on this "
                           f"host (its nodes: {have}); use one of those, or remove numa_node")
            elif not host.numa_nodes[e.numa_node]:
                out.append(f"{at}.numa_node: NUMA node {e.numa_node} has no CPUs (memory only) "
                           "to run on; use a node with CPUs")
    return out


def _asks(at: str, need: Need, point: Mapping[str, Any]) -> str:
    """The place of a point's need and what it asks: `<at>.corpus_mib: corpus_mib = 64 needs`
    (the parameter in the place where one sets it)."""
    below = f".{need.params[0]}" if len(need.params) == 1 else ""
    asks = ", ".join(f"{p} = {point.get(p)!r}" for p in need.params)
    return f"{at}{below}: {asks} needs"


def workload_problems(plan: Plan, source: str, host: HostFacts) -> list[str]:
    """Each workload point's Needs against what the host and each environment can give."""
    out: list[str] = []
    registered = protocols.workloads()
    for i, w in enumerate(plan.workloads):
        workload = registered[w.name]()
        at = f'{source}: workloads[{i}] ("{w.name}").params'
        for point in w.combinations():
            needs = workload.host_needs(point)
            place = functools.partial(_asks, at, point=point)

            mem = needs.memory
            if mem is not None and mem.amount > host.memory_bytes:
                out.append(f"{place(mem)} {size_words(mem.amount)} of memory ({mem.what}), "
                           f"more than this host has, {size_words(host.memory_bytes)} "
                           f"(MemTotal); lower {' or '.join(mem.params)}")
            elif mem is not None:
                for e in plan.environments:
                    if e.memory_mib is not None and mem.amount > e.memory_mib * MIB:
                        out.append(f"{place(mem)} {size_words(mem.amount)} of memory "
                                   f"({mem.what}), more than environment {e.name!r} has, "
                                   f"{size_words(e.memory_mib * MIB)} (its memory_mib); "
                                   f"lower {' or '.join(mem.params)}, or raise its memory_mib")
            hm = needs.host_memory
            if hm is not None and hm.amount > host.memory_bytes:
                out.append(f"{place(hm)} {size_words(hm.amount)} of host memory ({hm.what}), "
                           f"more than this host has, {size_words(host.memory_bytes)} "
                           f"(MemTotal); lower {' or '.join(hm.params)}")
            fds = needs.open_files
            if fds is not None and fds.amount > host.open_files:
                out.append(f"{place(fds)} {fds.amount} open files in one process ({fds.what}),"
                           f" more than this host allows, {host.open_files} "
                           f"({host.open_files_words or 'its limits'}); lower "
                           f"{' or '.join(fds.params)}, or raise the limit (ulimit -Hn, nofile "
                           "in /etc/security/limits.conf; sysctl fs.nr_open)")
            disk = needs.disk
            if disk is not None and host.disk_bytes is not None \
                    and disk.amount > host.disk_bytes:
                out.append(f"{place(disk)} {size_words(disk.amount)} of disk ({disk.what}), "
                           f"more than the filesystem of {host.disk_where} (where a run's files"
                           f" go) holds, {size_words(host.disk_bytes)}; lower "
                           f"{' or '.join(disk.params)}")
    return list(dict.fromkeys(out))  # a sweep may repeat one line


def problems(plan: Plan, source: str = "plan", host: HostFacts | None = None) -> list[str]:
    """Everything the plan asks beyond this host (or `host`), one line each; [] when it fits."""
    host = host if host is not None else HostFacts.here()
    return environment_problems(plan, source, host) + workload_problems(plan, source, host)


def check(plan: Plan, source: str = "plan", host: HostFacts | None = None) -> None:
    """Raise PlanError with the first problem (and how many more there are), if any."""
    found = problems(plan, source, host)
    if found:
        more = f" (and {len(found) - 1} more problem(s))" if len(found) > 1 else ""
        raise PlanError(found[0] + more)
