"""sysbench 1.0 OLTP output -> transactions/s, queries/s, errors and latency (ms). Pure.

sysbench 1.0.20 prints a plain-text report (it has no machine-readable format):

    SQL statistics:
        queries performed: read / write / other / total
        transactions:   4738   (947.20 per sec.)
        queries:        94760  (18944.07 per sec.)
        ignored errors: 0      (0.00 per sec.)
        reconnects:     0      (0.00 per sec.)
    General statistics: total time, total number of events
    Latency (ms): min, avg, max, "95th percentile", sum

It computes one percentile only (`--percentile=N`). With `--histogram` it also prints its
latency histogram: 1024 logarithmic buckets from 1 µs to 100 s, each printed as the bucket's
value in ms (3 decimals) and its count. sysbench's own percentile is read off that histogram
(sb_histogram.c: the first bucket whose running count reaches floor(N * p / 100 + 0.5)), so
`histogram_percentile` gives any other percentile by the same rule -- p95 from a run asked
for p99 -- and the parser checks it against the one sysbench printed.

Anything sysbench reports as FATAL (refused or lost connection, access denied, missing
tables) is a SanityError with sysbench's own words; so is a report without SQL statistics.
Ignored errors (deadlocks, lock wait timeouts: --mysql-ignore-errors) are counted, not
judged here: how many a point may have is the workload's decision.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from isotax.model import SanityError


@dataclass(frozen=True)
class SysbenchResult:
    threads: int
    reads: int
    writes: int
    other: int
    transactions: int
    tps: float
    queries: int
    qps: float
    ignored_errors: int
    errors_per_s: float
    reconnects: int
    reconnects_per_s: float
    total_time_s: float
    events: int
    lat_min_ms: float
    lat_avg_ms: float
    lat_max_ms: float
    percentile: float  # the percentile sysbench computed (--percentile)
    lat_percentile_ms: float
    # (bucket value in ms, count), ascending; empty without --histogram.
    histogram: tuple[tuple[float, int], ...] = ()

    def latency_percentile(self, p: float) -> float:
        """Latency percentile p in ms, by sysbench's own rule: from the histogram, or the one
        sysbench printed; ValueError when neither can give it."""
        if self.histogram:
            return histogram_percentile(self.histogram, p)
        if p == self.percentile:
            return self.lat_percentile_ms
        raise ValueError(f"sysbench printed only its {self.percentile:g}th percentile and no "
                         f"histogram: run it with --histogram for the {p:g}th")


_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_FIELDS = {
    "threads": rf"^Number of threads:\s+{_NUM}",
    "reads": rf"^\s+read:\s+{_NUM}",
    "writes": rf"^\s+write:\s+{_NUM}",
    "other": rf"^\s+other:\s+{_NUM}",
    "transactions": rf"^\s+transactions:\s+{_NUM}\s+\(\s*{_NUM} per sec\.\)",
    "queries": rf"^\s+queries:\s+{_NUM}\s+\(\s*{_NUM} per sec\.\)",
    "ignored_errors": rf"^\s+ignored errors:\s+{_NUM}\s+\(\s*{_NUM} per sec\.\)",
    "reconnects": rf"^\s+reconnects:\s+{_NUM}\s+\(\s*{_NUM} per sec\.\)",
    "total_time_s": rf"^\s+total time:\s+{_NUM}s",
    "events": rf"^\s+total number of events:\s+{_NUM}",
    "min": rf"^\s+min:\s+{_NUM}",
    "avg": rf"^\s+avg:\s+{_NUM}",
    "max": rf"^\s+max:\s+{_NUM}",
    "percentile": rf"^\s+{_NUM}(?:st|nd|rd|th) percentile:\s+{_NUM}",
}
_BUCKET = re.compile(r"^\s*([0-9]+\.[0-9]+) \|\**\s+([0-9]+)$", re.MULTILINE)
_FATAL = re.compile(r"^FATAL: (.*)$", re.MULTILINE)


def _fatal(text: str) -> str | None:
    """sysbench's most telling FATAL line: the one with the server's error, else the first."""
    lines = [m.group(1).strip() for m in _FATAL.finditer(text)]
    if not lines:
        return None
    for ln in lines:
        if re.search(r"error \d+|errno = \d+|MySQL error", ln):
            return ln
    return lines[0]


def parse_sysbench(text: str) -> SysbenchResult:
    """One `sysbench oltp_* run` report; SanityError on a FATAL line or a missing field."""
    fatal = _fatal(text)
    if fatal is not None:
        raise SanityError(f"sysbench: {fatal[:200]}")
    if "SQL statistics:" not in text:
        raise SanityError(f"sysbench printed no SQL statistics (did the run start?): "
                          f"{text.strip()[-200:]!r}")
    found: dict[str, tuple[float, ...]] = {}
    for key, pattern in _FIELDS.items():
        m = re.search(pattern, text, re.MULTILINE)
        if m is None:
            raise SanityError(f"sysbench: no {key.replace('_', ' ')} in the report (is it "
                              "sysbench 1.0 oltp_* output?)")
        found[key] = tuple(float(g) for g in m.groups())
    histogram = tuple((float(v), int(c)) for v, c in _BUCKET.findall(text))
    r = SysbenchResult(
        threads=int(found["threads"][0]),
        reads=int(found["reads"][0]), writes=int(found["writes"][0]),
        other=int(found["other"][0]),
        transactions=int(found["transactions"][0]), tps=found["transactions"][1],
        queries=int(found["queries"][0]), qps=found["queries"][1],
        ignored_errors=int(found["ignored_errors"][0]),
        errors_per_s=found["ignored_errors"][1],
        reconnects=int(found["reconnects"][0]), reconnects_per_s=found["reconnects"][1],
        total_time_s=found["total_time_s"][0], events=int(found["events"][0]),
        lat_min_ms=found["min"][0], lat_avg_ms=found["avg"][0], lat_max_ms=found["max"][0],
        percentile=found["percentile"][0], lat_percentile_ms=found["percentile"][1],
        histogram=histogram)
    if r.transactions <= 0 or r.tps <= 0:
        raise SanityError(f"sysbench completed no transactions in {r.total_time_s:g} s")
    if histogram:
        counted = sum(c for _, c in histogram)
        if counted != r.events:
            raise SanityError(f"sysbench's histogram counts {counted} events, its report "
                              f"{r.events}: a truncated or mixed-up output")
        # The histogram must give back the percentile sysbench printed (2 decimals there,
        # 3 in the histogram): otherwise this parser and sysbench disagree on the rule.
        mine = histogram_percentile(histogram, r.percentile)
        if abs(mine - r.lat_percentile_ms) > 0.006 + 1e-3 * mine:
            raise SanityError(f"sysbench's {r.percentile:g}th percentile is "
                              f"{r.lat_percentile_ms} ms, its histogram gives {mine} ms")
    return r


def histogram_percentile(histogram: tuple[tuple[float, int], ...], p: float) -> float:
    """Percentile p (0-100] of a sysbench histogram, by sysbench's rule: the value of the first
    bucket where the running count reaches floor(N * p / 100 + 0.5). Pure."""
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p!r}: use a number in (0, 100]")
    total = sum(c for _, c in histogram)
    if total <= 0:
        raise ValueError("an empty histogram has no percentiles")
    need = math.floor(total * p / 100 + 0.5)
    running = 0
    for value, count in histogram:
        running += count
        if running >= need:
            return value
    return histogram[-1][0]


def parse_sysbench_version(text: str) -> str:
    """'sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)' -> '1.0.20'."""
    m = re.search(r"^sysbench\s+([0-9][^\s]*)", text, re.MULTILINE)
    if not m:
        raise ValueError(f"no sysbench version in {text.strip()[:80]!r}")
    return m.group(1)


def parse_mariadbd_version(text: str) -> str:
    """'mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu ...' ->
    '10.11.19-MariaDB-0+deb12u1'."""
    m = re.search(r"\bVer\s+(\S+)", text)
    if not m:
        raise ValueError(f"no mariadbd version in {text.strip()[:80]!r}")
    return m.group(1)
