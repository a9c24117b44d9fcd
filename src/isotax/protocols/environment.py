"""What an environment and an instance are: the contract every environment kind implements
(isotax.environments, on top of environments/base.py), and what the runner, the analysis and
the report ask of them."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from isotax.facts import Facts, Isolation
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols.params import ParamSpec
from isotax.protocols.starts import Burst

# ------------------------------------------------------------------------- environments


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


class StopIncomplete(Exception):
    """Instance.stop() could not remove everything it made: the message names what is left,
    in one line (everything else was removed; `isotax doctor --fix` removes the rest). The
    one exception stop() raises."""


# The plan's words for an environment's network and storage; each kind declares the ones it can
# do (Environment.networks, .storages).
# "pod" and "service": a Kubernetes pod on its CNI network, and behind a ClusterIP Service.
NETWORKS = ("host", "bridge", "none", "pod", "service")
STORAGES = ("volume", "rootfs")


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
    # time.monotonic() when this start was asked for (a Launcher's request): the instance's
    # milestones count from it, so a workload's own phases after them (startup's ready probes,
    # from Launched.t0) share their zero. None: from the beginning of start().
    requested_at: float | None = None


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


class PlatformLost(Exception):
    """What every instance of a kind stands on stopped answering (a cluster's API server):
    no cell can run and no instance restart until it is back. The run stops there, its
    committed cells kept, and `isotax run --resume` finishes it once it answers again. The
    message is one line naming what is lost and why."""


class Instance(Protocol):
    """One running environment."""

    address: str  # IP reachable from the load generator ("127.0.0.1" for host networking)
    scratch: str  # a writable, tmpfs-backed directory *inside* the environment for workload files
    data_dir: str  # a writable directory inside the environment on the plan's storage path,
    #                for disk workloads (fio); on the host's disk, never tmpfs
    # Startup milestones, seconds since start() was called: every environment records the
    # PHASES below; some add their own (the VM's "kernel", "storage").
    milestones: Mapping[str, float]

    @property
    def socket_stack(self) -> SocketStack:
        """What serves its processes' sockets (a workload asks, e.g. whether sockperf's TCP
        server can run there)."""

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        """Run argv inside the environment with PATH including /opt/isotax/bin; never raises
        for a failing command (returncode 124 = timeout, 127 = not found)."""

    def facts(self) -> Facts:
        """What it is, typed (isotax.facts): what the runner, the load generator, parity and
        the report read; its display words are rendered from these."""

    def pause(self) -> None:
        """Stop consuming CPU while another environment is measured (no-op where impossible)."""

    def resume(self) -> None: ...

    def stop(self) -> None:
        """Stop it and remove everything it made (processes, container, network, mounts,
        directories), also after it died. Idempotent: a second call does nothing. Every
        removal is tried even when one fails; then StopIncomplete names what is left, and
        nothing else is raised (environments.base.Removals)."""

    def alive(self) -> str:
        """"" while the instance can still run commands, else why not, in a few words ("QEMU
        exited (killed by signal 9)", "the gVisor sandbox (runsc-sandbox, pid 812) is gone").
        Cheap (a process poll, /proc, a runtime's state, an engine's inspect): the runner asks
        it before resuming a paused instance, after a failed cell and when pause or resume
        fails, and restarts a dead one (run.restarts). Never raises."""

    def host_pids(self) -> Sequence[int]:
        """The host processes that make up this instance (their descendants count too): what
        its memory footprint and CPU cost are measured on."""

    def kernel_memory_bytes(self) -> int | None:
        """Kernel memory charged to the instance's own cgroup; None where it has none."""


@runtime_checkable
class GuestStat(Protocol):
    """What an instance with a guest kernel offers where it can read the guest's /proc/stat
    without running a command (a VM's agent): isotax.telemetry.observe reads the guest's own
    CPU accounting at both ends of every measured run, and a command costs 0.1-0.3 s there
    under emulation. Instances without it are asked with exec()."""

    def guest_stat_open(self, interval_s: float) -> str | None:
        """The guest's /proc/stat now, and a sampler started in the guest that takes a marked
        reading ("itx-tick <uptime s>" then /proc/stat) now and every interval_s (none for 0);
        None where the guest cannot be asked this way."""

    def guest_stat_close(self) -> tuple[str, str] | None:
        """Stop the sampler: (its marked readings, the guest's /proc/stat now); None where the
        guest cannot be asked."""


@dataclass(frozen=True)
class Evidence:
    """What an instance shows of itself from inside (environments.evidence.PROBE), or the
    host of itself: what the identity check judges, kept with the environment's record."""

    boot_id: str
    pidns: str
    release: str
    version: str
    dmesg: str  # the first gVisor or hypervisor line of the kernel log ("" if none or refused)
    cgroup: str  # the first line of /proc/self/cgroup: evidence, not a rule

    def words(self) -> str:
        return (f"kernel {self.release} {self.version}, boot {self.boot_id[:8]}, {self.pidns}"
                + (f", dmesg {self.dmesg!r}" if self.dmesg else ""))


@dataclass(frozen=True)
class NodeIdentity:
    """The machine an instance runs on, where that is not this host: its kernel release and
    boot id (a Kubernetes Node's nodeInfo)."""

    release: str
    boot_id: str

    def as_host(self, version: str) -> Evidence:
        """The machine as the host an instance's evidence is judged against (its kernel's
        version string as the instance saw it: a Node object does not give it)."""
        return Evidence(boot_id=self.boot_id, pidns="", release=self.release, version=version,
                        dmesg="", cgroup="")


@runtime_checkable
class ElsewhereNode(Protocol):
    """What an instance offers that may run on another machine (a pod on another node): the
    identity check compares what it shows with that machine's kernel and boot, not this
    host's."""

    def node_identity(self) -> NodeIdentity | None:
        """The machine it runs on, where that is not this host; None where it is this host."""


@runtime_checkable
class ServiceEndpoints(Protocol):
    """What an instance offers that answers behind a Service beside other endpoints (a pod of
    a Service with `endpoints` > 1): a connection to the Service lands on any of them, so a
    workload whose every connection stands alone (its `spreads_over_endpoints`) starts its
    server in each of them too (workloads.servers.serving_everywhere), and the others are
    not applicable there."""

    def other_endpoints(self) -> Sequence[Instance]:
        """The other endpoints, each able to run commands (exec) and saying where it listens
        (facts); their lifecycle is this instance's. () where there are none."""


@runtime_checkable
class OwnCpuGroup(Protocol):
    """What an instance (or a load generator) offers whose processes run in a CPU-accounting
    group of their own (native's, a local load generator's): the telemetry reads its CPU
    time there instead of finding a common group of its processes."""

    def cpu_accounting_dir(self) -> Path | None:
        """The group's directory (cgroup v1's cpuacct or a v2 group); None without one."""


class SocketStack(StrEnum):
    """What serves the sockets of a process in an instance: a fact each environment declares
    (Instance.socket_stack), which a workload whose tool leans on Linux's socket corner cases
    asks, instead of recognising an environment by its kind."""

    LINUX = "linux"  # a Linux kernel's own stack: the host's, a container's netns, a guest's
    GVISOR_NETSTACK = "gvisor netstack"  # gVisor's own network stack, in its Sentry
    GVISOR_HOSTINET = "gvisor hostinet"  # the host's stack, reached through gVisor's Sentry


@dataclass(frozen=True)
class VersionCommand:
    """How to ask an environment's runtime its version: the host fingerprint records the first
    line argv prints under `name` (kinds that share a runtime share the name: every QEMU kind
    is "qemu"), "not installed" where argv[0] is not found."""

    name: str
    argv: tuple[str, ...]


class Stage(IntEnum):
    """The order leftovers are removed in: a container through its runtime before the processes
    still running (a runtime's delete thaws and kills its own), processes before the mounts and
    cgroups they hold, rules before the links they name, links before their namespaces."""

    CONTAINER = 0
    PROCESS = 1
    MOUNT = 2
    CGROUP = 3
    RULE = 4
    LINK = 5
    NETNS = 6
    FILE = 7
    SETTING = 8


class Leftover(str):
    """One thing isotax made and did not remove, as the line a person reads ("netns itx-lg1a2b3c
    (ip netns del itx-lg1a2b3c)": what it is, then the commands that remove it) with what
    removing it takes: the commands as argv (absolute where the program is not on PATH),
    or a `removal` function where a command cannot say it (a frozen cgroup's tasks), the
    Stage it is removed in, the names that tell its owner (host.owners marks) and, for a
    process, its PID (its owner is in its environment). `anyone`: no one run owns it (a host
    setting that the last isotax bridge restores), and its finder reports it only when nothing
    live needs it, so it may go whoever lives.

    A str, so every caller that reads leftovers as lines (the test suite's leak checks, set
    differences before and after) keeps doing so."""

    what: str
    commands: tuple[tuple[str, ...], ...]
    stage: Stage
    names: tuple[str, ...]
    pid: int | None
    removal: Callable[[], None] | None
    anyone: bool

    def __new__(cls, what: str, commands: Sequence[Sequence[str]] = (), *,
                stage: Stage = Stage.FILE, names: Sequence[str] = (), pid: int | None = None,
                removal: Callable[[], None] | None = None, how: str = "",
                anyone: bool = False) -> Leftover:
        argvs = tuple(tuple(c) for c in commands)
        told = how or "; ".join(shlex.join(c) for c in argvs)
        self = super().__new__(cls, f"{what} ({told})")
        self.what, self.commands, self.stage = what, argvs, stage
        self.names, self.pid, self.removal = tuple(names) or (what,), pid, removal
        self.anyone = anyone
        return self


# Finds what instances of a kind leave behind if isotax is killed: one Leftover each, saying
# what it is and how it is removed ([] when clean). Several kinds may share one.
LeakFinder = Callable[[], list[Leftover]]


class EnvironmentFacts(Protocol):
    """The facts a kind of environment declares on its class, with no silent default: their
    types, declared here once (environments.base.EnvironmentBase inherits them; a unit test
    fails on a registered kind that lacks one)."""

    kind: ClassVar[str]  # the registry key: the plan's `kind`
    description: ClassVar[str]  # one line for `isotax envs`
    # What it is (host, container, sandbox, VM): what the identity check expects an instance
    # to show, and how the rest of isotax tells the baseline or a VM without naming a kind.
    isolation: ClassVar[Isolation]
    # Whether it places CPUs and memory on the plan's numa_node; a plan that sets numa_node
    # for a kind that does not is refused at load (isotax.run.feasibility).
    supports_numa: ClassVar[bool]
    # What its instances leave behind if isotax is killed (() where nothing of its own).
    leak_finders: ClassVar[tuple[LeakFinder, ...]]
    # The plan's `options` it reads, each with its type, default and choices (() for none):
    # the plan refuses at load an option it does not declare, or a value of the wrong type.
    options: ClassVar[tuple[ParamSpec, ...]]
    # The plan's `network` and `storage` values it can do (of NETWORKS and STORAGES): the plan
    # refuses any other at load (a VM cannot share the host's network stack).
    networks: ClassVar[tuple[str, ...]]
    storages: ClassVar[tuple[str, ...]]


class Environment(EnvironmentFacts, Protocol):
    """A kind of place to run. Its facts are declared on the class (EnvironmentFacts), so the
    runner, the leak check, the fingerprint and the report ask the registry instead of naming
    kinds."""

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        """How to ask its runtime's version for the fingerprint; None where it has no runtime
        of its own to record (the host itself)."""

    @classmethod
    def doctor_notes(cls) -> list[str]:
        """Lines `isotax doctor` prints about the host for this kind beyond its availability
        (a VM's accelerator, proven by a probe boot)."""

    @classmethod
    def recognises(cls, release: str, dmesg: str) -> bool:
        """Whether an instance's kernel, seen from inside (`uname -r`, dmesg), is this kind's
        own: a user-space kernel such as gVisor's says so; the identity check asks every
        sandbox kind. False for kinds told apart by kernel and namespaces alone."""

    @classmethod
    def network_layer(cls, network: str) -> tuple[str, str] | None:
        """What the plan's `network` value stacks on, and what it is, for the layers' words:
        ("pod", "a ClusterIP Service: ...") for a pod's "service", which is the pod network
        and a Service on it. None where the network is one layer of its own."""

    @classmethod
    def options_problem(cls, network: str, options: Mapping[str, Any]) -> str | None:
        """What is wrong with the plan's options together with its network, in one line
        naming the fix (a pod's endpoints > 1 without network "service"); None if nothing.
        Each option alone is checked against its ParamSpec first."""

    def available(self) -> Availability: ...

    def start(self, spec: EnvSpec) -> Instance: ...

    def bursts(self, spec: EnvSpec) -> Burst | None:
        """Its own way to start many instances of spec at once and time them (the pod kind: one
        watch of the API for all of them); None: the launcher's, one start() each, from
        threads at the rate asked."""


# The startup phases every environment records, in seconds from start():
#   create            - the runtime is asked (what came before is isotax's own preparation:
#                       bundle, network namespace, disk overlay);
#   started           - the runtime says the container's process or the VM runs;
#   first_instruction - isotax's guest helper ran: its ITX-READY marker (user code in the
#                       container, the guest's init in a VM, the first process natively);
#   ready             - the instance takes commands (a workload may add its own readiness,
#                       as the startup workload does with a server answering).
PHASES = ("create", "started", "first_instruction", "ready")
