"""The claims' verdicts as text lines (the terminal, `isotax claims`) and as CSV: one row per
claim and environment, with the source, the claim, the source's own figure, this host's value
and interval, and the verdict in words."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from isotax.analysis.claim_verdicts import ClaimVerdict, counts

CSV_COLUMNS = ("id", "study", "year", "where", "finding", "source_figure", "relation",
               "environment", "baseline", "workload", "point", "metric", "unit", "value",
               "low", "high", "pairs", "outcome", "why", "more_pairs", "gate", "conditions",
               "url", "file")


def summary(verdicts: Sequence[ClaimVerdict]) -> str:
    """'31 claims: 6 hold, 2 do not hold, 9 undecided, 14 not measurable here'."""
    c = counts(verdicts)
    claims = len({v.placed.id for v in verdicts})
    holds, fails = c["holds"], c["does not hold"]
    return (f"{claims} claims, {len(verdicts)} verdicts: {holds} "
            f"{'holds' if holds == 1 else 'hold'}, {fails} "
            f"{'does' if fails == 1 else 'do'} not hold, {c['undecided']} undecided, "
            f"{c['not measurable here']} not measurable here")


def claims_lines(verdicts: Sequence[ClaimVerdict], run_id: str) -> list[str]:
    """One block per verdict: the claim and its source, then the verdict and its evidence."""
    out = [f"claims judged on run {run_id}"]
    for v in verdicts:
        c, s = v.placed.claim, v.placed.source
        study = f"{s.study}{f' {s.year}' if s and s.year else ''}" if s else v.placed.file
        where = ", ".join(x for x in (v.point, v.metric) if x)
        on = (f" [{v.environment}{' vs ' + v.baseline if v.baseline else ''}"
              f"{': ' + where if where else ''}]") if v.environment else ""
        out.append(f"{v.outcome.value.upper():>20}  {c.id}{on}: {c.finding}")
        figure = f"; the source: {c.source_figure}" if c.source_figure else ""
        out.append(f"{'':>20}  {study}, {c.where or '-'}{figure}; claim: {v.relation}")
        out.append(f"{'':>20}  {v.why}")
    out.append(summary(verdicts))
    return out


def claims_csv(verdicts: Sequence[ClaimVerdict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for v in verdicts:
        row = v.to_json()
        w.writerow({k: "" if row.get(k) is None else row[k] for k in CSV_COLUMNS})
    return buf.getvalue()
