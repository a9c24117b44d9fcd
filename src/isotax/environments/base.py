"""What every environment shares: its registration, the startup stopwatch, the guest helper's
ready marker, the guest PATH, and NUMA binding. The contract itself (Environment, Instance,
EnvSpec, Availability) is in isotax.protocols.

An Environment is a *kind* of place to run (native, runc, crun, qemu, ...). `start()` gives an
Instance: one running container or VM, from the shared workload image, that workloads drive
through `exec()`. Every Instance is stopped by the runner in a `finally`, on success, failure
and Ctrl-C; `stop()` must be idempotent and must remove every resource the instance created.
"""

from __future__ import annotations

import re
import time

from isotax.host.numa import node_cpuset
from isotax.protocols import ENVIRONMENTS, Availability, Environment, EnvSpec, Unavailable


def bound_cpus(who: str, spec: EnvSpec) -> str | None:
    """The cpuset CPU list of an instance bound to the plan's numa_node (the node's CPUs, the
    first vcpus of them where the plan limits the count); None when it is not bound. A node
    that cannot hold it makes the environment unavailable, with the fix."""
    if spec.numa_node is None:
        return None
    try:
        return node_cpuset(spec.numa_node, spec.vcpus)
    except ValueError as e:
        raise Unavailable(Availability.no(f"{who}: {e}", "fix numa_node in the plan")) from e


class Stopwatch:
    """Milestones relative to a start time, for startup reporting."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> float:
        self.marks[name] = time.monotonic() - self.t0
        return self.marks[name]


# isotax's guest helper that marks the first instruction (and holds a container open as PID 1).
READY_HELPER = "/opt/isotax/bin/itx-ready"
READY_MARKER = "ITX-READY"


def parse_ready_marker(text: str) -> int | None:
    """The CLOCK_MONOTONIC ns of the first `ITX-READY <ns>` line, None when unstamped."""
    m = re.search(rf"^{READY_MARKER} (\d+)\s*$", text, re.MULTILINE)
    return int(m.group(1)) if m else None


# PATH inside every environment: isotax's helpers first, then Debian's usual directories.
GUEST_PATH = "/opt/isotax/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GUEST_ENV = {"PATH": GUEST_PATH, "HOME": "/root", "LANG": "C.UTF-8"}


def register(cls: type[Environment]) -> type[Environment]:
    """Class decorator: record an environment kind in the registry (isotax.protocols)."""
    ENVIRONMENTS[cls.kind] = cls
    return cls
