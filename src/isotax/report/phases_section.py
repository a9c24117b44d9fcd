"""The section "Where the time went": the run's wall time by phase (the workloads running, and
isotax's own overhead around them) against isotax's goal of at most 5% outside the workloads.
It renders what the runner stored in run_meta["phases"]; the arithmetic is
isotax.analysis.phases'. Blocks for the Markdown and HTML reports alike, and the results.json
value; a run recorded before isotax measured this has neither the section nor the value."""

from __future__ import annotations

from typing import Any

from isotax.analysis.phases import OVERHEAD_TARGET, Breakdown, breakdown
from isotax.analysis.report_data import ReportData
from isotax.report.table import Block, Grid, Heading, Text

TITLE = "Where the time went"


def of(d: ReportData) -> Breakdown | None:
    return breakdown(d.meta.raw.get("phases"))


def clock(seconds: float) -> str:
    """Seconds as m:ss, or h:mm:ss from an hour."""
    s = round(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def overhead_line(b: Breakdown) -> str:
    """Outside the workloads against the goal and, over it, its largest part."""
    line = (f"Outside the workloads: {b.overhead_s:.1f} s ({b.overhead_share:.1%} of the run's "
            f"wall time; isotax's goal is at most {OVERHEAD_TARGET:.0%}).")
    top = b.largest_overhead()
    if not b.within() and top is not None:
        line += (f" **Over the goal**: the largest part outside the workloads is {top.name} "
                 f"({top.seconds:.1f} s, {top.share:.1%}).")
    return line


def blocks(d: ReportData) -> list[Block]:
    b = of(d)
    if b is None:
        return []
    report = ("" if b.report_s is None else
              f", and {b.report_s:.1f} s writing the report")
    rows = [[r.name, f"{r.seconds:.1f}", f"{r.share:.1%}", r.description] for r in b.rows]
    rows.append(["total", f"{b.total_s:.1f}", "100%", ""])
    return [Heading(2, TITLE),
            Text(f"The run took {clock(b.wall_s)} ({b.wall_s:.1f} s) from its start to its "
                 f"end{report}. The workloads running (workload, warmup, prepare) took "
                 f"{b.workload_share:.1%} of that time; the rest is isotax's own work around "
                 "them."),
            Grid(["phase", "seconds", "share", "what"], rows),
            Text(overhead_line(b))]


def json_value(d: ReportData) -> dict[str, Any] | None:
    """results.json's "phases": null for a run without them."""
    b = of(d)
    if b is None:
        return None
    return {"wall_s": b.wall_s, "report_s": b.report_s, "seconds": b.seconds,
            "workload_share": b.workload_share, "overhead_share": b.overhead_share,
            "overhead_target": OVERHEAD_TARGET}
