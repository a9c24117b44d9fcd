"""CSV: one line per workload x parameters x metric x environment. Each parameter has its own
column (param_<name>, as in the long export, isotax.analysis.long_format) after `params`, the
packed "k=v,k=v" form kept for readers that group by it."""

from __future__ import annotations

import csv
import io

from isotax.analysis.long_format import PARAM_PREFIX, param_columns
from isotax.analysis.report_data import ReportData
from isotax.report.table import result_rows

COLUMNS = ("run_id", "workload", "params", "metric", "unit", "higher_is_better", "environment",
           "emulated", "n", "mean", "sd", "ci_low", "ci_high", "ratio", "ratio_ci_low",
           "ratio_ci_high", "delta_pct", "verdict")


def render(d: ReportData) -> str:
    rows = result_rows(d)
    points = [d.point_params.get((r["workload"], r["params"]), {}) for r in rows]
    params = param_columns(points)
    at = COLUMNS.index("params") + 1
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=(*COLUMNS[:at], *params, *COLUMNS[at:]),
                       extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r, p in zip(rows, points, strict=True):
        w.writerow({"run_id": d.run.id, **r, **{PARAM_PREFIX + k: v for k, v in p.items()}})
    return buf.getvalue()
