"""The verdicts: how many headline ratios are decided (the line on the report's first screen
and under the terminal's summary), and the section listing every headline ratio's verdict,
its confidence sequence, margin, pairs and, for an undecided one, why. Blocks, rendered by
the Markdown and HTML reports alike; the arithmetic is isotax.analysis.verdicts' and
.sequential's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from isotax.analysis import cell_length
from isotax.analysis.ebh import bar, ceiling, expected_false
from isotax.analysis.report_data import ReportData, Row
from isotax.analysis.sequential import TIME_SPENT, RatioState, ratio_fields, why_undecided
from isotax.analysis.verdicts import RatioVerdict, first_bounded_pairs
from isotax.report.table import Block, Grid, Heading, Text
from isotax.store.run_meta import SequentialMeta

# What a verdict's interval is, in the words every place that shows one beside a ratio uses:
# it is wider than the bootstrap interval of the ratio of means (Results), and only it decides.
SEQUENCE = "the 95% confidence sequence its verdict came from"
BOOTSTRAP = "95% bootstrap"


def counts_line(d: ReportData) -> str:
    """'Verdicts: 40 of 64 headline ratios decided (12 worse, 28 equivalent); 24 undecided.'
    The A/A canary's ratios are not questions the run asks: its own line says them."""
    p = d.sequential
    if p is None or not p.ratios:
        return ""
    asked = [r for r in p.ratios if r.environment != d.plan.aa_name]
    c = {k: sum(r.verdict.verdict.value == k for r in asked)
         for k in ("worse", "better", "equivalent", "undecided")}
    parts = [f"{c[k]} {k}" for k in ("worse", "better", "equivalent") if c[k]]
    decided = f" ({', '.join(parts)})" if parts else ""
    return (f"Verdicts: {len(asked) - c['undecided']} of {len(asked)} headline ratios to "
            f"{d.baseline} decided{decided}; {c['undecided']} undecided.")


def context_lines(d: ReportData) -> list[str]:
    """What the decided count means, for the first screen beside it: the A/A canary's
    verdicts, what this host can decide in the run's budget (analysis.reach, stored by the
    run), and how many false worse/better verdicts to expect across the ratios, with e-BH."""
    p = d.sequential
    if p is None or not p.ratios:
        return []
    out = []
    aa = d.plan.aa_name
    canary = [r for r in p.ratios if r.environment == aa]
    if canary:
        c = {v: sum(r.verdict.verdict.value == v for r in canary)
             for v in ("worse", "better", "equivalent", "undecided")}
        off = c["worse"] + c["better"]
        out.append(f"A/A canary ({aa}, {d.baseline} measured twice): {c['equivalent']} of "
                   f"{len(canary)} equivalent, {c['undecided']} undecided, "
                   + (f"{off} worse or better: the host or the method misbehaved in this "
                      "run (see Warnings)." if off else "none worse or better."))
    judged = [r for r in p.ratios if r.environment != aa]
    if line := history_line(judged):
        out.append(line)
    reach = d.meta.reach
    if reach is not None and reach.words:
        out.append(f"This host: {reach.words}.")
    if length := cell_length.words(d.meta.cell_runs):
        out.append(f"Cell length: {length}.")
    differ = sum(map(_apart, judged))
    if judged:
        kept = sum(r.environment != aa for r in d.ebh_kept)
        # The two guarantees, each with the set it is about: one ratio's verdict alone, and
        # the run's worse/better taken together (e-BH).
        out.append(f"Per ratio: each verdict holds at 95% on its own, so of {len(judged)} "
                   f"ratios up to {expected_false(len(judged)):.1f} false worse/better are "
                   f"expected. As one set: e-BH keeps {kept} of the {differ} worse/better, "
                   f"at most 5% of them false on average (the run's false discovery rate)"
                   + _capped_words(p.ratios, judged, d.ebh_kept, differ) + ".")
    return out


def _apart(r: RatioState) -> bool:
    """The ratio's verdict is worse or better (what e-BH is about)."""
    return r.verdict.verdict.value in ("worse", "better")


def _capped_words(ratios: Sequence[RatioState], judged: Sequence[RatioState],
                  kept: Sequence[RatioState], differ: int) -> str:
    """Why e-BH left out worse/better verdicts (of judged, `differ` of them) that no effect
    could have kept: decided on so few pairs that their e-value's ceiling is below e-BH's bar
    across all the run's ratios ("" when none was). Without it "keeps 0 of 23" reads as if a
    50-fold slowdown were in doubt."""
    asked = bar(len(ratios), max(sum(map(_apart, ratios)), 1))
    kept_ids = {id(r) for r in kept}
    capped = [r for r in judged if _apart(r) and id(r) not in kept_ids
              and ceiling(r.verdict.n, r.borrowed) < asked]
    if not capped:
        return ""
    most = max(r.verdict.n for r in capped)
    return (f"; {len(capped)} of the {differ} were decided on {most if most > 1 else 'one'} "
            f"pair{'s or fewer' if most > 1 else ''}, too few for any effect to give the "
            f"evidence e-BH asks across {len(ratios)} ratios (an e-value of {asked:.0f}); more "
            "fixed rounds (the plan's repetitions: added rounds go to undecided ratios) give "
            "them the pairs to be kept")


def history_line(judged: Sequence[RatioState]) -> str:
    """Whether the ratios stood on their own pairs or borrowed a spread from this host's
    stored runs: a first run on a host decides fewer, and says why and what comes next."""
    if not judged:
        return ""
    lent = [r for r in judged if r.borrowed.dof > 0]
    if not lent:
        first = max(first_bounded_pairs(r.borrowed.g) for r in judged)
        reached = sum(r.verdict.n >= first for r in judged)
        return ("No history: no stored run of this host lent these ratios a spread, so each "
                f"stood on its own pairs, and none could be decided with fewer than {first} "
                f"({reached} of {len(judged)} reached {first}); the next run of this plan "
                "here borrows this run's spreads where they still fit.")
    runs = sorted({run for r in lent for run in r.borrowed.runs}, reverse=True)
    if runs:  # run ids begin with their start time: newest first
        named = (f" ({len(runs)} of them, newest {', '.join(runs[:3])}"
                 f"{', ...' if len(runs) > 3 else ''})")
    else:  # a run stored before the runs were kept: its ratios' own words
        words = sorted({r.borrowed.source for r in lent if r.borrowed.source})
        named = f" ({'; '.join(words[:3])}{'; ...' if len(words) > 3 else ''})" if words else ""
    return (f"History: {len(lent)} of {len(judged)} ratios borrowed a spread from this host's "
            f"stored runs{named}; the others stood on their own pairs.")


def verdict_of(d: ReportData, row: Row, env: str) -> RatioVerdict | None:
    """The verdict of env's ratio on row (a headline metric), None where it has none (not a
    headline metric, an A/A copy not judged, a run without verdicts)."""
    return _verdicts(d).get((env, row.workload, row.params_key, row.metric))


def _verdicts(d: ReportData) -> dict[tuple[str, str, str, str], RatioVerdict]:
    p = d.sequential
    return {} if p is None else {k: r.verdict for k, r in p.by_key().items()}


def sequence_bounds(v: RatioVerdict) -> tuple[float, float]:
    """The verdict's confidence sequence on the ratio as (low, high); NaN for both while it
    is still unbounded (too few pairs), so nothing draws an interval it does not have."""
    if v.low > 0 and math.isfinite(v.high):
        return v.low, v.high
    return math.nan, math.nan


def _meta(d: ReportData) -> SequentialMeta:
    return d.meta.sequential or SequentialMeta()


def _rounds(d: ReportData, meta: SequentialMeta) -> tuple[int, int]:
    """(fixed rounds, max repetitions): how a ratio's reason for being undecided reads."""
    fixed = d.plan.repetitions
    return fixed, meta.max_repetitions or fixed


def blocks(d: ReportData) -> list[Block]:
    p = d.sequential
    if p is None or not p.ratios:
        return []
    meta = _meta(d)
    fixed, cap = _rounds(d, meta)
    ended = meta.ended
    out: list[Block] = [
        Heading(2, "Verdicts"),
        Text(f"{counts_line(d)} Each environment's headline value is paired with "
             f"{d.baseline}'s of the same round, run in the same block seconds apart; the "
             "interval is a 95% confidence sequence on the ratio of their geometric means "
             "(the t confidence sequence of Wang and Ramdas, with the pair spread borrowed "
             "from this host's stored runs where it is), valid however many rounds were "
             "looked at before stopping. *Worse* or *better*: the whole interval is beyond "
             "the equivalence margin; *equivalent*: it is inside ±margin; *undecided*: "
             "neither yet. *lag-1*: the autocorrelation of the pair ratios in round order "
             "(above 0.3 the host's slow load reaches across pairs; docs/statistics.md).")]
    if cap > fixed:
        out.append(Text(added_rounds_words(d.run.id, fixed, cap, meta)))
    rows = []
    order = {"worse": 0, "better": 1, "equivalent": 2, "undecided": 3}
    for r in sorted(p.ratios, key=lambda r: (order[r.verdict.verdict.value], r.workload,
                                             r.params_key, r.environment)):
        v = r.verdict
        rows.append([r.environment, r.workload,
                     d.sweep_label.get((r.workload, r.params_key), r.params_key), r.metric,
                     v.words(), f"{v.ratio:.3g} {v.interval()}",
                     f"±{v.margin:.1%} ({r.margin_source})", _pairs(r),
                     "" if math.isnan(r.lag1) else f"{r.lag1:+.2f}",
                     why_undecided(r, ended, cap, fixed)])
    out.append(Grid(["environment", "workload", "sweep", "metric", "verdict",
                     "ratio [95% sequence]", "margin", "pairs", "lag-1", "why undecided"],
                    rows))
    return out


def _pairs(r: RatioState) -> str:
    """'5', or '5 + 12 borrowed' where the spread was borrowed from stored runs."""
    own = str(r.verdict.n)
    return f"{own} + {r.borrowed.dof:g} borrowed" if r.borrowed.dof > 0 else own


def added_rounds_words(run_id: str, fixed: int, cap: int, meta: SequentialMeta) -> str:
    """What the added rounds did, from the runner's "sequential" meta: how many were added
    and how they ended, or that none was and why; never "rounds were added ... 0 round(s)"."""
    ended, rounds = meta.ended, meta.rounds
    the_fixed = "the fixed round" if fixed == 1 else f"the {fixed} fixed rounds"
    if ended is None:  # stored before each added round, so it names the one under way
        return (f"**Not finished**: the run stopped during added round {rounds + 1}, after "
                f"{the_fixed}; `isotax run --resume {run_id}` goes on from what is "
                "stored.")
    if not rounds:
        why = (" (not one more pair of an undecided ratio fit in the time left after "
               f"{the_fixed})" if ended == TIME_SPENT else "")
        return (f"After {the_fixed} no round was added (the plan allows up to "
                f"{cap} runs a point): {ended}{why}.")
    return (f"After {the_fixed}, {rounds} round(s) were added for the undecided "
            f"ratios ({meta.added_cells} cell(s) in "
            f"{meta.spent_s:.0f} s; up to {cap} runs a point). Added rounds "
            f"ended: {ended}.")


def verdicts_value(d: ReportData) -> dict[str, Any] | None:
    """results.json's "verdicts": the counts and every headline ratio's verdict."""
    p = d.sequential
    if p is None:
        return None
    meta = _meta(d)
    fixed, cap = _rounds(d, meta)
    return {
        "decided": p.decided, "total": len(p.ratios), "counts": p.counts(),
        "method": "block-paired log ratios, t confidence sequence (95%) with borrowed spread",
        "ratios": [ratio_fields(r, meta.ended, cap, fixed) for r in p.ratios],
    }

