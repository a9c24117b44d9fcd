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

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TypeVar

from isotax.parsers.procfs import parse_cpulist

NODE_ROOT = Path("/sys/devices/system/node")
_T = TypeVar("_T")


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


def _per_node(root: Path, name: str, parse: Callable[[str], _T]) -> dict[int, _T]:
    """File `name` of every NUMA node under root, parsed; a node whose file cannot be read
    or parsed is left out."""
    out = {}
    for d in sorted(root.glob("node[0-9]*")):
        try:
            out[int(d.name[4:])] = parse((d / name).read_text())
        except (OSError, ValueError):
            continue
    return out


def nodes(root: Path = NODE_ROOT) -> dict[int, list[int]]:
    """The host's NUMA nodes and their CPUs; {} where the kernel shows none."""
    return _per_node(root, "cpulist", parse_cpulist)


def counters(root: Path = NODE_ROOT) -> dict[int, dict[str, int]]:
    """Each node's numastat counters (numa_hit, numa_miss, ...)."""
    return _per_node(root, "numastat", parse_numastat)


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


def format_cpulist(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5": the kernel's (and cpuset's, and Docker's) CPU list syntax."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def node_cpulist(node: int, root: Path | None = None) -> str:
    """The CPU list of one node as the kernel writes it ("0-1"), from <root>/node<N>/cpulist
    (root: NODE_ROOT, looked up at call time). ValueError, naming the node, where the node does
    not exist or has no CPUs (a memory-only node: nothing to run a container's threads on)."""
    path = (NODE_ROOT if root is None else root) / f"node{node}" / "cpulist"
    try:
        cpus = parse_cpulist(path.read_text())
    except OSError as e:
        raise ValueError(f"NUMA node {node} does not exist here ({path}: {e.strerror})") from e
    if not cpus:
        raise ValueError(f"NUMA node {node} has no CPUs (a memory-only node)")
    return format_cpulist(cpus)


def node_cpuset(node: int, vcpus: int | None = None, root: Path | None = None) -> str:
    """The cpuset CPU list of an environment bound to a node: the node's CPUs, the first
    `vcpus` of them where the plan also limits the CPU count (all of them where it asks for
    more than the node has: a cpuset cannot hold CPUs of another node without leaving it)."""
    cpus = parse_cpulist(node_cpulist(node, root))
    return format_cpulist(cpus[:vcpus] if vcpus else cpus)


def placement_words(node: int | None, how: str, cpus: str | None = None) -> str:
    """describe()'s "numa": "scheduler" when unset, else what is bound and by what."""
    if node is None:
        return "scheduler"
    if cpus is None:
        return f"CPUs and memory on node {node} ({how})"
    return f"CPUs {cpus} and memory on node {node} ({how})"
