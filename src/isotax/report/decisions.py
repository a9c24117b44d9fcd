"""The verdicts: how many headline ratios are decided (the line on the report's first screen
and under the terminal's summary), and the section listing every headline ratio's verdict,
its confidence sequence, margin, pairs and, for an undecided one, why. Blocks, rendered by
the Markdown and HTML reports alike; the arithmetic is isotax.analysis.verdicts' and
.sequential's."""

from __future__ import annotations

from typing import Any

from isotax.analysis.report_data import ReportData
from isotax.analysis.sequential import ratio_fields, why_undecided
from isotax.report.table import Block, Grid, Heading, Text


def counts_line(d: ReportData) -> str:
    """'Verdicts: 40 of 64 headline ratios decided (12 worse, 28 equivalent); 24 undecided.'"""
    p = d.sequential
    if p is None or not p.ratios:
        return ""
    c = p.counts()
    parts = [f"{c[k]} {k}" for k in ("worse", "better", "equivalent") if c[k]]
    decided = f" ({', '.join(parts)})" if parts else ""
    return (f"Verdicts: {p.decided} of {len(p.ratios)} headline ratios to {d.baseline} "
            f"decided{decided}; {c['undecided']} undecided.")


def _meta(d: ReportData) -> dict[str, Any]:
    meta = d.run_meta.get("sequential")
    return meta if isinstance(meta, dict) else {}


def _rounds(d: ReportData, meta: dict[str, Any]) -> tuple[int, int]:
    """(fixed rounds, max repetitions): how a ratio's reason for being undecided reads."""
    fixed = int(d.plan.get("repetitions", 3))
    return fixed, int(meta.get("max_repetitions") or fixed)


def blocks(d: ReportData) -> list[Block]:
    p = d.sequential
    if p is None or not p.ratios:
        return []
    meta = _meta(d)
    fixed, cap = _rounds(d, meta)
    ended = meta.get("ended")
    out: list[Block] = [
        Heading(2, "Verdicts"),
        Text(f"{counts_line(d)} Each environment's headline value is paired with "
             f"{d.baseline}'s of the same round; the interval is a 95% confidence sequence "
             "on the ratio of their geometric means (Lai's t confidence sequence), valid "
             "however many rounds were looked at before stopping. *Worse* or *better*: the "
             "whole interval is beyond the equivalence margin; *equivalent*: it is inside "
             "±margin; *undecided*: neither yet (docs/statistics.md).")]
    if cap > fixed:
        how = ("**Not finished**: the run stopped during the added rounds; `isotax run "
               f"--resume {d.run.id}` goes on from what is stored." if ended is None and meta
               else f"Added rounds ended: {ended or 'not run'}.")
        out.append(Text(f"After the {fixed} fixed rounds, rounds were added for the undecided "
                        f"ratios, up to {cap} runs a point. {how} "
                        f"{meta.get('rounds', 0)} round(s), {meta.get('added_cells', 0)} "
                        f"cell(s) in {float(meta.get('spent_s', 0)):.0f} s."))
    rows = []
    order = {"worse": 0, "better": 1, "equivalent": 2, "undecided": 3}
    for r in sorted(p.ratios, key=lambda r: (order[r.verdict.verdict.value], r.workload,
                                             r.params_key, r.environment)):
        v = r.verdict
        rows.append([r.environment, r.workload,
                     d.sweep_label.get((r.workload, r.params_key), r.params_key), r.metric,
                     v.words(), f"{v.ratio:.3g} {v.interval()}",
                     f"±{v.margin:.1%} ({r.margin_source})", str(v.n),
                     why_undecided(r, ended, cap, fixed)])
    out.append(Grid(["environment", "workload", "sweep", "metric", "verdict",
                     "ratio [95% sequence]", "margin", "pairs", "why undecided"], rows))
    return out


def verdicts_value(d: ReportData) -> dict[str, Any] | None:
    """results.json's "verdicts": the counts and every headline ratio's verdict."""
    p = d.sequential
    if p is None:
        return None
    meta = _meta(d)
    fixed, cap = _rounds(d, meta)
    return {
        "decided": p.decided, "total": len(p.ratios), "counts": p.counts(),
        "method": "round-paired log ratios, Lai's t confidence sequence (95%)",
        "ratios": [ratio_fields(r, meta.get("ended"), cap, fixed) for r in p.ratios],
    }

