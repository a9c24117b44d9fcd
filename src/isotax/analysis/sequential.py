"""Sequential verdicts: after the fixed rounds, which points get another interleaved round.

Every headline ratio to the baseline gets a verdict from its round-paired values
(isotax.analysis.verdicts), looked at after every round. A decided ratio gets no more runs.
An undecided one gets more while its environment's point is below the plan's
max_repetitions, its cells do not keep failing, and its current spread says it can be
decided within that cap; among those, the ones cheapest to decide come first: the estimated
pairs still needed times the seconds one pair of cells (the environment's and the
baseline's) takes. A round holds as many as the time left allows, each with the baseline's
same point, and every cell of round R has repetition number R, so an environment's value
pairs with the baseline's of the same round.

Everything here is pure: it takes the committed cells and returns decisions, so it is tested
without a runner, and `isotax run --resume` picks up from whatever the store holds.
"""

from __future__ import annotations

import itertools
import math
import random
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from isotax.analysis import borrowing
from isotax.analysis.headline import Point, headline_values
from isotax.analysis.margins import MIN_AA_PAIRS, Margin, RowKey
from isotax.analysis.verdicts import (
    NOTHING_BORROWED,
    Borrowed,
    RatioVerdict,
    Verdict,
    confidence_sequence,
    decide_on,
    pair_by_round,
    pairs_to_decide,
    pairs_to_decide_near,
    spread,
)
from isotax.model import CellStatus
from isotax.store.base import CellRecord

T = TypeVar("T")

# How the added rounds ended (stored in run_meta["sequential"]["ended"]).
ALL_DECIDED = "every headline ratio decided"
CANNOT_DECIDE = "the undecided ratios cannot be decided within max_repetitions"
TIME_SPENT = "time budget reached"
FAILING = "the undecided ratios' cells keep failing"
NO_ROUNDS = "no added rounds (max_repetitions is repetitions)"
NOTHING_TO_COMPARE = "no ratio to the baseline"

# A point whose added cells failed this often is chased no further.
MAX_ADDED_FAILURES = 2
# A ratio's pairs before it may stop undecided: with spread borrowed from this host's stored
# runs one pair can decide an obvious ratio (an emulated VM at 0.01x native: the plan's
# minimum, `repetitions`, may be 1), but an undecided one gets a second pair before the
# projection (which needs its own spread) may drop it.
MIN_PAIRS = 2


@dataclass(frozen=True)
class RatioState:
    """One headline ratio, its verdict, and what deciding it would take."""

    environment: str
    workload: str
    params_key: str
    metric: str
    verdict: RatioVerdict
    margin_source: str
    sd: float  # of the paired log ratios (NaN below 2 pairs)
    projected: int | None  # pairs in all that would decide it at this spread (None: none <= cap)
    # The spread borrowed from stored runs of this host (isotax.analysis.borrowing), as used.
    borrowed: Borrowed = NOTHING_BORROWED
    lag1: float = math.nan  # lag-1 autocorrelation of the pair log ratios (NaN below 4 pairs)
    # Where projected is None: the pairs that would decide it were its mean one standard
    # error nearer a decision (verdicts.pairs_to_decide_near): a long shot, chased only after
    # every ratio whose projection decides it. None: not even then (or decided).
    long_shot: int | None = None

    @property
    def point(self) -> Point:
        return (self.environment, self.workload, self.params_key)


@dataclass(frozen=True)
class Progress:
    ratios: tuple[RatioState, ...]
    measured: Mapping[Point, int]  # measured cells committed per point, any status
    cell_s: Mapping[Point, float]  # mean wall seconds of one measured cell of the point
    spent_s: float  # wall seconds of the cells of added rounds
    added_cells: int
    added_failures: Mapping[Point, int]
    next_repetition: int  # the repetition number of the next round (one past the highest)

    def counts(self) -> dict[str, int]:
        out = {v.value: 0 for v in Verdict}
        for r in self.ratios:
            out[r.verdict.verdict.value] += 1
        return out

    @property
    def decided(self) -> int:
        return sum(r.verdict.verdict.decided for r in self.ratios)

    def by_key(self) -> dict[tuple[str, str, str, str], RatioState]:
        """Each ratio by (environment, workload, params_key, metric)."""
        return {(r.environment, r.workload, r.params_key, r.metric): r for r in self.ratios}

    def note(self) -> str:
        """'40/64 decided, 24 undecided': what the progress display says."""
        return (f"{self.decided}/{len(self.ratios)} decided, "
                f"{len(self.ratios) - self.decided} undecided")


def assess(cells: Sequence[CellRecord], baseline: str,
           margins: Callable[[RowKey, str], Margin],
           fixed: int, cap: int, confidence: float = 0.95,
           borrowed: Mapping[Point, Borrowed] | None = None) -> Progress:
    """Every headline ratio's verdict from the committed cells (the A/A canary's too), and
    what the added rounds have cost. `borrowed`: per point, spread from stored runs of this
    host (isotax.analysis.borrowing), used where today's pairs do not refuse it."""
    alpha = 1 - confidence
    values, metric, higher = headline_values(cells)
    measured: dict[Point, int] = defaultdict(int)
    durations: dict[Point, list[float]] = defaultdict(list)
    failures: dict[Point, int] = defaultdict(int)
    spent, added, top = 0.0, 0, 0
    for c in cells:
        if c.key.warmup:
            continue
        point = (c.key.environment, c.key.workload, c.key.params_key)
        measured[point] += 1
        top = max(top, c.key.repetition)
        took = max(0.0, c.ended - c.started)
        durations[point].append(took)
        if c.key.repetition > fixed:
            spent += took
            added += 1
            failures[point] += c.status is not CellStatus.OK
    ratios = []
    for point, by_rep in values.items():
        env, wl, pkey = point
        base = values.get((baseline, wl, pkey))
        if env == baseline or not base:
            continue
        m = metric[(wl, pkey)]
        margin = margins((wl, pkey, m), env)
        pairs = pair_by_round(by_rep, base)
        stored = borrowing.with_prior((borrowed or {}).get(point, NOTHING_BORROWED), margin)
        # The F test of the borrowed spread reads the pairs' own (the width is history's).
        lent = borrowing.usable(stored, spread(pairs), len(pairs))
        cs = confidence_sequence(pairs, alpha, borrowed=lent)
        v = decide_on(cs, higher[(wl, pkey)], margin.value)
        projected = long_shot = None
        if not v.verdict.decided:
            projected = pairs_to_decide(cs, margin.value, cap, alpha, borrowed=lent)
            if projected is None:
                long_shot = pairs_to_decide_near(cs, margin.value, cap, alpha, borrowed=lent)
        ratios.append(RatioState(env, wl, pkey, m, v, margin.source, cs.sd, projected, lent,
                                 lag1(pairs), long_shot))
    ratios.sort(key=lambda r: (r.workload, r.params_key, r.environment))
    return Progress(tuple(ratios), dict(measured),
                    {p: sum(d) / len(d) for p, d in durations.items()}, spent, added,
                    dict(failures), top + 1)


def lag1(d: Sequence[float]) -> float:
    """The lag-1 autocorrelation of a ratio's pair log ratios in round order: high means the
    host's slow regimes reach across pairs, so pairs are less independent than the interval
    assumes (the report warns). NaN below 4 pairs or without spread."""
    if len(d) < 4:
        return math.nan
    mean = sum(d) / len(d)
    den = sum((x - mean) ** 2 for x in d)
    if den == 0:
        return math.nan
    return sum((a - mean) * (b - mean) for a, b in itertools.pairwise(d)) / den


@dataclass(frozen=True)
class Decision:
    """The points of the next round (in no particular order), or why there is none."""

    points: tuple[Point, ...]
    ended: str | None


def chased(progress: Progress, baseline: str, cap: int, canary: str | None = None
           ) -> list[RatioState]:
    """The undecided ratios more runs could decide, cheapest to decide first; before them,
    the short ones: an undecided ratio below MIN_PAIRS pairs (one pair has no spread of its
    own: nothing projects it, and Table 1 gives an environment's sd from two values), and
    the A/A canary's points below MIN_AA_PAIRS pairs (its floor, which gives this host's
    next runs their margins, needs that many; native cells are cheap). The canary is chased
    no further: it is the run's alarm, not a question, and chasing its equivalence took a
    fifth of the quick plan's ten minutes."""
    failing = {p for p, n in progress.added_failures.items() if n >= MAX_ADDED_FAILURES}

    def cost(r: RatioState) -> float:
        pair = (progress.cell_s.get(r.point, 0.0)
                + progress.cell_s.get((baseline, r.workload, r.params_key), 0.0))
        return pairs_left(r, cap) * pair

    out = [r for r in progress.ratios
           if not r.verdict.verdict.decided
           and (short(r, canary) or (chasable(r) and r.environment != canary))
           and progress.measured.get(r.point, 0) < cap
           and r.point not in failing and (baseline, r.workload, r.params_key) not in failing]
    return sorted(out, key=lambda r: (not short(r, canary), r.projected is None, cost(r),
                                      r.point))


def chasable(r: RatioState) -> bool:
    """More pairs could decide it: at its projection, or as a long shot."""
    return r.projected is not None or r.long_shot is not None


def short(r: RatioState, canary: str | None) -> bool:
    """Below the pairs every ratio gets (MIN_PAIRS), or the canary's below its floor's."""
    return r.verdict.n < (MIN_AA_PAIRS if r.environment == canary else MIN_PAIRS)


def pairs_left(r: RatioState, cap: int) -> int:
    """The pairs an undecided ratio still needs: to its projection, a long shot's, else to
    the cap; at least one."""
    return max(1, (r.projected or r.long_shot or cap) - r.verdict.n)


def next_round(progress: Progress, baseline: str, cap: int, room_s: float,
               canary: str | None = None) -> Decision:
    """Which points run once more: the short ratios' (chased) and, of the others, those the
    seconds left (room_s) can see to a decision: cheapest to decide first, each ratio's
    projected remaining pairs priced at its cells' mean time (the baseline's cell once per
    point), as many as fit in room_s together; and at least the cheapest. Each with the
    baseline's same point, and the round itself within room_s.

    A round for every undecided ratio spreads the budget over ratios it cannot finish: at
    the quick plan's ten minutes the runner's rule on this host's spreads decided ~19 of its
    45 container ratios that way, ~23 focused (benchmarks/decision_ceiling.py). A ratio left
    out is taken up again as soon as the room left holds it (others decided, or its
    projection shortened)."""
    if not progress.ratios:
        return Decision((), NOTHING_TO_COMPARE)
    if all(r.verdict.verdict.decided for r in progress.ratios):
        return Decision((), ALL_DECIDED)
    todo = chased(progress, baseline, cap, canary)
    if not todo:
        failing = {p for p, n in progress.added_failures.items() if n >= MAX_ADDED_FAILURES}
        blocked = [r for r in progress.ratios if not r.verdict.verdict.decided
                   and chasable(r) and progress.measured.get(r.point, 0) < cap
                   and {r.point, (baseline, r.workload, r.params_key)} & failing]
        return Decision((), FAILING if blocked else CANNOT_DECIDE)
    chosen: list[Point] = []
    left, to_finish, focused = room_s, room_s, False
    for r in todo:
        base = (baseline, r.workload, r.params_key)
        group = [r.point] + ([base] if base not in chosen else [])
        cost = sum(progress.cell_s.get(p, 0.0) for p in group)
        now = short(r, canary)
        # What seeing it to a decision would cost: its projected remaining pairs (a long
        # shot's, todo has them last), a short ratio only its next pair.
        finish = cost * (1 if now else pairs_left(r, cap))
        if cost <= left and (now or finish <= to_finish or not focused):
            chosen += group
            left -= cost
            to_finish -= finish
            focused = focused or not now
    if not chosen:
        return Decision((), TIME_SPENT)
    return Decision(tuple(chosen), None)


def blocked_order(items: Sequence[T], block: Callable[[T], str], label: str) -> list[T]:
    """Items grouped into blocks (`block` names an item's workload point), the blocks in a
    seeded random order and the items in a seeded random order within each block: every
    environment's cell of a point runs beside the baseline's (seconds apart, not minutes),
    so the host's slow load regimes fall on both halves of a pair and cancel in its ratio,
    and the random order within the block keeps "who goes first" out of the mean. `label`
    (the plan's seed and the round) draws each round's own orders."""
    groups: dict[str, list[T]] = defaultdict(list)
    for item in items:
        groups[block(item)].append(item)
    rng = random.Random(label)
    names = sorted(groups)
    rng.shuffle(names)
    out: list[T] = []
    for name in names:
        members = sorted(groups[name], key=repr)
        rng.shuffle(members)
        out += members
    return out


def round_order(points: Sequence[Point], seed: int, number: int) -> list[Point]:
    """An added round's points in blocks by workload point, as the fixed rounds are
    (run.schedule.schedule); `number` is the round's repetition number."""
    return blocked_order(points, lambda p: f"{p[1]}|{p[2]}", f"{seed}:round:{number - 1}")


def why_undecided(r: RatioState, ended: str | None, cap: int, fixed: int) -> str:
    """Why a ratio is still undecided, in words: the interval's state and what stopped it."""
    v = r.verdict
    if v.verdict.decided:
        return ""
    if r.projected is None:
        if v.n >= 2 and not math.isnan(r.sd) and cap > v.n and r.long_shot is not None:
            more = (f"at its ratio now even {cap} pairs would not decide it (one standard error "
                    f"nearer a decision about {r.long_shot} would)"
                    + ("; the time ran out" if ended == TIME_SPENT else ""))
        elif v.n >= 2 and not math.isnan(r.sd):
            more = (f"at this spread ({r.sd:.1%} per pair) even {cap} pairs would not decide "
                    "it" if cap > v.n else f"max_repetitions ({cap}) reached")
        else:
            more = "too few passing pairs"
        return f"{v.reason}; {more}"
    if cap <= fixed:
        return (f"{v.reason}; about {r.projected} pairs would decide it (it has {v.n}): "
                "raise verdicts.max_repetitions for added rounds")
    if ended == TIME_SPENT:
        return f"{v.reason}; the time ran out at {v.n} pairs (about {r.projected} would decide it)"
    if ended == FAILING:
        return f"{v.reason}; its cells kept failing"
    return f"{v.reason}; about {r.projected} pairs would decide it (it has {v.n})"


def to_meta(settings: Mapping[str, Any], fixed: int, cap: int, progress: Progress,
            ended: str | None, rounds: int) -> dict[str, Any]:
    """What run_meta["sequential"] keeps: the settings, how the added rounds ended (None
    while running or after an interruption), the counts and every ratio's verdict."""
    return {
        "settings": dict(settings),
        "repetitions": fixed,
        "max_repetitions": cap,
        "ended": ended,
        "rounds": rounds,
        "added_cells": progress.added_cells,
        "spent_s": round(progress.spent_s, 3),
        "decided": progress.decided,
        "total": len(progress.ratios),
        "counts": progress.counts(),
        "ratios": [ratio_fields(r, ended, cap, fixed) for r in progress.ratios],
    }


def ratio_fields(r: RatioState, ended: str | None, cap: int, fixed: int) -> dict[str, Any]:
    """One ratio's verdict as JSON fields (run meta and results.json)."""
    return {"environment": r.environment, "workload": r.workload, "params": r.params_key,
            "metric": r.metric, "verdict": r.verdict.verdict.value,
            "ratio": _finite(r.verdict.ratio), "low": _finite(r.verdict.low),
            "high": _finite(r.verdict.high), "margin": r.verdict.margin,
            "margin_source": r.margin_source, "pairs": r.verdict.n,
            "projected_pairs": r.projected, "reason": why_undecided(r, ended, cap, fixed),
            "sd": _finite(r.sd), "lag1": _finite(r.lag1),
            "borrowed_dof": r.borrowed.dof, "borrowed_ss": r.borrowed.ss,
            "borrowed_from": r.borrowed.source, "borrowed_runs": list(r.borrowed.runs),
            "prior_g": r.borrowed.g}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
