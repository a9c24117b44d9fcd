"""Watching one measured run: the sampler in the background, exact counters at both ends.

`observed(...)` wraps a workload's run. Before and after it, it reads what counts exactly:
  - the environment's own work, from where the environment itself accounts it:
      container, native  its CPU-accounting group (isotax.telemetry.cpuacct): every process that ran
                         in it, the exited ones included;
      VM, gVisor         the guest's (the Sentry's) own /proc/stat, read with an exec: the
                         host sees only QEMU or the Sentry, not which part of their time was
                         the guest's work;
  - the load generator's clients, from their group;
  - host-wide CPU by kind, from /proc/stat (the sampler's first and last tick);
  - where perf can count on this host, software events host-wide (context switches, CPU
    migrations, page faults). Hardware events (cycles, instructions) need a PMU; this
    Firecracker guest has none, and the summary says so.
Between the ends the sampler (isotax.telemetry.sampler) records per-tick telemetry.
The result is (summary, series), stored with the cell (store.commit_cell's telemetry).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from isotax.model import SanityError
from isotax.parsers.perf_stat import parse_perf_stat
from isotax.protocols import ExecError, GuestStat, Instance, Isolation, LoadGen, OwnCpuGroup
from isotax.telemetry import cpuacct
from isotax.telemetry.counters import PMU_DIR, PerfReading, perf_counting
from isotax.telemetry.sampler import (
    CPU_COLS,
    Classifier,
    Sampler,
    StatReading,
    busy_seconds,
    parse_stat,
    summarize,
)
from isotax.telemetry.summary import Counted, GuestCpu, Link, PerfEvents, TelemetrySummary

PERF_SOFTWARE_EVENTS = ("context-switches", "cpu-migrations", "page-faults")
GUEST_KINDS = ("vm", "sandbox")  # identity classes whose work the host cannot see


@dataclass(frozen=True)
class Settings:
    """The plan's [telemetry] table."""

    interval_s: float = 0.5
    perf: bool = True


@dataclass
class Observation:
    """Filled in when the `with observed(...)` block ends: (summary, series), or why not."""

    summary: TelemetrySummary | None = None
    series: dict[str, Any] = field(default_factory=dict)
    error: str = ""


def inside_group(inst: Instance, cls: str) -> Path | None:
    """The CPU-accounting group that holds the environment's own processes, or None."""
    if isinstance(inst, OwnCpuGroup):
        return inst.cpu_accounting_dir()
    if cls != "container":
        return None
    return cpuacct.common_group(list(inst.host_pids()))


def guest_delta(before: StatReading, after: StatReading) -> GuestCpu:
    """CPU seconds the guest accounted by kind between two readings, and its busy total. Pure."""
    cols = CPU_COLS
    out = dict.fromkeys(cols, 0.0)
    per_cpu: list[float] = []  # each guest CPU's busy seconds
    for name in sorted(after.cpus, key=lambda n: int(n[3:])):
        a, b = before.cpus.get(name), after.cpus[name]
        if a is None:
            continue
        d = {col: max(0.0, y - x) for col, x, y in zip(cols, a, b, strict=True)}
        for col in cols:
            out[col] += d[col]
        per_cpu.append(round(busy_seconds([d[col] for col in cols]), 4))
    out["busy"] = busy_seconds([out[col] for col in cols])
    r = {k: round(v, 4) for k, v in out.items()}
    return GuestCpu(user=r["user"], nice=r["nice"], system=r["system"], idle=r["idle"],
                    iowait=r["iowait"], irq=r["irq"], softirq=r["softirq"], steal=r["steal"],
                    busy=r["busy"], cpus=len(per_cpu), cpu_busy_s=tuple(per_cpu))


# A sampler inside the guest: the agent answers one request at a time, so the guest's
# /proc/stat cannot be read from outside while the workload's exec runs. This loop writes a
# marked reading (with the guest's uptime as its clock) every interval into the guest's
# scratch; isotax stops it by PID and reads the file after the run.
_GUEST_LOOP = ('( while :; do echo "itx-tick $(cut -d" " -f1 /proc/uptime)"; cat /proc/stat; '
               'sleep "$1"; done ) > "$2" 2>/dev/null & echo $!')
_TICK = "itx-tick "


# Where the instance has no GuestStat (gVisor; a VM image older than its agent's stat ops):
# one exec into the guest at each end of a run (under TCG each exec costs 0.1-0.3 s): the
# first reads /proc/stat and starts the sampling loop, the second stops the loop, returns what
# it wrote and reads /proc/stat again. _SPLIT separates the two outputs.
_SPLIT = "itx-split"
_GUEST_OPEN = ('cat /proc/stat; echo ' + _SPLIT + '; [ "$1" = 0 ] && exit 0; ' + _GUEST_LOOP)
_GUEST_CLOSE = ('[ -n "$1" ] && { kill "$1" 2>/dev/null; cat "$2"; rm -f "$2"; }; echo '
                + _SPLIT + '; cat /proc/stat')


@dataclass(frozen=True)
class GuestLoop:
    """How the guest is being watched: by its agent (isotax.protocols.GuestStat, no command),
    or by a shell loop started with exec (its pid and the file it writes; pid None: no loop)."""

    agent: bool = False
    pid: int | None = None
    path: str = ""


def open_guest(inst: Instance, interval_s: float) -> tuple[StatReading | None, GuestLoop]:
    """The guest's /proc/stat now, and how its sampling (every interval_s; none for 0) runs;
    a None reading where the guest cannot be asked. An instance with GuestStat is asked
    through it; a refusal there (an agent older than the op) falls back to exec."""
    if isinstance(inst, GuestStat):
        text = inst.guest_stat_open(interval_s)
        if text is not None:
            return _stat(text), GuestLoop(agent=True)
    path = f"{inst.scratch}/itx-guest-stat"
    try:
        done = inst.exec(["sh", "-c", _GUEST_OPEN, "sh", f"{interval_s:g}", path], 30)
    except ExecError:
        return None, GuestLoop()
    stat, found, rest = done.stdout.partition(_SPLIT + "\n")
    if done.returncode != 0 or not found:
        return None, GuestLoop()
    pid = rest.strip()
    return _stat(stat), GuestLoop(pid=int(pid), path=path) if pid.isdigit() else GuestLoop()


def close_guest(inst: Instance, loop: GuestLoop) -> tuple[str, StatReading | None]:
    """Stop the guest's sampling (if it runs): what it read ("" when nothing came back), and
    the guest's /proc/stat now (None where it cannot be read)."""
    if loop.agent:
        got = inst.guest_stat_close() if isinstance(inst, GuestStat) else None
        return ("", None) if got is None else (got[0], _stat(got[1]))
    pid = "" if loop.pid is None else str(loop.pid)
    try:
        done = inst.exec(["sh", "-c", _GUEST_CLOSE, "sh", pid, loop.path], 60)
    except ExecError:
        return "", None
    text, found, stat = done.stdout.partition(_SPLIT + "\n")
    if done.returncode != 0 or not found:
        return "", None
    return text, _stat(stat)


def _stat(text: str) -> StatReading | None:
    try:
        return parse_stat(text, 100.0)
    except ValueError:
        return None


def guest_series(text: str) -> dict[str, Any]:
    """The guest's per-tick busy share of each of its CPUs from the loop's output. Pure."""
    readings: list[tuple[float, StatReading]] = []
    for chunk in text.split(_TICK)[1:]:
        head, _, body = chunk.partition("\n")
        if "\nctxt " not in body:
            continue  # cut off by the kill before /proc/stat was whole
        try:
            readings.append((float(head.strip()), parse_stat(body, 100.0)))
        except ValueError:
            continue
    t: list[float] = []
    busy: list[list[float]] = []
    for (t0, a), (t1, b) in itertools.pairwise(readings):
        dt = t1 - t0
        if dt <= 0:
            continue
        row = []
        for name in sorted(b.cpus, key=lambda n: int(n[3:])):
            if name in a.cpus:
                d = [y - x for x, y in zip(a.cpus[name], b.cpus[name], strict=True)]
                row.append(round(min(1.0, busy_seconds(d) / dt), 3))
        t.append(round(t1 - readings[0][0], 3))
        busy.append(row)
    return {"t": t, "cpu_busy": busy}


def _perf_counts(raw: str) -> dict[str, float | None]:

    out: dict[str, float | None] = {}
    for c in parse_perf_stat(raw):
        out[c.base_event] = c.value
    return out


@contextlib.contextmanager
def observed(inst: Instance, isolation: Isolation, loadgen: LoadGen | None,
             settings: Settings, read_guest: bool = True) -> Iterator[Observation]:
    """Watch the body of the `with`: see the module docstring. `isolation`: what the runner
    proved the instance is (run.identity), which says where its work shows. Never raises for
    a telemetry problem; the observation says what went wrong instead. `read_guest` False:
    the instance is paused (a workload that launches fresh instances), so its guest is not
    asked."""
    obs = Observation()
    cls = isolation.value
    group = inside_group(inst, cls)
    lg_group = loadgen.clients_cpu() if loadgen is not None else None
    # The load generator's network namespace tells its clients' threads on this host.
    lg_netns = loadgen.clients_netns() if loadgen is not None else None
    guest0, gloop = (open_guest(inst, settings.interval_s) if cls in GUEST_KINDS and read_guest
                     else (None, GuestLoop()))
    inside0 = _usage(group)
    lg0 = lg_group.usage_s() if lg_group is not None else None
    # A meter that keeps each client command's time also finds the busiest one.
    lg_mark = lg_group.mark() if lg_group is not None else None
    classifier = Classifier(inst.host_pids, cls, lg_netns, inside_group=group)
    sampler = Sampler(settings.interval_s, classifier)

    def starting(perf: PerfReading | None) -> None:
        if perf is not None and perf.pid:
            classifier.own_pids.add(perf.pid)  # before the first tick classifies it
        sampler.start()

    def stopping(perf: PerfReading | None) -> None:
        sampler.stop()

    # The sampler's first and last ticks run while perf starts and stops (perf_counting).
    perf_cm: Any = (perf_counting(",".join(PERF_SOFTWARE_EVENTS), starting, stopping)
                    if settings.perf else _unwatched(starting, stopping))
    with perf_cm as perf:
        yield obs
    rec = sampler.rec
    inside1 = _usage(group)
    lg1 = lg_group.usage_s() if lg_group is not None else None
    gtext, guest1 = close_guest(inst, gloop) if guest0 is not None else ("", None)
    try:
        sampled, obs.series = summarize(rec)
    except ValueError as e:
        obs.error = f"telemetry: {e}"
        return
    guest: GuestCpu | None = None
    if inside0 is not None and inside1 is not None:
        inside = Counted(round(inside1 - inside0, 4), f"cgroup CPU accounting ({group})")
    elif guest0 is not None and guest1 is not None:
        guest = guest_delta(guest0, guest1)
        gs = guest_series(gtext)
        if gs["t"]:
            obs.series["guest_cpu_busy"], obs.series["guest_t"] = gs["cpu_busy"], gs["t"]
            guest = replace(guest, cpu_busy_peak=tuple(
                max(col) for col in zip(*gs["cpu_busy"], strict=False)))
        what = "the Sentry's" if cls == "sandbox" else "the guest's"
        inside = Counted(guest.busy, f"{what} own /proc/stat")
    else:
        inside = Counted(sampled.group_cpu_s("inside"),
                         "sampled threads (misses a thread's last tick before it exits)")
    lg: Counted | None = None
    if lg0 is not None and lg1 is not None:
        assert lg_group is not None
        lg = Counted(round(lg1 - lg0, 4), lg_group.source, cpus=lg_group.cpus,
                     busiest=None if lg_mark is None else lg_group.busiest_since(lg_mark))
    elif loadgen is not None:
        lg = Counted(sampled.group_cpu_s("loadgen"), "sampled threads")
    obs.summary = replace(sampled, kind_class=cls, links=link_speeds(sampled.links),
                          guest=guest, inside=inside, loadgen=lg, perf=_perf_summary(perf))


@contextlib.contextmanager
def _unwatched(starting: Callable[[None], None], stopping: Callable[[None], None]
               ) -> Iterator[None]:
    """perf off in the plan: the same two ends, no perf."""
    starting(None)
    try:
        yield None
    finally:
        stopping(None)


def _usage(group: Path | None) -> float | None:
    if group is None:
        return None
    try:
        return cpuacct.usage_s(group)
    except (OSError, ValueError):
        return None


def _perf_summary(perf: Any) -> PerfEvents:
    hardware = ("hardware events (cycles, instructions): not supported here, no PMU "
                f"({PMU_DIR} is missing)") if not PMU_DIR.is_dir() else \
        "hardware events: not collected per run (see the throughput workload's cycles)"
    if perf is None:
        return PerfEvents({}, "perf off in the plan's [telemetry]", hardware)
    raw = getattr(perf, "raw", "")
    if not raw:
        return PerfEvents({}, perf.reason, hardware)
    try:
        counts = _perf_counts(raw)
    except (ValueError, SanityError) as e:
        return PerfEvents({}, str(e), hardware)
    return PerfEvents(counts, "software events only, host-wide (perf stat -a)", hardware)


def link_speeds(links: Mapping[str, Link], net: Path = Path("/sys/class/net")
                ) -> dict[str, Link]:
    """The summary's links with each one's speed (Mb/s; None where the driver reports none:
    -1, absent, a bridge) and whether it is virtual (under /sys/devices/virtual: veth, bridge,
    tap report 10000 Mb/s or nothing, a number, not a ceiling), for the limiter's network
    rule. A link gone by now (an instance's veth) gets None and virtual None."""
    out = {}
    for name, link in links.items():
        d = net / name
        try:
            speed = int((d / "speed").read_text().strip())
        except (OSError, ValueError):
            speed = -1
        out[name] = replace(link, speed_mbps=speed if speed > 0 else None,
                            virtual="/devices/virtual/" in str(d.resolve()) if d.exists()
                            else None)
    return out
