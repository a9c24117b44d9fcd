"""What a workload and a load generator are: the facts every workload declares and the hooks
it implements (isotax.workloads, on top of workloads/base.py), and the Launcher that startup
and density get instead of an instance."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from isotax.image.recipe import ImageHook
from isotax.model import Sample
from isotax.protocols.environment import Completed, Instance
from isotax.protocols.loadgen_description import LoadGenDescription
from isotax.protocols.params import Params, ParamSpec
from isotax.protocols.starts import Burst

# ---------------------------------------------------------------------------- workloads



class ClientsCpu(Protocol):
    """A load generator's meter of its clients' CPU time, read around each measured run
    (isotax.telemetry.observe): the load generator's share of the work, and whether a client
    saturated a core (then the run measured the client)."""

    source: str  # what it counts, in words ("cgroup CPU accounting", "the clients' own ...")
    cpus: int | None  # the CPUs the clients may use where that is not this host's; None

    def usage_s(self) -> float:
        """The clients' CPU seconds so far; OSError where it cannot be read."""

    def mark(self) -> int | None:
        """Where the per-command records begin now, for busiest_since; None where the meter
        keeps none (a cgroup's total only)."""

    def busiest_since(self, mark: int) -> float | None:
        """The busiest client command's share of a core since mark; None where unknown."""


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

    def describe(self) -> LoadGenDescription:
        """The load generator's facts for the run's record (kind, addresses, link, host)."""

    def clients_cpu(self) -> ClientsCpu | None:
        """The meter of its clients' CPU time; None where it has none (not started)."""

    def clients_netns(self) -> int | None:
        """The inode of the network namespace its clients run in on this host (the telemetry
        tells their threads by it); None where they do not run on this host."""

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
    # Phases of a start, reported as `<phase>_ms` (median) and `<phase>_<tail>_ms`: a table per
    # environment; those that are milestones (PHASES: times from the request) also as bars.
    phases: tuple[str, ...] = ()
    # The percentile reported beside each phase's median, as `<phase>_<tail>_ms`.
    tail: str = "p95"
    # Phases beyond PHASES that are times from the request too (drawn as the bars' steps).
    milestones: tuple[str, ...] = ()
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
    # True when every connection of its clients stands alone, so it is served wherever it
    # lands: behind a Service with several endpoints its server runs in each of them. False
    # (the default) where a client's connections must meet one server (netperf's control
    # and data connections, iperf3's streams): not applicable there.
    spreads_over_endpoints: ClassVar[bool]

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

    def burst(self) -> Burst:
        """Instances started together or one after another, timed phase by phase
        (protocols.starts); the launcher closes it with the rest."""


@runtime_checkable
class LaunchingWorkload(WorkloadFacts, Protocol):
    """A workload whose subject is the starting of instances (startup, density): it gets a
    Launcher instead of running inside the environment's long-lived instance. The runner stops
    whatever it leaves running, on failure and Ctrl-C too. Its prepare() runs on the runner's
    long-lived instance (e.g. to check a tool)."""

    def launch_and_measure(self, launcher: Launcher, params: Params,
                           loadgen: LoadGen | None) -> list[Sample]: ...


AnyWorkload = Workload | LaunchingWorkload
