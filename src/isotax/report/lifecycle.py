"""The startup and density sections of the reports: one row per environment, so the phases of
a start (and what an idle instance costs) read across like the studies' claims ("containers
start in under a second, VMs in 11 s"). Values are the means over repetitions of each cell's
own median and p95; Table 1 has the same numbers with their deviations. Blocks, rendered by
the Markdown and HTML reports alike. Which workloads get which section is their own word:
the `phases` and `footprint` of their FigureHints (isotax.protocols)."""

from __future__ import annotations

import math
from collections.abc import Callable

from isotax.analysis.report_data import ReportData, Row
from isotax.protocols import figure_hints
from isotax.report.table import Block, Grid, Heading, Text


def _points(d: ReportData, workload: str) -> list[str]:
    keys: list[str] = []
    for r in d.rows:
        if r.workload == workload and r.params_key not in keys:
            keys.append(r.params_key)
    return keys


def _mean(d: ReportData, workload: str, key: str, metric: str, env: str) -> float | None:
    row = next((r for r in d.rows if (r.workload, r.params_key, r.metric) ==
                (workload, key, metric)), None)
    cell = d.cells.get((row, env)) if isinstance(row, Row) else None
    return cell.summary.mean if cell is not None else None


def _ms(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    if x >= 1000:
        return f"{x / 1000:.2f} s"
    return f"{x:.3g} ms"


def _tables(d: ReportData, title: str, note: str, header: Callable[[str], list[str]],
            line: Callable[[str, str, str], list[str]]) -> list[Block]:
    """One table a point for each workload whose header(workload) names columns: a heading
    with the point's sweep label, the note, then a row per environment (line(workload, key,
    env))."""
    out: list[Block] = []
    for workload, key in [(wl, key) for wl in d.workloads() if header(wl)
                          for key in _points(d, wl)]:
        sweep = d.sweep_label.get((workload, key), "")
        out += [Heading(3, title + (f" ({sweep})" if sweep else "")), Text(note),
                Grid(["environment", *header(workload)],
                     [[d.label(env), *line(workload, key, env)] for env in d.columns])]
    return out


def startup_blocks(d: ReportData) -> list[Block]:
    """A table of the phases of a start per point of each workload that reports them."""
    measured = {wl: _measured(d, wl) for wl in d.workloads()}

    def phases(workload: str, key: str, env: str) -> list[str]:
        out = []
        hints = figure_hints(workload)
        for phase in measured[workload]:
            med = _mean(d, workload, key, f"{phase}_ms", env)
            tail = _mean(d, workload, key, f"{phase}_{hints.tail}_ms", env)
            out.append(f"{_ms(med)} ({_ms(tail)})" if med is not None else "—")
        return out

    return _tables(d, "Startup phases",
                   "Median (the tail percentile the workload reports: p95 for startup, p99 "
                   "for pod_startup) from the request; `ready` is the plan's readiness probe "
                   "(a pod's: its Ready condition). `first_instruction` can precede `started`: "
                   "a runtime reports the container running only after its first process ran.",
                   lambda wl: measured[wl], phases)


def _measured(d: ReportData, workload: str) -> list[str]:
    """The workload's hinted phases that some environment of the run reported."""
    return [p for p in figure_hints(workload).phases
            if any(r.workload == workload and r.metric == f"{p}_ms" for r in d.rows)]


def density_blocks(d: ReportData) -> list[Block]:
    """A table of the memory footprint per point of each workload that measures it."""
    def footprint(workload: str, key: str, env: str) -> list[str]:
        values = [_mean(d, workload, key, metric, env)
                  for metric, _ in figure_hints(workload).footprint]
        return ["—" if v is None else f"{v:.3g}" for v in values]

    return _tables(d, "Memory footprint and density",
                   "Host memory per idle instance: the PSS of its host processes plus its "
                   "cgroup's kernel memory (isotax.telemetry.footprint).",
                   lambda wl: [title for _, title in figure_hints(wl).footprint], footprint)
