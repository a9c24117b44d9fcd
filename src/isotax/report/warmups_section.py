"""The warm-ups section: whether each warm-up run differed from the measured runs of its
point (isotax.analysis.warmups decides). Blocks, rendered by the Markdown and HTML reports
alike; results.json carries the same rows."""

from __future__ import annotations

from typing import Any

from isotax.analysis.report_data import ReportData
from isotax.analysis.warmups import SDS
from isotax.report.table import Block, Grid, Heading, Text


def blocks(d: ReportData) -> list[Block]:
    if not d.warmups:
        return []
    differed = [w for w in d.warmups if w.differed]
    per = ("each environment x workload's first point" if d.plan.warmup_points == "workload"
           else "every point")
    words = (f"{len(differed)} of {len(d.warmups)} warm-ups differed from their measured runs "
             f"(outside their range and more than {SDS:g} standard deviations from their mean)"
             + (": " + "; ".join(f"{w.environment} {w.workload} {w.ratio:.2f}× the measured "
                                  "mean" for w in differed[:5]) if differed else "")
             + ".")
    return [Heading(2, "Warm-ups"),
            Text(f"Warm-ups ran {per} before the measured rounds and are excluded from every "
                 f"result. {words} Where none differ the plan could do without them; where "
                 "many do, one may not be enough."),
            Grid(["environment", "workload", "sweep", "metric", "warm-up", "measured mean ± sd",
                  "warm-up / measured", "differed"],
                 [[w.environment, w.workload, d.sweep_label.get((w.workload, w.params_key), ""),
                   w.metric, f"{w.warmup:.4g}", f"{w.mean:.4g} ± {w.sd:.2g} (n={w.n})",
                   f"{w.ratio:.3f}", "**yes**" if w.differed else "no"]
                  for w in d.warmups])]


def json_value(d: ReportData) -> list[dict[str, Any]]:
    return [{"environment": w.environment, "workload": w.workload, "params": w.params_key,
             "metric": w.metric, "warmup": w.warmup, "mean": w.mean, "sd": w.sd, "n": w.n,
             "ratio": w.ratio, "differed": w.differed} for w in d.warmups]
