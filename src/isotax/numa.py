"""NUMA placement (the Project Pacific lesson: a scheduler that keeps a VM's vCPUs and memory on
one node beat bare metal whose threads and pages wandered).

A plan can pin an environment's CPUs and memory to one node (`numa_node = N`) or leave them
to the scheduler (unset). On a host with more than one node each cell records the share of
its memory allocations that were node-local, from the kernel's per-node counters
(/sys/devices/system/node/node*/numastat: `local_node` and `other_node` count allocations a
process on that node got on its own node and on another); host-wide, so another tenant's
allocations count too. On a single-node host every allocation is local: placement cannot
matter, and the report says so instead of showing a 100% that means nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

NODE_ROOT = Path("/sys/devices/system/node")


def parse_cpulist(text: str) -> list[int]:
    """A kernel CPU list ("0-3,8,10-11") -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def parse_numastat(text: str) -> dict[str, int]:
    """A node's numastat file -> {counter: pages}."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    if "local_node" not in out or "other_node" not in out:
        raise ValueError("no local_node/other_node counters: not a node's numastat")
    return out


def nodes(root: Path = NODE_ROOT) -> dict[int, list[int]]:
    """The host's NUMA nodes and their CPUs; {0: all CPUs} where the kernel shows none."""
    found = {}
    for d in sorted(root.glob("node[0-9]*")):
        try:
            found[int(d.name[4:])] = parse_cpulist((d / "cpulist").read_text())
        except (OSError, ValueError):
            continue
    return found


def counters(root: Path = NODE_ROOT) -> dict[int, dict[str, int]]:
    out = {}
    for d in sorted(root.glob("node[0-9]*")):
        try:
            out[int(d.name[4:])] = parse_numastat((d / "numastat").read_text())
        except (OSError, ValueError):
            continue
    return out


def local_share(before: Mapping[int, Mapping[str, int]],
                after: Mapping[int, Mapping[str, int]]) -> float | None:
    """Node-local share of the allocations between two readings, over all nodes; None when
    nothing was allocated."""
    local = sum(after[n]["local_node"] - before[n]["local_node"] for n in after if n in before)
    other = sum(after[n]["other_node"] - before[n]["other_node"] for n in after if n in before)
    total = local + other
    return local / total if total > 0 else None


def numactl_prefix(node: int | None) -> list[str]:
    """The argv prefix that binds a process's CPUs and memory to one node (none if unset)."""
    if node is None:
        return []
    return ["numactl", f"--cpunodebind={node}", f"--membind={node}"]
