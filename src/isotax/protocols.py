"""The shared contracts between the pipeline's stages: what an environment, an instance, a
workload and a load generator are, and the registry of the plugins that implement them.

Environments (isotax.environments) and workloads (isotax.workloads) implement these protocols,
on top of the defaults in environments/base.py and workloads/base.py; the runner, the analysis
and the report only ever talk to them through here. May import image, facts and model only.

The registry finds plugins the way entry points would: the first question walks the plugin
packages by name and imports every module, whose @register decorator then records its class.
That dynamic import is the one place this bottom layer reaches the plugins; nothing here imports
them statically, so the import layers stay one-way.
"""

from __future__ import annotations

import builtins
import importlib
import pkgutil
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from functools import cache
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

# What an instance is (Facts), how it is reached (Reach) and its isolation class live in
# isotax.facts, below the store that keeps them; re-exported here, where the plugins look.
from isotax.facts import Facts as Facts
from isotax.facts import Isolation as Isolation
from isotax.facts import Reach as Reach
from isotax.image.artifacts import ImageArtifacts
from isotax.image.recipe import ImageHook, Recipe
from isotax.model import Sample

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
NETWORKS = ("host", "bridge", "none")
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


class Environment(Protocol):
    """A kind of place to run. Its facts are declared on the class, with no silent default
    (environments/base.py's EnvironmentBase names every hook; a unit test fails on a
    registered kind that lacks one), so the runner, the leak check, the fingerprint and the
    report ask the registry instead of naming kinds."""

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


# ---------------------------------------------------------------------------- workloads

Params = Mapping[str, Any]


@dataclass(frozen=True)
class ParamSpec:
    """One parameter a workload accepts: its type, default and meaning (shown by `workloads`)."""

    name: str
    type: type
    default: Any
    help: str
    minimum: float | None = None
    choices: tuple[Any, ...] | None = None
    maximum: float | None = None  # where the tool itself has a limit (iperf3's 128 streams)
    # Other types a value may have too: an environment's on/off option takes true or "on".
    also: tuple[builtins.type, ...] = ()

    def problem(self, value: Any) -> str | None:
        """What is wrong with a value for this parameter, in the user's words; None if fine."""
        types = (self.type, *self.also)
        # true is no number (bool is an int to Python), and an int is a fine float.
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if float in types and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            return f"{value!r} should be {' or '.join(t.__name__ for t in types)}"
        if self.minimum is not None and value < self.minimum:
            return f"{value!r} is below {self.minimum:g}"
        if self.maximum is not None and value > self.maximum:
            return f"{value!r} is above {self.maximum:g}"
        if self.choices is not None and value not in self.choices:
            return f"{value!r} is not one of: {', '.join(map(_word, self.choices))}"
        return None


def _word(choice: Any) -> str:
    """A choice as a plan writes it: true and false in TOML's spelling."""
    return str(choice).lower() if isinstance(choice, bool) else str(choice)


class LoadGen(Protocol):
    """The studies' "other machine", where network clients run: a network namespace on this
    host joined by a veth pair (isotax.loadgen.local), or a second machine reached over SSH
    (isotax.loadgen.ssh). Every environment, native included, is reached over a real network
    path and adds only its own layers (bridge, NAT, tap + virtio, ...)."""

    # Where the clients run, in words for labels and the report ("a network namespace on
    # this host", "root@10.0.0.2 over SSH").
    where: str

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        """Run a client in the load generator; a lost load generator is a SanityError."""

    def target(self, inst: Instance, port: int, proto: str = "tcp") -> tuple[str, int]:
        """Where a client reaches a server listening on `port` inside `inst` (installing the
        port mapping a bridged container needs, as Docker's -p does; removed at close)."""

    def listen(self, inst: Instance) -> str:
        """The address a server inside `inst` listens on: where this load generator's packets
        arrive (the host end of its link for an instance on the host's network, else the
        instance's own address behind the NAT, the engine's mapping or the tap); never a
        wildcard. `target` also admits only the load generator to the port there."""

    def path(self, inst: Instance) -> str:
        """The layers between the load generator and `inst`, in words, for the report."""

    def describe(self) -> Mapping[str, str]:
        """The load generator's facts for the run's record (kind, addresses, link, host)."""

    def scratch_file(self, prefix: str, suffix: str) -> AbstractContextManager[str]:
        """A new empty file on the load generator for a client to write (its path there),
        removed when the block ends."""

    def read_text(self, path: str) -> str:
        """The text of a file on the load generator (a client's log)."""


@dataclass(frozen=True)
class Port:
    """A port a workload's server listens on inside an environment: engines publish it on a
    bridged container (as Docker's -p does), the leak finder recognises a server left on it."""

    number: int
    protocols: tuple[str, ...] = ("tcp",)  # "tcp" and/or "udp"
    # The program that listens on it (its command name, e.g. "redis-server"): with the number,
    # how the leak finder tells a server isotax left behind from someone else's.
    server: str = ""


@dataclass(frozen=True)
class LatencyPanel:
    """One panel of the latency-vs-throughput figure: the `throughput` metric against each of
    the `latencies` (the first drawn solid, the second dashed) along a concurrency sweep."""

    title: str  # e.g. "SET"
    throughput: str  # a metric of the workload, e.g. "set_requests_per_s"
    latencies: tuple[str, ...]  # metrics, e.g. ("set_latency_p50_ms", "set_latency_p99_ms")


@dataclass(frozen=True)
class CpuCurve:
    """The throughput-vs-host-CPU-utilisation figure: `throughput` against `utilisation`
    (both metrics of the workload), one point per value of the sweep parameter `axis`."""

    throughput: str  # e.g. "transactions_per_s"
    label: str  # its axis label, e.g. "transactions/s"
    utilisation: str  # a metric in % of all host CPUs over the run
    axis: str  # the parameter whose values label the points, e.g. "threads"
    title: str  # how captions name the workload, e.g. "MySQL"
    client: str  # the load generator's client its utilisation includes, e.g. "sysbench"


@dataclass(frozen=True)
class FigureHints:
    """How the report draws a workload, beyond the tables every workload gets. The report
    reads them by workload name (figure_hints below), for runs rendered from the store or a
    bundle too; the defaults draw nothing extra, which is what a stored run of a workload no
    longer registered gets."""

    # Its headline metric among the mean ± sd bars ("CPU, memory, network and disk").
    bars: bool = False
    # Parameters whose sweep is drawn as headline throughput against it (the first also labels
    # the points of the latency panels).
    concurrency: tuple[str, ...] = ()
    # Latency-vs-throughput panels along the first concurrency parameter's sweep.
    latency_panels: tuple[LatencyPanel, ...] = ()
    # Throughput against the host's CPU utilisation, where the workload measures it.
    cpu_curve: CpuCurve | None = None
    # A latency CDF's title names the metric's first word (fio's "read" or "write").
    cdf_direction: bool = False
    # Phases of a start, reported as `<phase>_ms` (median) and `<phase>_p95_ms`: a table per
    # environment; those that are milestones (PHASES: times from the request) also as bars.
    phases: tuple[str, ...] = ()
    # (metric, column title) of a memory-footprint table per environment (density's).
    footprint: tuple[tuple[str, str], ...] = ()
    # The sample label that carries a memory-vs-instances curve (density's "curve").
    curve: str = ""


@dataclass(frozen=True)
class Need:
    """One amount a workload point asks of the host, at the least, and what sets it."""

    amount: int  # bytes, or descriptors for open files
    params: tuple[str, ...]  # the parameters that set it, for the refusal to name
    what: str  # what it is, in a few words ("the corpus, in a tmpfs")


@dataclass(frozen=True)
class Needs:
    """What one point of a workload asks of the host at the least (its host_needs()): checked
    when a plan is loaded (isotax.run.feasibility), so a point that cannot fit is refused in
    one line before anything is built or started. None: nothing worth checking."""

    memory: Need | None = None  # inside the environment: its memory_mib, else the host's
    host_memory: Need | None = None  # on the host beside its instance (density's instances)
    open_files: Need | None = None  # descriptors one process holds at once (connections)
    disk: Need | None = None  # on the disk where the run's files go (fio's files)


class WorkloadFacts(Protocol):
    """What every workload declares about itself, whichever way it runs. Defaults for the
    hooks are in isotax.workloads.base.BaseWorkload, whose docstring names each one."""

    name: ClassVar[str]
    version: ClassVar[str]  # version of isotax's driver for this workload (bump on change)
    description: ClassVar[str]
    params: ClassVar[Sequence[ParamSpec]]
    tools: ClassVar[Mapping[str, Sequence[str]]]  # tool -> argv that prints its version
    # True for workloads with a network client: the runner then creates the load generator
    # and passes it; otherwise `loadgen` is None.
    needs_loadgen: ClassVar[bool]
    # The Debian packages of its clients (a load generator over SSH gets the image's versions).
    client_packages: ClassVar[Sequence[str]]
    # The ports its servers listen on inside an environment, by name ({} without a server).
    ports: ClassVar[Mapping[str, Port]]
    # The Debian packages its image needs (the image gets every registered workload's).
    packages: ClassVar[Sequence[str]]
    # Its steps in the image build beyond those packages (a BLAS to select, a tool apt does
    # not have to build), run in the image's chroot and checked there; () for none.
    image_hooks: ClassVar[Sequence[ImageHook]]
    # How the report draws it.
    figures: ClassVar[FigureHints]
    # The metric that answers what a user asks of it (its verdict is the one the run decides
    # and the summary leads with); "" means the first metric its run reports.
    headline: ClassVar[str]

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str] | None:
        """How much work one run did, in the unit its cost is quoted in ((amount, unit), e.g.
        (1.2, "GB")); None: the run is the unit."""

    def in_flight(self, params: Params) -> int | None:
        """How many requests it keeps outstanding at once by design; None: flat out."""

    def needs_network(self, params: Params) -> bool:
        """Whether this point needs a network path from the load generator."""

    def not_applicable(self, inst: Instance, params: Params) -> str | None:
        """Why this point does not apply to the instance, in one line; None when it does."""

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        """Once per instance and parameter set, before warm-ups (e.g. make the corpus)."""

    def host_needs(self, params: Params) -> Needs:
        """What this point asks of the host at the least (memory, open files, disk), from its
        parameters alone: a plan whose point cannot fit is refused when it is loaded."""


class Workload(WorkloadFacts, Protocol):
    """Runs in one long-lived instance of each environment, which the runner starts."""

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]: ...


@dataclass(frozen=True)
class Launched:
    """A fresh instance from a Launcher, and when it was asked for (time.monotonic())."""

    instance: Instance
    t0: float  # just before the environment's start(): its milestones count from here

    def since(self) -> float:
        """Seconds from the request to now."""
        return time.monotonic() - self.t0


class Launcher(Protocol):
    """Starts fresh instances of the cell's environment, exactly as the plan defines it (the
    runner's own long-lived instance stays paused meanwhile)."""

    def launch(self) -> Launched:
        """Start one; raises Unavailable or another exception (after removing what it made)
        when it does not start."""

    def stop(self, launched: Launched) -> float:
        """Stop it and remove everything it made; seconds the stop took. Idempotent."""


@runtime_checkable
class LaunchingWorkload(WorkloadFacts, Protocol):
    """A workload whose subject is the starting of instances (startup, density): it gets a
    Launcher instead of running inside the environment's long-lived instance. The runner stops
    whatever it leaves running, on failure and Ctrl-C too. Its prepare() runs on the runner's
    long-lived instance (e.g. to check a tool)."""

    def launch_and_measure(self, launcher: Launcher, params: Params,
                           loadgen: LoadGen | None) -> list[Sample]: ...


AnyWorkload = Workload | LaunchingWorkload


# ---------------------------------------------------------------------------- the registry

ENVIRONMENTS: dict[str, type[Environment]] = {}
WORKLOADS: dict[str, type[AnyWorkload]] = {}
PLUGIN_PACKAGES = ("isotax.environments", "isotax.workloads")


@cache
def _discover() -> None:
    # Every module of the plugin packages (families included) registers what it defines; a new
    # environment or workload is one new file, with no list to keep in step.
    for name in PLUGIN_PACKAGES:
        pkg = importlib.import_module(name)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{name}."):
            importlib.import_module(info.name)


def environment_kinds() -> list[str]:
    _discover()
    return sorted(ENVIRONMENTS)


def environments() -> dict[str, type[Environment]]:
    _discover()
    return dict(ENVIRONMENTS)


def isolation_of(kind: str) -> Isolation | None:
    """The isolation a registered kind declares; None for a kind not registered (a stored run
    of a since-removed kind, or a describe() without one)."""
    cls = environments().get(kind)
    return cls.isolation if cls is not None else None


def kinds_with(isolation: Isolation) -> list[str]:
    """The registered kinds that declare `isolation`, sorted (e.g. the host's: the baseline's)."""
    return sorted(k for k, cls in environments().items() if cls.isolation is isolation)


def workloads() -> dict[str, type[AnyWorkload]]:
    _discover()
    return dict(WORKLOADS)


def workload_packages() -> tuple[str, ...]:
    """The Debian packages every registered workload needs, each once, in registry order:
    what the image's caller passes to its recipe (isotax.image is below the registry)."""
    return tuple(dict.fromkeys(p for cls in workloads().values() for p in cls.packages))


def workload_image_hooks() -> tuple[ImageHook, ...]:
    """Every registered workload's image hooks, each once, in registry order."""
    return tuple(dict.fromkeys(h for cls in workloads().values() for h in cls.image_hooks))


def image_recipe(**settings: Any) -> Recipe:
    """The recipe of the image every registered workload runs in: their packages and their
    image hooks (isotax.image is below the registry, so it is told them here)."""
    return Recipe.for_workloads(workload_packages(), workload_image_hooks(), **settings)


def workload_ports() -> list[Port]:
    """Every port a registered workload's server listens on, each once, in registry order."""
    return list(dict.fromkeys(p for cls in workloads().values() for p in cls.ports.values()))


def headline_metric(workload: str, metrics: Sequence[str]) -> str:
    """The headline among `metrics` (a point's metrics in the order its run reports them):
    the workload's declared `headline` where it is one of them, else the first; "" for none.
    A stored run of a since-removed workload gets its first metric."""
    cls = workloads().get(workload)
    declared = cls.headline if cls is not None else ""
    if declared and declared in metrics:
        return declared
    return metrics[0] if metrics else ""


def figure_hints(workload: str) -> FigureHints:
    """How the report draws a workload, by name; the defaults (tables only) for a name no
    registered workload has, as a stored run of a since-removed workload may bring."""
    cls = workloads().get(workload)
    return cls.figures if cls is not None else FigureHints()
