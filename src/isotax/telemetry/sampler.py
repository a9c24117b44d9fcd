"""Telemetry while a measured run runs: what the host, its CPUs, its disks and links, and every
thread on it did, sampled at the plan's interval and stored beside the cell's samples.

Brendan Gregg's active benchmarking: a number is only understood once you know what limited
it, and that is seen by watching the system while the benchmark runs. Every tick reads
  - /proc/stat: per-CPU user, nice, system, idle, iowait, irq, softirq, steal; context
    switches and interrupts;
  - /proc/diskstats and /proc/net/dev: bytes, operations and device busy time;
  - /proc/PID/task/TID/stat of every thread on the host: its CPU time and name, and, per
    process, its group (below) and resident memory.
Ticks are turned into a summary (telemetry.summary.TelemetrySummary: what the limiter rules
and the report read) and a series (per-tick values for figures) by `summarize`, a pure
function tested on recorded ticks. The /proc formats are read by isotax.parsers.procfs.

Every host thread belongs to one group, decided once per process:
  inside     the environment's own work as the host sees it: a container's processes (its own
             PID namespace), the commands the native environment runs (isotax's children)
  machinery  the environment's other host processes: QEMU (its vCPU threads run the guest),
             gVisor's Sentry and Gofer, an engine's shim and proxy, a container's idle init
  loadgen    the load generator's clients (processes in its network namespace)
  kernel     kernel threads: ksoftirqd, kworkers, vhost
  isotax     isotax itself and the plumbing it runs (runc exec, perf)
  other      everything else: other tenants of a shared host
Sampled thread time misses what a thread did after the last tick before it exited; exact
totals for the groups that matter come from counters read at the ends of the run (cgroup CPU
accounting, the guest's own /proc/stat) by isotax.telemetry.observe, not from these samples.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isotax.parsers import procfs
from isotax.telemetry.cpuacct import group_dir_of
from isotax.telemetry.footprint import process_parents, program_name, with_descendants
from isotax.telemetry.summary import (
    GROUPS,
    SUMMARY_VERSION,
    CpuSeconds,
    Disk,
    GroupUse,
    Link,
    ProgramUse,
    TelemetrySummary,
    ThreadUse,
)

TOP_THREADS = 12  # threads kept in the summary, by CPU used

# /proc/stat per-CPU columns (proc(5)); guest and guest_nice are already inside user/nice.
CPU_COLS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# A partition counts inside its disk: sda1, vda2, nvme0n1p1, mmcblk0p1.
_PARTITION = re.compile(r"^((sd|vd|xvd|hd)[a-z]+\d+|.+\dp\d+)$")
_PAGE = os.sysconf("SC_PAGE_SIZE")


# -- pure parsers ------------------------------------------------------------------------------
@dataclass(frozen=True)
class StatReading:
    """One /proc/stat: per CPU the seconds in each column of CPU_COLS; ctxt and intr totals."""

    cpus: dict[str, tuple[float, ...]]
    ctxt: int
    intr: int


def parse_stat(text: str, hz: float = 100.0) -> StatReading:
    """/proc/stat text -> per-CPU seconds (cpu0, cpu1, ...), context switches, interrupts."""
    stat = procfs.parse_stat(text)
    if not stat.cpus:
        raise ValueError("no per-CPU lines: not the text of /proc/stat")
    cpus = {name: tuple(v / hz for v in ticks[:len(CPU_COLS)])
            for name, ticks in stat.cpus.items()}
    return StatReading(cpus, stat.ctxt, stat.intr)


def parse_diskstats(text: str) -> dict[str, tuple[int, int, int, int, int]]:
    """/proc/diskstats -> per whole disk (partitions, loop and ram devices left out):
    (reads completed, sectors read, writes completed, sectors written, ms spent doing I/O)."""
    out: dict[str, tuple[int, int, int, int, int]] = {}
    for line in text.splitlines():
        p = line.split()
        if len(p) < 14:
            continue
        name = p[2]
        if name.startswith(("loop", "ram", "zram")) or _PARTITION.match(name):
            continue
        out[name] = (int(p[3]), int(p[5]), int(p[7]), int(p[9]), int(p[12]))
    return out


def parse_net_dev(text: str) -> dict[str, tuple[int, int, int, int]]:
    """/proc/net/dev -> per interface (rx bytes, rx packets, tx bytes, tx packets)."""
    out: dict[str, tuple[int, int, int, int]] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        p = rest.split()
        if not sep or len(p) < 16 or not p[0].isdigit():
            continue
        out[name.strip()] = (int(p[0]), int(p[1]), int(p[8]), int(p[9]))
    return out


def parse_task_stat(text: str) -> tuple[str, int, int]:
    """/proc/PID/task/TID/stat -> (thread name, ppid, utime + stime ticks). A thread's stat
    has the fields of a process's."""
    st = procfs.parse_pid_stat(text)
    return st.name, st.ppid, st.own


# -- what one tick holds ---------------------------------------------------------------------
@dataclass(frozen=True)
class ThreadTick:
    pid: int
    tid: int
    name: str  # the thread's own name (comm): "CPU 0/TCG", "xz", "ksoftirqd/1"
    ticks: int  # utime + stime so far, clock ticks


@dataclass
class Tick:
    t: float  # seconds since the recording began
    stat: StatReading
    disks: dict[str, tuple[int, int, int, int, int]]
    links: dict[str, tuple[int, int, int, int]]
    threads: dict[int, ThreadTick]  # tid -> thread
    rss: dict[str, int]  # group -> resident bytes of its processes now
    proc_rss: dict[int, int] = field(default_factory=dict)  # pid -> resident bytes (not
    # kernel or other processes)


@dataclass
class Recording:
    """Ticks from the start to the end of a run, with each process's group and program."""

    interval_s: float
    hz: float
    ticks: list[Tick] = field(default_factory=list)
    groups: dict[int, str] = field(default_factory=dict)  # pid -> group
    programs: dict[int, str] = field(default_factory=dict)  # pid -> program name


# -- classifying host processes ----------------------------------------------------------------
def _ns(pid: int, kind: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except OSError:
        return None


@dataclass
class Classifier:
    """Decides each host process's group (see the module docstring). `env_pids` is asked at
    every tick: processes join an environment while it runs (a docker exec, a proxy)."""

    env_pids: Callable[[], Iterable[int]]
    kind_class: str  # identity's class of the environment: host, container, sandbox or vm
    loadgen_netns: int | None = None  # inode of the load generator's network namespace
    own_pids: set[int] = field(default_factory=set)  # isotax's plumbing (perf)
    # The CPU-accounting group of the environment's own processes (cpuacct), where it
    # has one: a process in it is inside, wherever it came from (a server that detached).
    inside_group: Path | None = None
    _host_pidns: int | None = field(default=None, init=False)
    _me: int = field(default_factory=os.getpid, init=False)

    def __post_init__(self) -> None:
        self._host_pidns = _ns(self._me, "pid")

    def group(self, pid: int, ppid: int, env: set[int], parents: Mapping[int, int]) -> str:
        if self.inside_group is not None and self.kind_class in ("host", "container"):
            d = group_dir_of(pid)
            if d is not None and (d == self.inside_group or self.inside_group in d.parents):
                return "inside"
        if pid in env:
            inside = self.kind_class == "container" and _ns(pid, "pid") != self._host_pidns
            return "inside" if inside else "machinery"
        if self.loadgen_netns is not None and _ns(pid, "net") == self.loadgen_netns:
            return "loadgen"
        if pid == 2 or ppid == 2:
            return "kernel"
        if pid == self._me or pid in self.own_pids:
            return "isotax"
        if _descends_from(pid, self._me, parents):
            # The native environment's commands are isotax's children; for every other kind
            # they are the exec plumbing (runc exec, nsenter), isotax's own cost.
            return "inside" if self.kind_class == "host" else "isotax"
        return "other"


def _descends_from(pid: int, ancestor: int, parents: Mapping[int, int]) -> bool:
    seen = 0
    while pid > 1 and seen < 64:
        pid = parents.get(pid, 0)
        if pid == ancestor:
            return True
        seen += 1
    return False


# -- the sampler -------------------------------------------------------------------------------
class Sampler:
    """A background thread that records a Tick every `interval_s` from start() to stop()."""

    def __init__(self, interval_s: float, classifier: Classifier,
                 proc: Path = Path("/proc")) -> None:
        self.rec = Recording(interval_s, float(os.sysconf("SC_CLK_TCK")))
        self.classifier = classifier
        self.proc = proc
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._tick()  # the first reading is taken before the body runs
        if self.rec.interval_s > 0:
            self._thread = threading.Thread(target=self._loop, name="itx-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> Recording:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._tick()  # and the last one after it ended
        elif not self._stop.is_set():
            self._stop.set()
            self._tick()
        return self.rec

    def _loop(self) -> None:
        while not self._stop.wait(self.rec.interval_s):
            self._tick()

    def _tick(self) -> None:
        t = time.monotonic() - self._t0
        try:
            stat = parse_stat((self.proc / "stat").read_text(), self.rec.hz)
            disks = parse_diskstats(_read(self.proc / "diskstats"))
            links = parse_net_dev(_read(self.proc / "net/dev"))
        except (OSError, ValueError):
            return
        threads, rss, proc_rss = self._threads()
        self.rec.ticks.append(Tick(t, stat, disks, links, threads, rss, proc_rss))

    def _threads(self) -> tuple[dict[int, ThreadTick], dict[str, int], dict[int, int]]:

        parents = process_parents()
        env = set(_with_descendants(self.classifier.env_pids(), parents))
        threads: dict[int, ThreadTick] = {}
        rss = dict.fromkeys(GROUPS, 0)
        proc_rss: dict[int, int] = {}
        for pid in parents:
            group = self.rec.groups.get(pid)
            if group is None:
                group = self.classifier.group(pid, parents.get(pid, 0), env, parents)
                self.rec.groups[pid] = group
                try:
                    comm = (self.proc / str(pid) / "comm").read_text().strip()
                    cmd = (self.proc / str(pid) / "cmdline").read_bytes()
                except OSError:
                    comm, cmd = "?", b""
                self.rec.programs[pid] = program_name(comm, cmd)
            elif group in ("other", "isotax"):
                # Not settled yet: a process joins its container's group and namespace only
                # after it was forked (runc exec's process is seen on the host side first).
                group = self.classifier.group(pid, parents.get(pid, 0), env, parents)
                self.rec.groups[pid] = group
            try:
                tids = os.listdir(self.proc / str(pid) / "task")
            except OSError:
                continue
            for tid in tids:
                try:
                    name, _, used = parse_task_stat(
                        (self.proc / str(pid) / "task" / tid / "stat").read_text())
                except (OSError, ValueError, IndexError):
                    continue
                threads[int(tid)] = ThreadTick(pid, int(tid), name, used)
            if group not in ("kernel", "other"):
                try:
                    pages = int((self.proc / str(pid) / "statm").read_text().split()[1])
                    rss[group] += pages * _PAGE
                    proc_rss[pid] = pages * _PAGE
                except (OSError, ValueError, IndexError):
                    pass
        return threads, rss, proc_rss


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _with_descendants(roots: Iterable[int], parents: Mapping[int, int]) -> list[int]:

    return with_descendants(list(roots), parents)


# -- ticks -> summary and series (pure) --------------------------------------------------------
def busy_seconds(c: Sequence[float]) -> float:
    """The busy part of /proc/stat columns in CPU_COLS order (user, nice, system, irq,
    softirq; not idle, iowait or steal)."""
    user, nice, system, _idle, _iowait, irq, softirq, _steal = c[:8]
    return user + nice + system + irq + softirq


def summarize(rec: Recording) -> tuple[TelemetrySummary, dict[str, Any]]:
    """(summary, series) of a recording: the sampler's part of the summary (telemetry.summary
    says who adds the rest). Pure.

    Summary: the run's duration; host CPU seconds by kind and each CPU's busy share (mean and
    the busiest tick); context switches and interrupts per second; per disk bytes and busy
    share; per link bytes and packets; per group the CPU seconds the sampled threads used and
    the largest resident memory; the threads that used most CPU, each with its share of one
    core (mean over the run, and its busiest tick). Series: per tick, each CPU's busy share,
    iowait, and each group's CPU in cores."""
    ticks = rec.ticks
    if len(ticks) < 2:
        raise ValueError("telemetry needs at least two ticks")
    first, last = ticks[0], ticks[-1]
    dur = last.t - first.t
    if dur <= 0:
        raise ValueError("telemetry ticks span no time")
    cpus, host, per_cpu_busy = _host_cpu(first, last, dur)
    busy_s = sum(host[k] for k in ("user", "nice", "system", "irq", "softirq"))
    series, peaks, thread_peak = _per_tick(rec, cpus, len(per_cpu_busy))
    lives = _lifetimes(rec)
    group_cpu, threads = _thread_use(rec, lives, thread_peak, dur)
    rss_max = {g: max(t.rss.get(g, 0) for t in ticks) for g in GROUPS}
    summary = TelemetrySummary(
        version=SUMMARY_VERSION,
        interval_s=rec.interval_s,
        ticks=len(ticks),
        duration_s=round(dur, 4),
        cpus=len(per_cpu_busy),
        host_cpu_s=CpuSeconds(**{k: round(v, 4) for k, v in host.items()},
                              busy=round(busy_s, 4)),
        cpu_busy_share=tuple(per_cpu_busy),
        cpu_busy_peak=tuple(round(p, 4) for p in peaks),
        ctxt_per_s=round((last.stat.ctxt - first.stat.ctxt) / dur, 1),
        intr_per_s=round((last.stat.intr - first.stat.intr) / dur, 1),
        disks=_disks(first, last, dur),
        links=_links(first, last),
        groups={g: GroupUse(round(group_cpu[g], 4), rss_max[g]) for g in GROUPS},
        threads=threads,
        programs={g: {name: ProgramUse(u["cpu_s"], u["rss_max_bytes"])
                      for name, u in by.items()} for g, by in _programs(rec, lives).items()},
    )
    return summary, series


def _host_cpu(first: Tick, last: Tick, dur: float
              ) -> tuple[list[str], dict[str, float], list[float]]:
    """(the CPUs, host CPU seconds by kind, each CPU's busy share) between two ticks."""
    cpus = sorted(last.stat.cpus, key=lambda n: int(n[3:]))
    host = dict.fromkeys(CPU_COLS, 0.0)
    per_cpu_busy: list[float] = []
    for name in cpus:
        a, b = first.stat.cpus.get(name), last.stat.cpus[name]
        if a is None:
            continue
        d = [y - x for x, y in zip(a, b, strict=True)]
        for col, v in zip(CPU_COLS, d, strict=True):
            host[col] += v
        per_cpu_busy.append(round(min(1.0, busy_seconds(d) / dur), 4))
    return cpus, host, per_cpu_busy


def _per_tick(rec: Recording, cpus: list[str], n_busy: int
              ) -> tuple[dict[str, Any], list[float], dict[int, float]]:
    """(series, each CPU's busiest tick, each thread's busiest tick): per tick each CPU's
    busy share, the iowait share, and each group's CPU in cores."""
    series: dict[str, Any] = {"t": [], "cpu_busy": [], "iowait": [],
                              **{f"cores_{g}": [] for g in GROUPS}}
    peaks = [0.0] * n_busy
    thread_peak: dict[int, float] = {}
    for prev, cur in itertools.pairwise(rec.ticks):
        dt = cur.t - prev.t
        if dt <= 0:
            continue
        row, io = [], 0.0
        for i, name in enumerate(cpus):
            pa, pb = prev.stat.cpus.get(name), cur.stat.cpus.get(name)
            if pa is None or pb is None:
                continue
            d = [y - x for x, y in zip(pa, pb, strict=True)]
            share = min(1.0, busy_seconds(d) / dt)
            row.append(round(share, 3))
            if i < len(peaks):
                peaks[i] = max(peaks[i], share)
            io += d[4]
        cores = dict.fromkeys(GROUPS, 0.0)
        for tid, th in cur.threads.items():
            before = prev.threads.get(tid)
            if before is None or before.pid != th.pid:
                continue
            used = max(0, th.ticks - before.ticks) / rec.hz
            cores[rec.groups.get(th.pid, "other")] += used / dt
            # A tick shorter than a few clock ticks cannot resolve a share of a core.
            if dt * rec.hz >= 10:
                thread_peak[tid] = max(thread_peak.get(tid, 0.0), min(1.0, used / dt))
        series["t"].append(round(cur.t, 3))
        series["cpu_busy"].append(row)
        series["iowait"].append(round(io / dt / max(1, len(cpus)), 4))
        for g in GROUPS:
            series[f"cores_{g}"].append(round(cores[g], 3))
    return series, peaks, thread_peak


def _lifetimes(rec: Recording) -> dict[int, tuple[ThreadTick, float]]:
    """Per thread over the whole run: its last tick and the CPU seconds it used, the growth
    between the first and last tick it was seen in (one first seen after the first tick
    started within the run: all it used counts)."""
    first = rec.ticks[0]
    seen_first: dict[int, ThreadTick] = {}
    seen_last: dict[int, ThreadTick] = {}
    for tk in rec.ticks:
        for tid, th in tk.threads.items():
            if tid not in seen_first or seen_first[tid].pid != th.pid:
                seen_first[tid] = th
            seen_last[tid] = th
    out = {}
    for tid, th in seen_last.items():
        start = seen_first[tid]
        base = start.ticks if tid in first.threads and first.threads[tid].pid == th.pid else 0
        out[tid] = (th, max(0, th.ticks - base) / rec.hz)
    return out


def _thread_use(rec: Recording, lives: dict[int, tuple[ThreadTick, float]],
                thread_peak: dict[int, float], dur: float
                ) -> tuple[dict[str, float], tuple[ThreadUse, ...]]:
    """(each group's CPU seconds, the threads that used most CPU)."""
    group_cpu = dict.fromkeys(GROUPS, 0.0)
    used_by: list[tuple[float, ThreadTick]] = []
    for th, used in lives.values():
        group_cpu[rec.groups.get(th.pid, "other")] += used
        if used > 0:
            used_by.append((used, th))
    used_by.sort(key=lambda x: -x[0])
    threads = tuple(ThreadUse(
        group=rec.groups.get(th.pid, "other"),
        program=rec.programs.get(th.pid, "?"),
        thread=th.name, pid=th.pid, tid=th.tid,
        cpu_s=round(used, 3),
        core_share=round(used / dur, 4),
        peak_core_share=round(thread_peak.get(th.tid, used / dur), 4),
    ) for used, th in used_by[:TOP_THREADS])
    return group_cpu, threads


def _disks(first: Tick, last: Tick, dur: float) -> dict[str, Disk]:
    disks: dict[str, Disk] = {}
    for dev, b in last.disks.items():
        a = first.disks.get(dev)
        if a is None:
            continue
        reads, rsec, writes, wsec, busy_ms = (y - x for x, y in zip(a, b, strict=True))
        if reads or writes:
            disks[dev] = Disk(reads=reads, writes=writes, read_bytes=rsec * 512,
                              write_bytes=wsec * 512,
                              busy_share=round(min(1.0, busy_ms / 1000 / dur), 4))
    return disks


def _links(first: Tick, last: Tick) -> dict[str, Link]:
    links: dict[str, Link] = {}
    for name, b in last.links.items():
        a = first.links.get(name)
        if a is None:
            continue
        rxb, rxp, txb, txp = (y - x for x, y in zip(a, b, strict=True))
        if rxp or txp:
            links[name] = Link(rx_bytes=rxb, rx_packets=rxp, tx_bytes=txb, tx_packets=txp)
    return links


def _programs(rec: Recording, lives: dict[int, tuple[ThreadTick, float]]
              ) -> dict[str, dict[str, dict[str, float]]]:
    """Per program of the environment's and the load generator's groups: CPU and the largest
    resident memory any one of its processes had (QEMU, the Sentry, the Gofer, a shim, ...)."""
    programs: dict[str, dict[str, dict[str, float]]] = {}
    for th, used in lives.values():
        group = rec.groups.get(th.pid, "other")
        if group not in ("inside", "machinery", "loadgen"):
            continue
        entry = programs.setdefault(group, {}).setdefault(
            rec.programs.get(th.pid, "?"), {"cpu_s": 0.0, "rss_max_bytes": 0})
        entry["cpu_s"] = round(entry["cpu_s"] + used, 4)
    for tk in rec.ticks:
        for pid, resident in tk.proc_rss.items():
            found = programs.get(rec.groups.get(pid, "other"), {}).get(
                rec.programs.get(pid, "?"))
            if found is not None:
                found["rss_max_bytes"] = max(found["rss_max_bytes"], float(resident))
    return programs


# -- recordings as JSON (tests keep real ones in tests/data/telemetry) ------------------------
def recording_to_json(rec: Recording) -> dict[str, Any]:
    return {
        "interval_s": rec.interval_s, "hz": rec.hz,
        "groups": {str(k): v for k, v in rec.groups.items()},
        "programs": {str(k): v for k, v in rec.programs.items()},
        "ticks": [{
            "t": t.t, "cpus": t.stat.cpus, "ctxt": t.stat.ctxt, "intr": t.stat.intr,
            "disks": t.disks, "links": t.links, "rss": t.rss,
            "proc_rss": {str(k): v for k, v in t.proc_rss.items()},
            "threads": [[th.pid, th.tid, th.name, th.ticks] for th in t.threads.values()],
        } for t in rec.ticks],
    }


def recording_from_json(d: Mapping[str, Any]) -> Recording:
    rec = Recording(float(d["interval_s"]), float(d["hz"]))
    rec.groups = {int(k): v for k, v in d["groups"].items()}
    rec.programs = {int(k): v for k, v in d["programs"].items()}
    for t in d["ticks"]:
        rec.ticks.append(Tick(
            float(t["t"]),
            StatReading({k: tuple(v) for k, v in t["cpus"].items()}, int(t["ctxt"]),
                        int(t["intr"])),
            {k: tuple(v) for k, v in t["disks"].items()},  # type: ignore[misc]
            {k: tuple(v) for k, v in t["links"].items()},  # type: ignore[misc]
            {int(x[1]): ThreadTick(int(x[0]), int(x[1]), str(x[2]), int(x[3]))
             for x in t["threads"]},
            dict(t["rss"]),
            {int(k): int(v) for k, v in t.get("proc_rss", {}).items()}))
    return rec
