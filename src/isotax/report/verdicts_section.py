"""The section that gives every result its three answers side by side: is the
difference real (the headline metric's ratio with its verdict and the confidence sequence
the verdict came from; without a verdict, its bootstrap interval, so named), what
did a unit of work cost in CPU (in the environment, and hidden on the host), and what limited
it (the suspected limiter, with the evidence the rule saw). Blocks, rendered by the Markdown
and HTML reports alike."""

from __future__ import annotations

from isotax.analysis.cost import scale_for
from isotax.analysis.report_data import ReportData
from isotax.analysis.stats import Ratio
from isotax.analysis.verdicts import RatioVerdict
from isotax.report.decisions import BOOTSTRAP, verdict_of
from isotax.report.table import (
    Block,
    Details,
    Gap,
    Grid,
    Heading,
    Items,
    Text,
)


def verdict_words(r: Ratio | None, is_baseline: bool, v: RatioVerdict | None = None) -> str:
    """The headline ratio as the report says it: with its verdict v, the verdict and the
    confidence sequence it came from ("0.744: undecided (the verdict's 95% confidence
    sequence [0.52, 1.06])"); without one (an A/A copy not judged), its bootstrap interval,
    so named, or within noise. Never a bootstrap interval unnamed beside a verdict: it is
    narrower, and it decides nothing."""
    if is_baseline:
        return "baseline"
    if r is None:
        return "no ratio"
    if v is not None:
        mark = "≈ " if r.within_noise else ""
        return f"{mark}{r.ratio:.3f}: {v.words()} (the verdict's 95% confidence sequence " \
               f"{v.interval()})"
    if r.within_noise is None:
        return f"{r.ratio:.3f} (too few runs for an interval)"
    head = f"{r.ratio:.3f}, {BOOTSTRAP} [{r.ci_low:.3f}, {r.ci_high:.3f}]"
    return f"≈ within noise ({head})" if r.within_noise else f"{head}: {r.verdict}"


def blocks(d: ReportData) -> list[Block]:
    if not d.explained:
        return []
    points = d.in_row_order((wl, pk) for _, wl, pk in d.explained)
    headline = {(r.workload, r.params_key): r for r in d.headline_rows()}
    out: list[Block] = [
        Heading(2, "Every result: is it real, what it cost, what limited it"),
        Text("Per workload point and environment: the headline metric's ratio to the baseline "
             "with its verdict and the 95% confidence sequence the verdict came from (≈ "
             "equivalent; a ratio without a verdict with its 95% bootstrap interval, ≈ within "
             "noise where that holds 1 or the A/A noise floor covers it); the CPU one unit of "
             "work cost, split into the work the "
             "environment accounted itself (its cgroup, or the guest's own /proc/stat) and the "
             "hidden work the host did for it (host-wide busy time less that, the load "
             "generator, isotax and other processes: QEMU's emulation, gVisor's Sentry and "
             "Gofer, shims, the kernel's softirq); the load generator's CPU per unit beside it; "
             "and the suspected limiter from the telemetry sampled during the runs (rules in "
             "isotax.analysis.limiter), with its evidence below."),
        Gap()]
    for wl, pk in points:
        row = headline.get((wl, pk))
        envs = [e for e in d.columns if (e, wl, pk) in d.explained]
        costs = [d.explained[(e, wl, pk)].cost for e in envs]
        factor, unit = scale_for([c.total for c in costs if c is not None])
        base = d.explained.get((d.baseline, wl, pk))
        base_total = base.cost.total if base is not None and base.cost is not None else None
        label = d.sweep_label.get((wl, pk), "")
        what = f"{wl} {label}".strip()
        per = next((c.unit for c in costs if c is not None), "run")
        metric = f"{row.metric} ({row.unit})" if row else "-"
        out += [Heading(3, what), Text(f"Headline: {metric}; cost in {unit} per {per}.")]
        lines = []
        for e in envs:
            ex = d.explained[(e, wl, pk)]
            cell = d.cells.get((row, e)) if row else None
            c = ex.cost
            if c is None:
                cost_cells = ["-"] * 4
            else:
                rel = f" ({c.total / base_total:.2f}×)" if base_total and e != d.baseline \
                    else ""
                cost_cells = [f"{c.inside / factor:.3g}", f"{c.hidden / factor:.3g}",
                              f"{c.total / factor:.3g}{rel}",
                              "-" if c.loadgen is None else f"{c.loadgen / factor:.3g}"]
            lines.append([d.label(e), verdict_words(cell.ratio if cell else None,
                                                    e == d.baseline,
                                                    verdict_of(d, row, e) if row else None),
                          *cost_cells, ex.limiter.words])
        out.append(Grid(["environment", "headline ratio", "in env", "hidden on host",
                         "total", "load generator", "suspected limiter"], lines))
        evidence = []
        for e in envs:
            ex = d.explained[(e, wl, pk)]
            facts = "; ".join(ex.limiter.evidence) or "no telemetry facts"
            evidence.append(f"**{d.label(e)}** ({ex.repetitions} watched runs): {facts}")
        out.append(Details("Evidence", (Items(evidence),)))
    return out
