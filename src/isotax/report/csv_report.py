"""CSV: one line per workload x parameters x metric x environment."""

from __future__ import annotations

import csv
import io

from isotax.analysis.report_data import ReportData
from isotax.report.table import result_rows

COLUMNS = ("run_id", "workload", "params", "metric", "unit", "higher_is_better", "environment",
           "emulated", "n", "mean", "sd", "ci_low", "ci_high", "ratio", "ratio_ci_low",
           "ratio_ci_high", "delta_pct", "verdict")


def render(d: ReportData) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in result_rows(d):
        w.writerow({"run_id": d.run.id, **r})
    return buf.getvalue()
