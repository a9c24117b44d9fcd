"""Row-wise view of a ReportData shared by the CSV, JSON and Markdown renderers."""

from __future__ import annotations

import math
from typing import Any

from isotax.analysis import ReportData


def _num(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def result_rows(d: ReportData) -> list[dict[str, Any]]:
    """One dict per (workload, parameters, metric, environment) that has values."""
    out = []
    for row in d.rows:
        for env in d.columns:
            cell = d.cells.get((row, env))
            if cell is None:
                continue
            r = cell.ratio
            out.append({
                "workload": row.workload,
                "params": row.params_key,
                "metric": row.metric,
                "unit": row.unit,
                "higher_is_better": row.higher_is_better,
                "environment": env,
                "emulated": d.emulated(env),
                "n": cell.summary.n,
                "mean": cell.summary.mean,
                "sd": cell.summary.sd,
                "ci_low": _num(cell.summary.ci_low),
                "ci_high": _num(cell.summary.ci_high),
                "ratio": r.ratio if r else None,
                "ratio_ci_low": _num(r.ci_low) if r else None,
                "ratio_ci_high": _num(r.ci_high) if r else None,
                "delta_pct": r.delta_pct if r else None,
                "verdict": r.verdict if r else ("baseline" if env == d.baseline else None),
                "values": list(cell.values),
            })
    return out
