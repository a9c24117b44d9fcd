"""The telemetry summary of one measured cell: what the host, the environment and the load
generator did while the cell ran. The limiter rules, the cost per unit of work and the report
read it; the store keeps it as JSON (`to_json`, `from_json`), one row per cell.

Who fills in what (the one schema, written here and nowhere else):
  the sampler (telemetry.sampler.summarize)    everything from `version` to `programs`
  the observer (telemetry.observe.observed)    kind_class, guest, inside, loadgen, perf, and
                                               each link's speed_mbps and virtual
  the runner (run.finish.finish_cell)          work, once the workload's samples exist
Every part is immutable; a later stage adds its part with dataclasses.replace.

JSON: `to_json` writes exactly the keys, order and numbers the store has always held
(SUMMARY_VERSION 1); `from_json` reads every summary stored since, older ones included (those
lack `programs`, link speeds, `loadgen` without a load generator, `guest` outside a VM or
gVisor: they read as None). Numbers are kept as stored, so a summary read back writes the same
JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

SUMMARY_VERSION = 1
# The groups every host thread is put in (telemetry.sampler's module docstring says which).
GROUPS = ("inside", "machinery", "loadgen", "kernel", "isotax", "other")


def _flat(obj: Any) -> dict[str, Any]:
    """A dataclass of numbers and strings as its JSON object, in field order; tuples as lists,
    None-valued optional fields left out."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        if v is None and f.default is None:
            continue
        out[f.name] = list(v) if isinstance(v, tuple) else v
    return out


def _frozen(d: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class CpuSeconds:
    """CPU seconds by kind over the run, all CPUs together, from /proc/stat (the host's for
    `host_cpu_s`); `busy` is user + nice + system + irq + softirq."""

    user: float
    nice: float
    system: float
    idle: float
    iowait: float
    irq: float
    softirq: float
    steal: float
    busy: float

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CpuSeconds:
        return cls(**{f.name: d[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class GuestCpu(CpuSeconds):
    """What a VM's guest (or gVisor's Sentry) accounted in its own /proc/stat over the run:
    CPU seconds by kind (CpuSeconds' fields), its CPUs, each one's busy seconds and, where
    the in-guest sampler ran, each one's busiest tick (share of the CPU)."""

    cpus: int
    cpu_busy_s: tuple[float, ...]
    cpu_busy_peak: tuple[float, ...] | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> GuestCpu:
        peak = d.get("cpu_busy_peak")
        return cls(**{f.name: d[f.name] for f in fields(cls)[:10]},
                   cpu_busy_s=tuple(d["cpu_busy_s"]),
                   cpu_busy_peak=tuple(peak) if peak is not None else None)


@dataclass(frozen=True)
class Disk:
    """A whole disk over the run (/proc/diskstats): operations, bytes, and the share of the
    run it had I/O outstanding (busy, not a ceiling: a device may serve several at once)."""

    reads: int
    writes: int
    read_bytes: int
    write_bytes: int
    busy_share: float


@dataclass(frozen=True)
class Link:
    """A network interface over the run (/proc/net/dev), with its speed in Mb/s (None: the
    driver reports none, or the link is gone) and whether it is virtual (veth, bridge, tap:
    their speed is a number, not a ceiling; None: gone by the end). Summaries stored before
    speeds were recorded read as None for both."""

    rx_bytes: int
    rx_packets: int
    tx_bytes: int
    tx_packets: int
    speed_mbps: int | None = None
    virtual: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class GroupUse:
    """One group's sampled threads over the run: CPU seconds, largest resident memory."""

    cpu_s: float
    rss_max_bytes: int


@dataclass(frozen=True)
class ThreadUse:
    """One of the threads that used most CPU (TOP_THREADS of them, by CPU used)."""

    group: str  # one of GROUPS
    program: str  # its process's program name ("qemu-system-x86", "xz", "runsc-sandbox")
    thread: str  # its own name ("CPU 0/TCG", "xz", "ksoftirqd/1")
    pid: int
    tid: int
    cpu_s: float  # CPU seconds it used in the run
    core_share: float  # cpu_s over the run's length: the share of one core it used
    peak_core_share: float  # its busiest tick's share of one core


@dataclass(frozen=True)
class ProgramUse:
    """One program of the inside, machinery or loadgen group: CPU seconds of its threads and
    the largest resident memory any one of its processes had."""

    cpu_s: float
    rss_max_bytes: float


@dataclass(frozen=True)
class Counted:
    """CPU seconds a part used in the run, and where the count came from ("cgroup CPU
    accounting (<dir>)", "the guest's own /proc/stat", "sampled threads ...")."""

    cpu_s: float
    source: str
    # Counted on another machine (a load generator over SSH): its CPU count, and the highest
    # share of a core one of its client commands used while it ran. None: this host's.
    cpus: int | None = None
    busiest: float | None = None


@dataclass(frozen=True)
class PerfEvents:
    """Host-wide software events perf counted over the run (None: not counted), why there are
    none where there are none, and what is said of hardware events."""

    events: Mapping[str, float | None]
    note: str
    hardware: str

    def to_json(self) -> dict[str, Any]:
        return {"events": dict(self.events), "note": self.note, "hardware": self.hardware}


@dataclass(frozen=True)
class Work:
    """How much work the run did, in the unit its cost is quoted in (isotax.workloads.work):
    amount of `unit` ("GB", "request", "transaction", "I/O", or 1 "run"), and the requests
    the workload keeps in flight by design (None: it runs flat out)."""

    amount: float
    unit: str
    in_flight: int | None = None


@dataclass(frozen=True)
class TelemetrySummary:
    """One measured cell's telemetry (see the module docstring for who fills in what)."""

    version: int  # SUMMARY_VERSION
    interval_s: float  # the sampler's interval
    ticks: int  # readings taken, the first and the last included
    duration_s: float  # from the first reading to the last
    cpus: int  # the host's CPUs
    host_cpu_s: CpuSeconds  # host-wide CPU seconds by kind
    cpu_busy_share: tuple[float, ...]  # each host CPU's busy share over the run
    cpu_busy_peak: tuple[float, ...]  # each host CPU's busiest tick
    ctxt_per_s: float  # host-wide context switches per second
    intr_per_s: float  # host-wide interrupts per second
    disks: Mapping[str, Disk]  # whole disks that did I/O
    links: Mapping[str, Link]  # interfaces that moved packets
    groups: Mapping[str, GroupUse]  # every one of GROUPS
    threads: tuple[ThreadUse, ...]  # the busiest threads, most CPU first
    # Per group (inside, machinery, loadgen) per program; None in summaries stored before it.
    programs: Mapping[str, Mapping[str, ProgramUse]] | None = None
    # identity's class of the environment: "host", "container", "sandbox" or "vm"
    kind_class: str = ""
    guest: GuestCpu | None = None  # a VM's or gVisor's own view, where it was read
    # The environment's own CPU: its cgroup, the guest's /proc/stat, else its sampled threads.
    inside: Counted | None = None
    loadgen: Counted | None = None  # the load generator's clients; None without one
    perf: PerfEvents | None = None
    work: Work | None = None  # None until the runner adds it

    def __post_init__(self) -> None:
        for name in ("disks", "links", "groups"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        if self.programs is not None:
            object.__setattr__(self, "programs", _frozen(
                {g: _frozen(p) for g, p in self.programs.items()}))

    def group_cpu_s(self, group: str) -> float:
        """The CPU seconds of a group's sampled threads (0 for a group not in the summary)."""
        found = self.groups.get(group)
        return found.cpu_s if found is not None else 0.0

    def to_json(self) -> dict[str, Any]:
        """The JSON object the store keeps (keys in the order they have always had)."""
        out: dict[str, Any] = {
            "version": self.version, "interval_s": self.interval_s, "ticks": self.ticks,
            "duration_s": self.duration_s, "cpus": self.cpus,
            "host_cpu_s": _flat(self.host_cpu_s),
            "cpu_busy_share": list(self.cpu_busy_share),
            "cpu_busy_peak": list(self.cpu_busy_peak),
            "ctxt_per_s": self.ctxt_per_s, "intr_per_s": self.intr_per_s,
            "disks": {k: _flat(v) for k, v in self.disks.items()},
            "links": {k: v.to_json() for k, v in self.links.items()},
            "groups": {k: _flat(v) for k, v in self.groups.items()},
            "threads": [_flat(t) for t in self.threads],
        }
        if self.programs is not None:
            out["programs"] = {g: {name: _flat(p) for name, p in by.items()}
                               for g, by in self.programs.items()}
        out["kind_class"] = self.kind_class
        if self.guest is not None:
            out["guest"] = _flat(self.guest)
        for name, part in (("inside", self.inside), ("loadgen", self.loadgen)):
            if part is not None:
                out[name] = _flat(part)
        if self.perf is not None:
            out["perf"] = self.perf.to_json()
        if self.work is not None:
            out["work"] = _flat(self.work)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TelemetrySummary:
        """A summary as the store keeps it (any stored since SUMMARY_VERSION 1)."""
        programs = d.get("programs")
        guest, inside, loadgen = d.get("guest"), d.get("inside"), d.get("loadgen")
        perf, work = d.get("perf"), d.get("work")
        return cls(
            version=d["version"], interval_s=d["interval_s"], ticks=d["ticks"],
            duration_s=d["duration_s"], cpus=d["cpus"],
            host_cpu_s=CpuSeconds.from_json(d["host_cpu_s"]),
            cpu_busy_share=tuple(d["cpu_busy_share"]),
            cpu_busy_peak=tuple(d["cpu_busy_peak"]),
            ctxt_per_s=d["ctxt_per_s"], intr_per_s=d["intr_per_s"],
            disks={k: Disk(**v) for k, v in d["disks"].items()},
            links={k: Link(**v) for k, v in d["links"].items()},
            groups={k: GroupUse(**v) for k, v in d["groups"].items()},
            threads=tuple(ThreadUse(**t) for t in d["threads"]),
            programs=None if programs is None else {
                g: {name: ProgramUse(**p) for name, p in by.items()}
                for g, by in programs.items()},
            kind_class=d.get("kind_class", ""),
            guest=GuestCpu.from_json(guest) if guest else None,
            inside=Counted(**inside) if inside else None,
            loadgen=Counted(**loadgen) if loadgen else None,
            perf=PerfEvents(**perf) if perf else None,
            work=Work(**work) if work else None)

