"""Where a run's wall time went, by phase: the arithmetic behind the report's "Where the time
went" and benchmarks/time_to_verdict.py. Pure: it reads what the runner stored in
run_meta["phases"] (isotax.run.clock) and, once the report is written, its "report_s":

    {"wall_s": 512.3, "seconds": {"workload": 401.2, "warmup": 30.1, ...}, "report_s": 6.0}

The workloads running are the measured runs, the warm-ups and their preparation; everything else
(environments, telemetry, store writes, the load generator, setup, the gaps between cells and
writing the report) is isotax's own overhead, held against OVERHEAD_TARGET. A run recorded before
isotax measured this has no such meta, and a malformed one reads as none: breakdown() is then
None, never an exception.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# isotax's goal: at most 5% of a run's wall time outside the workloads (starting and stopping
# environments, telemetry, store writes, the load generator, setup, gaps, the report), so that
# nearly all the time a run takes goes to measuring.
OVERHEAD_TARGET = 0.05

# Every phase in display order, with what it is and whether it is the workloads running.
# "report" is writing the report (run_meta["phases"]["report_s"], when present).
PHASES: tuple[tuple[str, str, bool], ...] = (
    ("workload", "measured workload runs inside the cells (what isotax measures)", True),
    ("warmup", "warm-up cells, run and not counted", True),
    ("prepare", "workload preparation per instance (datasets, servers)", True),
    ("environments", "starting, stopping, pausing, resuming and restarting environments", False),
    ("telemetry", "telemetry started and stopped around the measured runs", False),
    ("store", "store writes (cell commits, run meta)", False),
    ("loadgen", "opening and closing the load generator", False),
    ("setup", "host fingerprint, image check: everything before the first environment starts",
     False),
    ("other", "the rest of the wall time (gaps between cells, scheduling)", False),
    ("report", "writing the report", False),
)
WORKLOAD_PHASES = tuple(name for name, _, running in PHASES if running)
STORED_PHASES = tuple(name for name, _, _ in PHASES if name != "report")  # in "seconds"


@dataclass(frozen=True)
class PhaseRow:
    name: str
    seconds: float
    share: float  # of the whole: wall_s, plus report_s when present
    description: str
    workload: bool  # the workloads running (workload, warmup, prepare), not overhead


@dataclass(frozen=True)
class Breakdown:
    wall_s: float  # the run from its start to its end, the report not included
    report_s: float | None  # writing the report, once measured
    rows: tuple[PhaseRow, ...]  # PHASES' order; "report" only with report_s
    workload_share: float  # workload + warmup + prepare, of total_s
    overhead_s: float  # everything else, the report included
    overhead_share: float

    @property
    def total_s(self) -> float:
        """What the shares are of: the run's wall time and writing its report."""
        return self.wall_s + (self.report_s or 0.0)

    @property
    def seconds(self) -> dict[str, float]:
        """The stored phases' seconds (every one, missing ones 0), the report's not among them."""
        return {r.name: r.seconds for r in self.rows if r.name != "report"}

    def within(self, target: float = OVERHEAD_TARGET) -> bool:
        return self.overhead_share <= target

    def largest_overhead(self) -> PhaseRow | None:
        """The largest phase outside the workloads (None when all of them are 0)."""
        rows = [r for r in self.rows if not r.workload and r.seconds > 0]
        return max(rows, key=lambda r: r.seconds) if rows else None


def _seconds(x: Any) -> float | None:
    """A finite, non-negative number of seconds, or None."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    x = float(x)
    return x if math.isfinite(x) and x >= 0 else None


def breakdown(meta: Mapping[str, Any] | None) -> Breakdown | None:
    """The breakdown of run_meta["phases"]; None for a run without it or with a malformed one."""
    if not isinstance(meta, Mapping):
        return None
    wall = _seconds(meta.get("wall_s"))
    given = meta.get("seconds")
    if not wall or not isinstance(given, Mapping):
        return None
    seconds: dict[str, float] = {}
    for name in STORED_PHASES:
        if given.get(name) is None:
            continue
        s = _seconds(given[name])
        if s is None:
            return None
        seconds[name] = s
    if "other" not in seconds:  # the rest of the wall time, by definition
        seconds["other"] = max(0.0, wall - sum(seconds.values()))
    report: float | None = None
    if meta.get("report_s") is not None:
        report = _seconds(meta["report_s"])
        if report is None:
            return None
        seconds["report"] = report
    total = wall + (report or 0.0)
    rows = tuple(PhaseRow(name, seconds.get(name, 0.0), seconds.get(name, 0.0) / total, words,
                          running)
                 for name, words, running in PHASES if name != "report" or report is not None)
    running = sum(r.seconds for r in rows if r.workload)
    overhead = sum(r.seconds for r in rows if not r.workload)
    return Breakdown(wall_s=wall, report_s=report, rows=rows, workload_share=running / total,
                     overhead_s=overhead, overhead_share=overhead / total)
