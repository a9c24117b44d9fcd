"""Adaptive repetitions: which points get another interleaved round, and when to stop.

A plan's [adaptive] table gives a target for the half-width of the 95% interval of every ratio
to the baseline (as a fraction of the ratio) and a budget: wall time for the added cells, a cap
on measured repetitions per point, or both. After the plan's fixed rounds the runner asks
`next_round` what to run next, runs it interleaved, and asks again, until every ratio meets
the target or the budget or the cap ends it. Everything here is pure: it takes the committed
cells and returns decisions, so it is tested without a runner, and `isotax run --resume` picks
up from whatever the store holds.

Which ratios: every environment other than the baseline (the A/A copy included: a tighter
noise floor is worth having), every workload point, and by default (metrics = "headline")
the point's headline metric, the first its workload reports; with metrics = "all" every
metric of the point but the
environment's own host CPU (a cost shown apart, not a ratio) and metrics whose baseline mean
is 0 (no ratio). Only cells that passed count; a point with no passing cell on either side
(n/a, or failing every time) has no ratio and is not chased, and neither is one whose added
cells failed twice (on either side): more runs of it would only add failures.

A ratio meets the target only with `min_repetitions` passing values on each side (5 by
default): with 3, the percentile bootstrap's interval is much narrower than a t interval and
a ratio would "meet" 2% by luck.

Intervals are stats.ratio's bootstrap with the run's seed on the values in commit order,
exactly as the report computes them, so the half-widths here are the report's.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from isotax.analysis.stats import Ratio, ratio
from isotax.model import CellStatus
from isotax.plan import Adaptive
from isotax.store.base import CellRecord
from isotax.telemetry import envcpu

# (environment, workload, params_key): what one cell of a round measures.
Point = tuple[str, str, str]

# How adaptive repetitions ended (stored in run_meta["adaptive"]["ended"]).
TARGET_MET = "target met"
BUDGET_REACHED = "time budget reached"
CAP_REACHED = "repetition cap reached"
NOTHING_TO_COMPARE = "no ratio to the baseline"
FAILING = "the points short of the target keep failing"

# A point whose added cells failed this often is chased no further.
MAX_ADDED_FAILURES = 2


def half_width(r: Ratio) -> float:
    """Half the 95% interval's width as a fraction of the ratio; NaN without an interval."""
    if not r.has_ci or r.ratio == 0:
        return math.nan
    return (r.ci_high - r.ci_low) / 2 / abs(r.ratio)


@dataclass(frozen=True)
class RatioWidth:
    """One ratio to the baseline and how tight its interval is."""

    environment: str
    workload: str
    params_key: str
    metric: str
    ratio: float
    half_width: float  # NaN when a side has fewer than 2 values
    n: int  # passing repetitions of the environment
    n_baseline: int
    met: bool

    @property
    def point(self) -> Point:
        return (self.environment, self.workload, self.params_key)


@dataclass(frozen=True)
class Progress:
    """What the committed cells say, for the decision."""

    widths: tuple[RatioWidth, ...]
    repetitions: Mapping[Point, int]  # highest measured repetition committed per point
    cell_s: Mapping[Point, float]  # mean wall seconds of one measured cell of the point
    spent_s: float  # wall seconds of the cells added beyond the plan's fixed repetitions
    added_cells: int
    added_failures: Mapping[Point, int]  # failed (or n/a) added cells per point


def assess(cells: Sequence[CellRecord], baseline: str, target: float, fixed: int,
           seed: int, min_n: int = 2, headline_only: bool = False) -> Progress:
    """The half-width of every ratio to the baseline from the committed cells (warm-ups
    excluded), each point's repetitions so far, and the time the added ones took. A ratio
    meets the target only with at least `min_n` passing repetitions on each side;
    `headline_only` keeps each point's first metric only (its workload's headline)."""
    headline: dict[tuple[str, str], str] = {}  # (workload, params_key) -> first metric
    values: dict[tuple[Point, str], list[float]] = defaultdict(list)
    higher: dict[tuple[Point, str], bool] = {}
    reps: dict[Point, int] = {}
    durations: dict[Point, list[float]] = defaultdict(list)
    spent, added = 0.0, 0
    failures: dict[Point, int] = defaultdict(int)
    for c in cells:  # commit order, as analysis reads them: the bootstrap sees the same data
        if c.key.warmup:
            continue
        point = (c.key.environment, c.key.workload, c.key.params_key)
        reps[point] = max(reps.get(point, 0), c.key.repetition)
        durations[point].append(max(0.0, c.ended - c.started))
        if c.key.repetition > fixed:
            spent += max(0.0, c.ended - c.started)
            added += 1
            failures[point] += c.status is not CellStatus.OK
        if c.status is not CellStatus.OK:
            continue
        for s in c.samples:
            if s.metric == envcpu.METRIC:
                continue
            first = headline.setdefault((point[1], point[2]), s.metric)
            if headline_only and s.metric != first:
                continue
            values[(point, s.metric)].append(s.value)
            higher[(point, s.metric)] = s.higher_is_better
    widths = []
    for (point, metric), vals in values.items():
        env, wl, pkey = point
        if env == baseline:
            continue
        base = values.get(((baseline, wl, pkey), metric))
        if not base or float(np.mean(base)) == 0:
            continue
        r = ratio(vals, base, higher[(point, metric)], seed=seed)
        hw = half_width(r)
        enough = min(len(vals), len(base)) >= min_n
        widths.append(RatioWidth(env, wl, pkey, metric, r.ratio, hw, len(vals), len(base),
                                 enough and not math.isnan(hw) and hw <= target))
    return Progress(tuple(widths), reps, {p: sum(d) / len(d) for p, d in durations.items()},
                    spent, added, dict(failures))


@dataclass(frozen=True)
class Decision:
    """The points of the next round (in no particular order), or why there is none."""

    points: tuple[Point, ...]
    ended: str | None  # one of the constants above when no round follows


def _shortfall(widths: Sequence[RatioWidth], target: float) -> float:
    """How far a group's worst ratio is from the target (no interval: the farthest)."""
    return max((math.inf if math.isnan(w.half_width) else w.half_width / target)
               for w in widths)


def next_round(progress: Progress, baseline: str, settings: Adaptive) -> Decision:
    """Which points run once more: every environment's point with a ratio above target that
    is below the repetition cap, together with the baseline's same point (its values are
    half of every ratio). When the time budget cannot hold all of them, the points whose
    ratios are already within the target but lack min_repetitions go first (confirming them
    is what the budget buys surely), then those farthest from it, each with its baseline, so
    a round never
    leaves an environment ahead of the baseline it is compared with; when not even one such
    pair fits, adaptive repetitions end."""
    if not progress.widths:
        return Decision((), NOTHING_TO_COMPARE)
    cap = settings.max_repetitions or math.inf
    unmet = [w for w in progress.widths if not w.met]
    if not unmet:
        return Decision((), TARGET_MET)
    # Group by workload point: the environments that need it, plus the baseline once.
    groups: dict[tuple[str, str], list[RatioWidth]] = defaultdict(list)
    failing = {p for p, n in progress.added_failures.items() if n >= MAX_ADDED_FAILURES}
    chased = [w for w in unmet
              if w.point not in failing and (baseline, w.workload, w.params_key) not in failing]
    for w in chased:
        if progress.repetitions.get(w.point, 0) < cap:
            groups[(w.workload, w.params_key)].append(w)
    if not groups:
        # Failing points left out, what stops the rest is the cap.
        return Decision((), CAP_REACHED if chased else FAILING)
    # Points whose intervals are already within the target and only lack runs (below
    # min_repetitions) go first: a budget spent on them confirms ratios; then the widest.
    ranked = sorted(groups.items(), key=lambda kv: (_shortfall(kv[1], settings.target) > 1,
                                                    -_shortfall(kv[1], settings.target),
                                                    kv[0]))
    chosen: list[Point] = []
    room = math.inf if settings.budget_s is None else settings.budget_s - progress.spent_s
    for (wl, pkey), ws in ranked:
        group = sorted({w.point for w in ws})
        base = (baseline, wl, pkey)
        if progress.repetitions.get(base, 0) < cap:
            group.append(base)
        cost = sum(progress.cell_s.get(p, 0.0) for p in group)
        if cost <= room:
            chosen += group
            room -= cost
    if not chosen:
        return Decision((), BUDGET_REACHED)
    return Decision(tuple(chosen), None)


def round_order(points: Sequence[Point], seed: int, number: int) -> list[Point]:
    """The round's points in a seeded random order, as the fixed rounds are (run.schedule.schedule);
    `number` is the added round's number, counted over the run."""
    order = sorted(points)
    random.Random(f"{seed}:extra:{number}").shuffle(order)
    return order


def may_start(spent_s: float, budget_s: float | None) -> bool:
    """Whether another added cell may start: not once the time budget is spent."""
    return budget_s is None or spent_s < budget_s


def budget_gate(spent_s: float, budget_s: float | None) -> Callable[[], bool]:
    """For a round that starts now with spent_s already used: asked before each of its cells,
    whether that cell may start (the clock counts the round's own time on top)."""
    since = time.monotonic() - spent_s
    return lambda: may_start(time.monotonic() - since, budget_s)


def to_meta(settings: Adaptive, fixed: int, progress: Progress, ended: str | None,
            rounds: int) -> dict[str, Any]:
    """What run_meta["adaptive"] keeps: the settings, how it ended (None while running or
    after an interruption) and every ratio's half-width; the report renders it as it is."""
    return {
        "target": settings.target,
        "budget_s": settings.budget_s,
        "max_repetitions": settings.max_repetitions,
        "min_repetitions": settings.min_repetitions,
        "metrics": settings.metrics,
        "repetitions": fixed,
        "ended": ended,
        "rounds": rounds,
        "added_cells": progress.added_cells,
        "spent_s": round(progress.spent_s, 3),
        "met": sum(w.met for w in progress.widths),
        "ratios": [
            {"environment": w.environment, "workload": w.workload, "params": w.params_key,
             "metric": w.metric, "ratio": w.ratio,
             "half_width": None if math.isnan(w.half_width) else w.half_width,
             "n": w.n, "n_baseline": w.n_baseline, "met": w.met}
            for w in progress.widths
        ],
    }
