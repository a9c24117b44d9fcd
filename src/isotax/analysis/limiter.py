"""The suspected limiter of a result, named by written rules on the run's recorded telemetry.

Brendan Gregg's active benchmarking: a benchmark number means little until you know what
limited it, so every result gets a suspect, with the facts that point at it. `suspect`
reads one measured run's telemetry summary (isotax.telemetry.summary.TelemetrySummary: what
the sampler, telemetry.observe and the runner recorded) and applies the rules below, first
match wins; `aggregate` folds the repetitions of one point.

Words used by the rules (all from the summary):
  core share   a thread's CPU time over the run's length: the share of one core it used
               (`core_share`), and its busiest tick (`peak_core_share`).
  saturated    a thread with core share >= SATURATED (0.85), or with a busiest tick
               >= SATURATED_PEAK (0.85) while its core share is >= SATURATED_SUSTAINED (0.75).
               Not 1.0: the window includes the tool's start and exit; part of a network
               sender's softirq work runs in ksoftirqd, not in its own context; and on a
               shared host a saturated thread still waits a little for its CPU. Measured
               here: a single-threaded xz reads 0.96, iperf3's sending client 0.78-0.89
               (busiest tick 1.00), a sending server 0.81 (0.88); threads that take turns
               (rr) stay near 0.5. A 0.25 s tick resolves 4% of a core.
  own CPU      the CPU the workload itself used: the sampled threads of its groups (inside,
               machinery, loadgen, kernel, isotax), or the exact cgroup counts where they
               are larger (they include processes that exited between ticks), at most the
               host's busy time. Interrupt time is in it as far as the kernel charges it to
               the thread it interrupted: with tick-based accounting (this host: no
               CONFIG_IRQ_TIME_ACCOUNTING) it is; with IRQ time accounting it is charged to
               no thread and the own CPU misses it (the evidence shows irq + softirq). Not
               the host's total less the "other" group: other tenants' short processes
               slip between ticks, so that difference overstates the workload.
               Rules look at this, not at the host's total, so a neighbour's compile does
               not make a single-threaded result look "all cores busy".
  in flight    work.in_flight: the requests the workload keeps outstanding by design (rr 1,
               redis connections x pipeline, fio iodepth). For a bulk transfer (work counted
               in GB: iperf3's streams) it counts streams, each with a TCP window in flight,
               not requests, so the latency rule does not use it.

Rules, in order (the first that fires is the verdict):
  1. load generator   a load-generator thread is saturated (on a load generator over SSH:
                      one client command used >= SATURATED of a core, by its own times), or
                      the load generator's CPU (exact, from its cgroup or its clients' times)
                      is >= LOADGEN_ALL (0.90) of all its host's CPUs. First, because then
                      the result measures the client, not the environment, whatever else
                      is also busy.
  2. one core         a thread of the workload (groups inside, machinery -- a VM's vCPU or
                      TCG thread, gVisor's Sentry --, kernel -- ksoftirqd, vhost) is
                      saturated while the rest of the own CPU is < ONE_CORE_REST (0.5) of
                      each other CPU: one thread is the ceiling and the other CPUs have room.
                      In a guest (VM, gVisor) likewise: one guest CPU busy >= SATURATED for
                      the run while the others are < ONE_CORE_REST busy on average.
  3. all cores        the own CPU is >= ALL_OWN (0.75) of all the host's CPUs, or every
                      guest CPU (two or more) is busy >= SATURATED. 0.75, not 0.9: a parallel
                      run has serial stretches (xz -T0 compresses its last block alone) and
                      leaves softirq-only gaps; measured here xz -T0 keeps 0.76-0.82.
  4. device           a disk was busy (had I/O outstanding) >= DISK_BUSY (0.90) of the run.
                      Before I/O wait: the device, not the waiting, is the finding. Caveat in
                      the evidence: busy time counts time with any I/O outstanding, so a
                      device that serves several at once (virtio, NVMe) can still do more; a
                      deeper queue tells a ceiling from latency.
  5. I/O wait         CPUs sat idle with I/O pending for >= IOWAIT_CORES (0.3) CPU-seconds per
                      second (host /proc/stat iowait, or the guest's own for a VM): a task
                      waited on synchronous I/O for a third of the run or more while no device
                      was full. Measured here: fio psync at depth 1 reads 0.38-0.53 (iowait
                      accrues only on idle CPUs, so a busy neighbour lowers it); runs without
                      synchronous I/O stay below 0.12.
  6. network          a physical link (not under /sys/devices/virtual) with a known speed
                      carried >= LINK_NEAR (0.90) of it in one direction. veth, bridge and tap
                      report 10000 Mb/s or nothing: a number, not a ceiling, so virtual links
                      never fire this rule (observe.link_speeds records speed and virtual).
  7. latency          the workload limits its in-flight requests (see above), no thread is
                      saturated and the own CPU is <= LATENCY_OWN_MAX (0.60) of the host's
                      CPUs: each request waits on the one before, so round trips, not
                      capacity, set the rate (Little's law: rate = in flight / latency). One
                      CPU can still look full when both ends take turns on it (rr's same-cpu
                      placement, measured here: 0.50 of the host, that CPU 97% busy): neither
                      end is saturated, and the evidence shows the busiest CPU. Between 0.60
                      and ALL_OWN the CPU is neither idle enough for latency nor full: such a
                      run falls through (rules 8, 9).
  8. all cores        the host (every tenant) was busy >= ALL_HOST (0.90): the CPUs were the
                      limit though the workload used fewer of them; the evidence names what
                      else ran.
  9. no clear limiter  none fired; the evidence says what was measured. (Not "undetermined":
                      that word is too near a verdict's "undecided", which is about the
                      ratio, not about what limited the run.)
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from isotax.telemetry.summary import TelemetrySummary, ThreadUse

SATURATED = 0.85  # core share at which a thread counts as saturated
SATURATED_PEAK = 0.85  # ... or a busiest tick at least this
SATURATED_SUSTAINED = 0.75  # ... with at least this core share over the run
LOADGEN_ALL = 0.90  # the load generator's share of all the host's CPUs
ONE_CORE_REST = 0.50  # the rest of the own CPU, per other CPU, below which one core limits
ALL_OWN = 0.75  # the own CPU's share of all the host's CPUs for "all cores busy"
DISK_BUSY = 0.90  # a disk's busy share for "device"
IOWAIT_CORES = 0.30  # CPU-seconds of iowait per second for "I/O wait"
LATENCY_OWN_MAX = 0.60  # the own CPU's share of the host at most, for "latency"
LINK_NEAR = 0.90  # share of a physical link's speed for "network"
ALL_HOST = 0.90  # the host's busy share (every tenant) for "all cores busy" at the end
BULK_UNITS = ("GB", "run")  # work units whose in_flight is not a request limit
SHORT_TICKS = 8  # fewer ticks than this: the evidence warns that shares are coarse
OTHER_NOTE = 0.05  # cores used by other tenants worth a line in the evidence

WORKLOAD_GROUPS = ("inside", "machinery", "kernel")  # threads that can be "one core"
_GROUP_WORDS = {"loadgen": "load generator"}


class Limiter(StrEnum):
    LOADGEN = "load generator"
    ONE_CORE = "one core"
    ALL_CORES = "all cores"
    IO_WAIT = "I/O wait"
    DEVICE = "device"
    NETWORK = "network"
    LATENCY = "latency"
    NO_CLEAR = "no clear limiter"


# Order used to break a tie between repetitions: the rules' own order.
_PRIORITY = (Limiter.LOADGEN, Limiter.ONE_CORE, Limiter.ALL_CORES, Limiter.DEVICE,
             Limiter.IO_WAIT, Limiter.NETWORK, Limiter.LATENCY, Limiter.NO_CLEAR)


@dataclass(frozen=True)
class Verdict:
    limiter: Limiter
    words: str  # one line naming it
    evidence: tuple[str, ...]  # the facts that made the rule fire, then the context
    # The rule's own number (a thread's core share, a disk's busy share, ...): aggregate
    # picks the repetition nearest the median of it as the typical one.
    measure: float = 0.0


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _group(g: str) -> str:
    return _GROUP_WORDS.get(g, g)


def _who(t: ThreadUse) -> str:
    """'xz (inside)', 'qemu-system-x86_64 thread CPU 0/TCG (machinery)'."""
    program, thread = t.program, t.thread
    name = program if thread in (program, "?") else f"{program} thread {thread}"
    return f"{name} ({_group(t.group)})"


def _share(t: ThreadUse) -> str:
    return (f"{_who(t)} at {_pct(float(t.core_share))} of a core "
            f"(busiest tick {_pct(float(t.peak_core_share))})")


def saturated(t: ThreadUse) -> bool:
    """Whether a thread of the summary ran one core flat out (see the module docstring)."""
    mean = float(t.core_share)
    peak = float(t.peak_core_share)
    return mean >= SATURATED or (peak >= SATURATED_PEAK and mean >= SATURATED_SUSTAINED)


@dataclass(frozen=True)
class _Facts:
    """What the rules read, computed once from a summary."""

    dur: float
    cpus: int
    host_share: float  # every tenant's busy CPU / all CPUs
    own_cores: float  # host busy less other tenants', in cores
    other_cores: float
    threads: list[ThreadUse]
    context: list[str]  # evidence lines every verdict carries


def own_cpu_s(s: TelemetrySummary) -> float:
    """The workload's own CPU seconds (see the module docstring): its groups' sampled threads,
    or the exact cgroup counts where larger (they include exited processes)."""
    inside = s.group_cpu_s("inside")
    if s.inside is not None and "cgroup" in s.inside.source:  # a guest's own count is not
        inside = max(inside, float(s.inside.cpu_s))  # host CPU
    # A load generator on another machine (counted there: cpus set) used none of this host's.
    remote = s.loadgen is not None and s.loadgen.cpus is not None
    loadgen = 0.0 if remote else max(
        s.group_cpu_s("loadgen"), float(s.loadgen.cpu_s) if s.loadgen is not None else 0.0)
    return inside + loadgen + sum(s.group_cpu_s(g) for g in ("machinery", "kernel", "isotax"))


def _facts(s: TelemetrySummary) -> _Facts:
    dur = float(s.duration_s)
    cpus = int(s.cpus) or len(s.cpu_busy_share) or 1
    host = s.host_cpu_s
    busy = float(host.busy)
    other = s.group_cpu_s("other")
    own = min(busy, own_cpu_s(s)) / dur
    threads = list(s.threads)
    ctx = [f"host: {cpus} CPUs {_pct(busy / dur / cpus)} busy over {dur:.1f} s (user "
           f"{_pct(host.user / dur / cpus)}, system "
           f"{_pct(host.system / dur / cpus)}, softirq "
           f"{_pct(host.softirq / dur / cpus)}, iowait "
           f"{_pct(host.iowait / dur / cpus)}); per CPU "
           + ", ".join(_pct(x) for x in s.cpu_busy_share)]
    parts = [f"{_group(g)} {float(s.group_cpu_s(g)) / dur:.2f}"
             for g in ("inside", "machinery", "loadgen", "kernel", "isotax")
             if float(s.group_cpu_s(g)) > 0]
    irq = (float(host.irq) + float(host.softirq)) / dur
    ctx.append(f"own CPU: {own:.2f} of {cpus} cores (sampled threads, cores: "
               f"{', '.join(parts) or 'none'}; interrupts {irq:.2f})")
    if other / dur >= OTHER_NOTE:
        top = [t for t in threads if t.group == "other"][:2]
        names = ", ".join(f"{t.program} {float(t.core_share):.2f}" for t in top)
        ctx.append(f"other tenants used {other / dur:.2f} cores"
                   + (f" (busiest: {names})" if names else ""))
    busiest = [t for t in threads if t.group != "other"][:3]
    if busiest:
        ctx.append("busiest threads: " + "; ".join(
            f"{_who(t)} {_pct(float(t.core_share))} "
            f"(peak {_pct(float(t.peak_core_share))})" for t in busiest))
    if s.guest is not None and s.guest.cpu_busy_s:
        ctx.append("guest CPUs busy (its own /proc/stat): "
                   + ", ".join(_pct(min(1.0, b / dur)) for b in s.guest.cpu_busy_s))
    if s.work is not None and s.work.in_flight is not None:
        ctx.append(f"in flight by design: {s.work.in_flight} "
                   f"(work counted per {s.work.unit})")
    ticks = int(s.ticks)
    if 0 < ticks < SHORT_TICKS:
        ctx.append(f"a short run: {ticks} ticks of {s.interval_s} s, so shares "
                   "are coarse")
    return _Facts(dur, cpus, busy / dur / cpus, own, other / dur, threads, ctx)


def _guest_shares(s: TelemetrySummary, dur: float) -> list[float]:
    if s.guest is None:
        return []
    return [min(1.0, float(b) / dur) for b in s.guest.cpu_busy_s]


def _disk_lines(s: TelemetrySummary, dur: float) -> tuple[str, float, str]:
    """(busiest disk's name, busy share, its evidence line), ('', 0, '') without disks."""
    if not s.disks:
        return "", 0.0, ""
    name, d = max(s.disks.items(), key=lambda kv: float(kv[1].busy_share))
    busy = float(d.busy_share)
    line = (f"disk {name}: {_pct(busy)} busy, {int(d.reads) / dur:.0f} reads/s "
            f"{int(d.read_bytes) / dur / 1e6:.1f} MB/s, "
            f"{int(d.writes) / dur:.0f} writes/s "
            f"{int(d.write_bytes) / dur / 1e6:.1f} MB/s")
    return name, busy, line


def _iowait_cores(s: TelemetrySummary, dur: float) -> tuple[float, str]:
    host = float(s.host_cpu_s.iowait) / dur
    inner = float(s.guest.iowait) / dur if s.guest is not None else 0.0
    if inner > host:
        return inner, f"the guest's iowait {inner:.2f} CPU-s/s (host's {host:.2f})"
    return host, f"iowait {host:.2f} CPU-s/s (CPUs idle with I/O pending)"


def _link(s: TelemetrySummary, dur: float) -> tuple[str, float, str]:
    """(the physical link nearest its speed, that share, its line); without one, ('', 0,
    the busiest link's line) or ('', 0, '') when the run moved no packets."""
    rows = []  # (share of its speed or -1, bits/s, line, name)
    for name, ln in s.links.items():
        bits = 8 * max(int(ln.rx_bytes), int(ln.tx_bytes)) / dur
        speed = ln.speed_mbps
        if speed and not ln.virtual:
            share = bits / (float(speed) * 1e6)
            rows.append((share, bits, f"link {name}: {bits / 1e9:.2f} Gbit/s of its "
                         f"{speed} Mb/s ({_pct(share)})", name))
        else:
            why = "virtual" if ln.virtual else "speed unknown"
            rows.append((-1.0, bits, f"link {name}: {bits / 1e9:.2f} Gbit/s ({why}: no "
                         "ceiling known)", name))
    if not rows:
        return "", 0.0, ""
    share, _bits, line, name = max(rows)
    if share >= 0:
        return name, share, line
    return "", 0.0, max(rows, key=lambda r: r[1])[2]


def suspect(summary: TelemetrySummary | None) -> Verdict:
    """The suspected limiter of one measured run, from its telemetry summary (None: the run
    has none). Pure; the rules and thresholds are in the module docstring: each rule, in
    order, names the limiter or adds what it ruled out to the evidence of the ones after."""
    s = summary
    if s is None or float(s.duration_s) <= 0:
        return Verdict(Limiter.NO_CLEAR, "no clear limiter: no telemetry for this run",
                       ("the run has no telemetry summary",))
    st = _Case(s, _facts(s))
    for rule in _RULES:
        found = rule(st)
        if found is not None:
            return found
    return Verdict(Limiter.NO_CLEAR,
                   f"no clear limiter: no rule fired (own CPU {_pct(st.own_share)}, host "
                   f"{_pct(st.f.host_share)} busy)", tuple(st.ruled_out) + st.ctx,
                   st.own_share)


@dataclass
class _Case:
    """One run under the rules: its summary, the facts drawn from it, and what the rules
    before have ruled out."""

    s: TelemetrySummary
    f: _Facts
    ruled_out: list[str] = field(default_factory=list)
    sat: list[ThreadUse] = field(default_factory=list)  # the workload's saturated threads

    @property
    def ctx(self) -> tuple[str, ...]:
        return tuple(self.f.context)

    @property
    def own_share(self) -> float:
        return self.f.own_cores / self.f.cpus

    @property
    def guest(self) -> list[float]:
        return _guest_shares(self.s, self.f.dur)


def _loadgen(c: _Case) -> Verdict | None:
    """1. The load generator: a saturated thread of its here, its busiest client command
    on another machine, or all its CPUs."""
    for t in c.f.threads:
        if t.group == "loadgen" and saturated(t):
            return Verdict(Limiter.LOADGEN,
                           f"load generator saturated: {_share(t)}: the result measures "
                           "the client", (f"load-generator thread saturated: {_share(t)} "
                                          f"(saturated: >= {_pct(SATURATED)}, or a tick >= "
                                          f"{_pct(SATURATED_PEAK)} with >= "
                                          f"{_pct(SATURATED_SUSTAINED)})", *c.ctx),
                           float(t.core_share))
    lg = c.s.loadgen
    if lg is not None and lg.busiest is not None and lg.busiest >= SATURATED:
        # A load generator on another machine: its busiest client command's share of a core.
        return Verdict(Limiter.LOADGEN,
                       f"load generator saturated: a client used {_pct(lg.busiest)} of a "
                       "core on the load generator: the result measures the client",
                       (f"busiest client command {_pct(lg.busiest)} of a core >= "
                        f"{_pct(SATURATED)} ({lg.source})", *c.ctx), float(lg.busiest))
    if lg is None:
        return None
    lg_cpus = lg.cpus or c.f.cpus
    lg_share = float(lg.cpu_s) / c.f.dur / lg_cpus
    whose = "the load generator's" if lg.cpus else "the host's"
    if lg_share >= LOADGEN_ALL:
        return Verdict(Limiter.LOADGEN,
                       f"load generator saturated: it used {_pct(lg_share)} of {whose} "
                       f"{lg_cpus} CPUs: the result measures the client",
                       (f"load generator CPU {float(lg.cpu_s):.2f} s over "
                        f"{c.f.dur:.1f} s on {lg_cpus} CPUs ({lg.source}) >= "
                        f"{_pct(LOADGEN_ALL)}", *c.ctx), lg_share)
    c.ruled_out.append(f"load generator: no thread saturated, {lg_share * lg_cpus:.2f} cores "
                       "in all")
    return None


def _one_core(c: _Case) -> Verdict | None:
    """2. One core: the busiest saturated thread of the workload with room elsewhere, or a
    guest's busiest CPU."""
    c.sat = [t for t in c.f.threads if t.group in WORKLOAD_GROUPS and saturated(t)]
    gs = c.guest
    if c.sat:
        t = c.sat[0]
        rest = c.f.own_cores - float(t.core_share)
        if c.f.cpus > 1 and rest < ONE_CORE_REST * (c.f.cpus - 1):
            extra = (f"; the guest's busiest CPU {_pct(max(gs))}",) if gs else ()
            return Verdict(Limiter.ONE_CORE, f"one core saturated: {_share(t)}",
                           (f"saturated: {_share(t)}; the rest of the own CPU is {rest:.2f} "
                            f"cores < {ONE_CORE_REST} per other CPU" + "".join(extra),
                            *c.ctx), float(t.core_share))
        c.ruled_out.append(f"one core: {_who(t)} saturated but the rest of the own CPU is "
                           f"{rest:.2f} cores")
    if gs:
        top = max(gs)
        i = gs.index(top)
        rest_g = sum(gs) - top
        if top >= SATURATED and (len(gs) == 1 or rest_g < ONE_CORE_REST * (len(gs) - 1)):
            only = " (its only CPU)" if len(gs) == 1 else ""
            return Verdict(Limiter.ONE_CORE,
                           f"one core saturated: the guest's cpu{i}{only} at {_pct(top)} busy",
                           (f"guest cpu{i} busy {_pct(top)} >= {_pct(SATURATED)}; its other "
                            f"CPUs {rest_g:.2f} in all", *c.ctx), top)
    return None


def _all_own_cores(c: _Case) -> Verdict | None:
    """3. All cores, kept busy by the workload itself (or all of a guest's)."""
    own_share, gs = c.own_share, c.guest
    if own_share >= ALL_OWN:
        return Verdict(Limiter.ALL_CORES,
                       f"all cores busy: the workload kept {c.f.own_cores:.2f} of {c.f.cpus} "
                       "CPUs busy",
                       (f"own CPU {_pct(own_share)} of the host >= {_pct(ALL_OWN)}", *c.ctx),
                       own_share)
    if len(gs) >= 2 and min(gs) >= SATURATED:
        return Verdict(Limiter.ALL_CORES,
                       f"all cores busy: all {len(gs)} of the guest's CPUs busy "
                       f"(>= {_pct(min(gs))})",
                       (f"every guest CPU busy >= {_pct(SATURATED)}", *c.ctx), min(gs))
    c.ruled_out.append(f"CPU: no workload thread saturated, own CPU {_pct(own_share)} of the "
                       f"host (< {_pct(ALL_OWN)})" if not c.sat else
                       f"all cores: own CPU {_pct(own_share)} of the host (< {_pct(ALL_OWN)})")
    return None


def _device(c: _Case) -> Verdict | None:
    """4. A device with I/O outstanding most of the run."""
    dname, dbusy, dline = _disk_lines(c.s, c.f.dur)
    if dbusy >= DISK_BUSY:
        flight = c.s.work.in_flight if c.s.work is not None else None
        at = f" at {flight} in flight" if flight is not None else ""
        return Verdict(Limiter.DEVICE,
                       f"device busy: {dname} had I/O outstanding {_pct(dbusy)} of the run{at}",
                       (dline + f" >= {_pct(DISK_BUSY)}",
                        "busy time counts time with any I/O outstanding: a device that serves "
                        "several at once (virtio, NVMe) may still do more; a deeper queue "
                        "tells a ceiling from latency", *c.ruled_out, *c.ctx), dbusy)
    if dline:
        c.ruled_out.append(dline)
    return None


def _io_wait(c: _Case) -> Verdict | None:
    """5. CPUs idle with I/O pending."""
    iow, iow_line = _iowait_cores(c.s, c.f.dur)
    if iow >= IOWAIT_CORES:
        return Verdict(Limiter.IO_WAIT,
                       f"I/O wait: CPUs idle with I/O pending {iow:.2f} s per second",
                       (f"{iow_line} >= {IOWAIT_CORES}", *c.ruled_out, *c.ctx), iow)
    c.ruled_out.append(iow_line)
    return None


def _network(c: _Case) -> Verdict | None:
    """6. A physical link near its speed."""
    lname, lshare, lline = _link(c.s, c.f.dur)
    if lname and lshare >= LINK_NEAR:
        return Verdict(Limiter.NETWORK, f"network ceiling: {lline}",
                       (f"{lline} >= {_pct(LINK_NEAR)} of its speed", *c.ruled_out, *c.ctx),
                       lshare)
    if lline:
        c.ruled_out.append(lline)
    return None


def _latency(c: _Case) -> Verdict | None:
    """7. Latency: an in-flight limit and CPU to spare."""
    work, own_share = c.s.work, c.own_share
    flight = work.in_flight if work is not None else None
    if work is None or flight is None or work.unit in BULK_UNITS or c.sat \
            or own_share > LATENCY_OWN_MAX:
        return None
    busiest = max(c.s.cpu_busy_share or [0.0])
    return Verdict(Limiter.LATENCY,
                   f"latency-bound: {flight} in flight, own CPU {_pct(own_share)} of the "
                   "host, no thread saturated",
                   (f"in flight by design: {flight} (per {work.unit}); no "
                    f"thread saturated, own CPU {_pct(own_share)} <= {_pct(LATENCY_OWN_MAX)}; "
                    f"busiest CPU {_pct(busiest)}", *c.ruled_out, *c.ctx), own_share)


def _all_host_cores(c: _Case) -> Verdict | None:
    """8. All cores, with other tenants."""
    f = c.f
    if f.host_share < ALL_HOST:
        return None
    return Verdict(Limiter.ALL_CORES,
                   f"all cores busy: the host {_pct(f.host_share)} busy, other tenants "
                   f"{f.other_cores:.2f} cores of it",
                   (f"host busy {_pct(f.host_share)} >= {_pct(ALL_HOST)}; the workload's "
                    f"own {f.own_cores:.2f} cores", *c.ruled_out, *c.ctx), f.host_share)


# The rules in the order the module docstring gives them.
_RULES = (_loadgen, _one_core, _all_own_cores, _device, _io_wait, _network, _latency,
          _all_host_cores)


def aggregate(verdicts: Sequence[Verdict]) -> Verdict:
    """One verdict for the repetitions of a point: the most common limiter (a tie goes to the
    earlier rule), with the words and evidence of its typical repetition (the one whose
    measure is nearest the median); the words say "k of n repetitions" when they disagree."""
    if not verdicts:
        return Verdict(Limiter.NO_CLEAR, "no clear limiter: no repetitions", ())
    counts = Counter(v.limiter for v in verdicts)
    top = min(counts, key=lambda lim: (-counts[lim], _PRIORITY.index(lim)))
    same = [v for v in verdicts if v.limiter is top]
    mid = statistics.median(v.measure for v in same)
    typical = min(same, key=lambda v: abs(v.measure - mid))
    if len(same) == len(verdicts):
        return typical
    rest = ", ".join(f"{lim} {n}" for lim, n in counts.most_common() if lim is not top)
    return Verdict(top, f"{typical.words} ({len(same)} of {len(verdicts)} repetitions)",
                   (f"{len(same)} of {len(verdicts)} repetitions; the others: {rest}",
                    *typical.evidence), typical.measure)
