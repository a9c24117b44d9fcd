"""memaslap (Debian's `memcaslap`, libmemcached-tools) output -> requests/s and latency. Pure.

memaslap with `--stat_freq` equal to its `--time` prints, after its settings, one period's
tables (behind a terminal clear-screen sequence), then a block per operation type:

    Get Statistics (83915 events)
       Min:        13
       Max:      4573
       Avg:        21
       Geo:     16.84
       Std:     93.74
       Log2 Dist:
           4:    74578      753     8058      358
           8:       27       17       28       38

then its counters (`cmd_get: 83916`, `get_misses: 0`, ...) and one last line,
`Run time: 2.0s Ops: 93240 TPS: 46615 Net_rate: 9.4M/s`, whose TPS is the operations over
the measured time (not the rounded "Run time"). Latencies are in microseconds. The "Log2
Dist" row labelled k holds the counts of buckets k, k+1, ...; bucket i counts latencies in
[2^(i-1), 2^i) µs (its rows are consistent with the block's Min and Max only that way), so a
percentile is known to within a factor of 2: its bucket's upper bound is given, never an
interpolated figure. A run that could not reach its server prints its settings alone and exits
1: no "Run time" line is a SanityError, as is a rate of 0.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from isotax.model import SanityError

_BLOCK = re.compile(
    r"^(Get|Set|Total) Statistics \((\d+) events\)\s*\n"
    r"\s*Min:\s*(\S+)\s*\n\s*Max:\s*(\S+)\s*\n\s*Avg:\s*(\S+)\s*\n"
    r"\s*Geo:\s*(\S+)\s*\n\s*Std:\s*(\S+)\s*\n\s*Log2 Dist:\s*\n((?:\s*\d+:(?:[ \t]+\d+)+\s*\n?)*)",
    re.MULTILINE)
_FINAL = re.compile(r"^Run time: ([\d.]+)s Ops: (\d+) TPS: (\d+) Net_rate: ([\d.]+)M/s",
                    re.MULTILINE)
_COUNTER = re.compile(r"^(cmd_get|cmd_set|get_misses): (\d+)$", re.MULTILINE)


@dataclass(frozen=True)
class LatencyBlock:
    """One operation type's latencies, µs."""

    op: str  # "Get", "Set", "Total"
    events: int
    min_us: float
    max_us: float
    avg_us: float
    geo_us: float
    std_us: float
    log2_counts: tuple[tuple[int, int], ...]  # (bucket i: [2^(i-1), 2^i) µs, count)

    def percentile_bound_us(self, q: float) -> float:
        """The upper bound of the bucket that holds the q-quantile (0 < q < 1)."""
        total = sum(c for _, c in self.log2_counts)
        seen = 0
        for i, c in self.log2_counts:
            seen += c
            if seen >= q * total:
                return float(2 ** i)
        raise SanityError(f"memaslap: the {self.op} histogram is empty")


@dataclass(frozen=True)
class MemaslapRun:
    ops: int
    tps: float  # operations per second over the measured time
    run_time_s: float  # as printed, rounded to 0.1 s
    net_mib_s: float
    cmd_get: int
    cmd_set: int
    get_misses: int
    latency: dict[str, LatencyBlock]  # by op: "Get", "Set", "Total"


def _histogram(rows: str) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for line in rows.strip().splitlines():
        label, counts = line.split(":", 1)
        out += [(int(label) + k, int(c)) for k, c in enumerate(counts.split())]
    return tuple(out)


def parse_memaslap(text: str) -> MemaslapRun:
    """The run's totals and each operation type's latencies; SanityError without a result."""
    final = _FINAL.search(text)
    if not final:
        raise SanityError("memaslap printed no result (no 'Run time' line: could it reach the "
                          f"server?): {text.strip()[-200:]!r}")
    ops, tps = int(final.group(2)), float(final.group(3))
    if ops <= 0 or tps <= 0:
        raise SanityError(f"memaslap: {ops} operations at {tps:g}/s: nothing was measured")
    counters = {k: int(v) for k, v in _COUNTER.findall(text)}
    missing = {"cmd_get", "cmd_set", "get_misses"} - counters.keys()
    if missing:
        raise SanityError(f"memaslap printed no {', '.join(sorted(missing))}")
    latency: dict[str, LatencyBlock] = {}
    for m in _BLOCK.finditer(text):
        lo, hi, avg, geo, std = (float(v) for v in m.group(3, 4, 5, 6, 7))
        if not all(math.isfinite(v) and v >= 0 for v in (lo, hi, avg, geo, std)):
            raise SanityError(f"memaslap: a {m.group(1)} latency is not a number: "
                              f"{m.group(0).strip()[:200]!r}")
        latency[m.group(1)] = LatencyBlock(m.group(1), int(m.group(2)), lo, hi, avg, geo, std,
                                           _histogram(m.group(8)))
    if "Total" not in latency:
        raise SanityError("memaslap printed no latency statistics (run it with --stat_freq)")
    return MemaslapRun(ops, tps, float(final.group(1)), float(final.group(4)),
                       counters["cmd_get"], counters["cmd_set"], counters["get_misses"], latency)

