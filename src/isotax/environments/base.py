"""The environment protocol: how isotax starts, drives and stops an isolation environment.

An Environment is a *kind* of place to run (native, runc, crun, qemu, ...). `start()` gives an
Instance: one running container or VM, from the shared workload image, that workloads drive
through `exec()`. Every Instance is stopped by the runner in a `finally`, on success, failure
and Ctrl-C; `stop()` must be idempotent and must remove every resource the instance created.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from isotax.host.numa import node_cpuset
from isotax.image.artifacts import ImageArtifacts


@dataclass(frozen=True)
class Availability:
    ok: bool
    reason: str = ""  # why not, when not ok
    fix: str = ""  # what the user can do about it

    @classmethod
    def yes(cls) -> Availability:
        return cls(True)

    @classmethod
    def no(cls, reason: str, fix: str = "") -> Availability:
        return cls(False, reason, fix)

    def __str__(self) -> str:
        if self.ok:
            return "available"
        return f"{self.reason}" + (f" (fix: {self.fix})" if self.fix else "")


class Unavailable(Exception):
    """Raised by start() when an environment turns out not to work; carries the Availability."""

    def __init__(self, availability: Availability) -> None:
        super().__init__(str(availability))
        self.availability = availability


@dataclass(frozen=True)
class EnvSpec:
    """What the plan asks of one environment. `options` holds kind-specific settings."""

    name: str  # the plan's label, e.g. "runc-bridge"
    kind: str  # the registry key, e.g. "runc"
    image: ImageArtifacts
    workdir: Path  # private scratch directory for this instance (removed by the runner)
    vcpus: int | None = None
    memory_mib: int | None = None
    network: str = "host"  # "host", "bridge" or "none"
    storage: str = "volume"  # "volume" or "rootfs": where `Instance.data_dir` lives
    numa_node: int | None = None  # CPUs and memory bound to this node; None: the scheduler's
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float  # measured by the host around the exec, includes the environment's exec path

    def check(self) -> Completed:
        """Raise with the command's own words when it failed."""
        if self.returncode != 0:
            tail = (self.stderr or self.stdout).strip().splitlines()[-5:]
            raise ExecError(
                f"{' '.join(self.argv)!s} exited {self.returncode}: " + " | ".join(tail)
            )
        return self


class ExecError(Exception):
    pass


class Instance(Protocol):
    """One running environment."""

    address: str  # IP reachable from the load generator ("127.0.0.1" for host networking)
    scratch: str  # a writable, tmpfs-backed directory *inside* the environment for workload files
    data_dir: str  # a writable directory inside the environment on the plan's storage path,
    #                for disk workloads (fio); on the host's disk, never tmpfs
    # Startup milestones, seconds since start() was called: every environment records the
    # PHASES below; some add their own (the VM's "kernel", "storage").
    milestones: Mapping[str, float]

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        """Run argv inside the environment with PATH including /opt/isotax/bin; never raises
        for a failing command (returncode 124 = timeout, 127 = not found)."""

    def describe(self) -> Mapping[str, str]: ...

    def pause(self) -> None:
        """Stop consuming CPU while another environment is measured (no-op where impossible)."""

    def resume(self) -> None: ...

    def stop(self) -> None: ...

    def host_pids(self) -> Sequence[int]:
        """The host processes that make up this instance (their descendants count too): what
        its memory footprint and CPU cost are measured on."""

    def kernel_memory_bytes(self) -> int | None:
        """Kernel memory charged to the instance's own cgroup; None where it has none."""


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


class Environment(Protocol):
    kind: ClassVar[str]
    description: ClassVar[str]

    def available(self) -> Availability: ...

    def start(self, spec: EnvSpec) -> Instance: ...


# The startup phases every environment records, in seconds from start():
#   create            - the runtime is asked (what came before is isotax's own preparation:
#                       bundle, network namespace, disk overlay);
#   started           - the runtime says the container's process or the VM runs;
#   first_instruction - isotax's guest helper ran: its ITX-READY marker (user code in the
#                       container, the guest's init in a VM, the first process natively);
#   ready             - the instance takes commands (a workload may add its own readiness,
#                       as the startup workload does with a server answering).
PHASES = ("create", "started", "first_instruction", "ready")


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


REGISTRY: dict[str, type[Environment]] = {}


def register(cls: type[Environment]) -> type[Environment]:
    REGISTRY[cls.kind] = cls
    return cls
