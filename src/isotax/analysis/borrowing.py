"""Borrowed strength: the spread of a ratio's pairs, taken from this host's stored runs of the
same point, so that a run with few pairs of its own still gets a narrow interval; and where
those runs put the ratio, which chooses the width of the confidence sequence's mixture
(with_prior, verdicts.prior_width): tightest where this ratio's decision will be made.

Where from: complete runs in the store of the same host (margins.same_host: hostname, kernel,
CPU model and count, memory) whose cells were run in blocks (run_meta PAIRING == BLOCKS: the
design of isotax.analysis.sequential.blocked_order; pairs of the older shuffled rounds had
halves minutes apart and a larger spread). Per environment (same name and kind) and workload
point, each stored run's paired log ratios are centred on their own mean: k values give k - 1
degrees of freedom of residuals with the pairs' sigma (a Helmert rotation), whatever that
run's true ratio was. Summed over runs, newest first, up to MAX_DOF degrees of freedom:
verdicts.Borrowed(dof, ss). The cap keeps today's own pairs in charge after a handful of
rounds (at MAX_DOF = 12 and 12 pairs each weighs half).

Validity rests on one assumption: the stored sigma is today's. The host's load comes and
goes, and an F test on a few pairs cannot see a history that is optimistic by 1.5-2x (it
refused one at 2x only 15-43% of the time at 2-10 pairs). So the lent spread is discounted
(DISCOUNT: the history's sd times 1.25, its sum of squares times 1.5625) and `usable` checks
today's pairs against that (an F test at 5% on each side: today's variance significantly
above or below the discounted history's means another regime, and nothing is borrowed).
Chosen from measurement (tests/unit/test_verdict_error_rates.py, on this host's long real
sequences of 2026-11-29 with the history of 2026-11-26, stationary-bootstrapped): false
verdicts on the margin's edge with another day's history were 2.9% [1.0%, 5.3%] at a 3%
margin and 3.5% [1.3%, 6.2%] at 5% without the discount (the F test at 1%; one A/A sequence
whose history's sd was 0.55x today's reached 17%), and 2.6% [1.0%, 4.5%] and 2.9% [1.3%, 4.8%]
with it; the price is at a handful of pairs (a 10% tax decided in 17% of 6-pair runs instead
of 23%; from 10 pairs on, none).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from scipy import stats

from isotax.analysis import cell_length
from isotax.analysis.headline import Point, headline_values
from isotax.analysis.margins import Margin, host_history
from isotax.analysis.verdicts import (
    NOTHING_BORROWED,
    PRIOR_G,
    Borrowed,
    pair_by_round,
    prior_width,
)
from isotax.store.base import Store

# run_meta key and value that mark a run whose rounds ran in blocks (pairs close in time).
PAIRING = "pairing"
BLOCKS = "blocks"
# Degrees of freedom borrowed at most (the module docstring says why 12).
MAX_DOF = 12.0
# Today's spread refuses its history when an F test says it differs at this level (each side).
F_LEVEL = 0.05
# The history's sd is lent this many times larger (the module docstring says why 1.25).
DISCOUNT = 1.25


def from_store(store: Store, host: Mapping[str, Any], exclude: str, baseline: str
               ) -> dict[Point, Borrowed]:
    """Per point of this host's stored block-paired runs (newest first, up to MAX_DOF), the
    centred sum of squares of its pairs' log ratios against `baseline`, discounted."""
    dof: dict[Point, float] = defaultdict(float)
    ss: dict[Point, float] = defaultdict(float)
    total: dict[Point, float] = defaultdict(float)  # the lent runs' pairs: sum and count
    count: dict[Point, int] = defaultdict(int)
    runs: dict[Point, list[str]] = defaultdict(list)
    for run in host_history(store, host, exclude):
        meta = store.run_meta(run.id)
        if meta.get(PAIRING) != BLOCKS:
            continue
        kinds = {e.name: e.kind for e in store.environments(run.id)}
        values, _, _ = headline_values(store.cells(run.id))
        for (env, wl, pkey), by_rep in values.items():
            base = values.get((baseline, wl, pkey))
            # Tagged with the kind and the runs per cell on both sides (cell_length): a
            # spread is lent only to the same environment measured the same way.
            point = (f"{env}:{kinds.get(env, '?')}:{cell_length.of(meta, env, wl, pkey)}:"
                     f"{cell_length.of(meta, baseline, wl, pkey)}", wl, pkey)
            if env == baseline or not base or dof[point] >= MAX_DOF:
                continue
            d = pair_by_round(by_rep, base)
            if len(d) < 2:
                continue
            mean = sum(d) / len(d)
            take = min(len(d) - 1.0, MAX_DOF - dof[point])
            # A run cut to fit the cap gives its mean square times the dof it may give.
            ss[point] += sum((x - mean) ** 2 for x in d) * take / (len(d) - 1)
            dof[point] += take
            total[point] += sum(d)
            count[point] += len(d)
            runs[point].append(run.id)
    return {p: Borrowed(dof[p], ss[p] * DISCOUNT**2, _source(runs[p]), total[p] / count[p],
                        runs=tuple(runs[p])) for p in dof if dof[p] > 0}


def for_run(stored: Mapping[Point, Borrowed], kinds: Mapping[str, str],
            meta: Mapping[str, Any] | None = None, baseline: str = ""
            ) -> dict[tuple[str, str, str], Borrowed]:
    """`stored` keyed by this run's environment names: an environment borrows only from
    stored ones of the same name and kind whose cells held as many runs as this run's
    (`meta`, its run_meta; cell_length) on both sides of the ratio."""
    out = {}
    today = meta or {}
    for (tagged, wl, pkey), b in stored.items():
        name, kind, runs, base_runs = tagged.rsplit(":", 3)
        if kinds.get(name) == kind and \
                (int(runs), int(base_runs)) == (cell_length.of(today, name, wl, pkey),
                                               cell_length.of(today, baseline, wl, pkey)):
            out[(name, wl, pkey)] = b
    return out


def with_prior(borrowed: Borrowed, margin: Margin) -> Borrowed:
    """`borrowed` with the mixture's width its history chooses against `margin`
    (verdicts.prior_width): only where the margin was fixed before this run's cells, since a
    width chosen from this run's own canary would no longer be fixed before its pairs.
    Without a history's mean (nothing stored, or a verdict's stored record that kept its
    width) `borrowed` stays as it is."""
    if margin.from_this_run:
        return replace(borrowed, g=PRIOR_G)
    if borrowed.dof <= 0 or not math.isfinite(borrowed.center):
        return borrowed
    return replace(borrowed, g=prior_width(borrowed.center, borrowed.sd, margin.value))


def usable(borrowed: Borrowed, sd: float, n: int) -> Borrowed:
    """`borrowed`, or nothing where today's n pairs (spread sd) say the history's sigma is
    not today's: their variance above or below the history's by an F test at F_LEVEL on
    each side. Above: borrowing would narrow the interval wrongly (the guarantee needs the
    same sigma). Below: the history is another, noisier regime (a loaded host that day), and
    borrowing would only widen today's interval. The history here is already discounted
    (from_store: DISCOUNT), so with equal sigmas "above" is refused in less than F_LEVEL of
    runs and "below" in more; tests/unit/test_verdict_error_rates.py measures what the
    choice and the discount cost and what they protect."""
    if borrowed.dof <= 0 or n < 2 or math.isnan(sd):
        return borrowed
    if borrowed.ss <= 0:
        return replace(NOTHING_BORROWED, g=borrowed.g)
    f = sd * sd / (borrowed.ss / borrowed.dof)
    if not stats.f.ppf(F_LEVEL, n - 1, borrowed.dof) <= f <= \
            stats.f.ppf(1 - F_LEVEL, n - 1, borrowed.dof):
        # The spread is refused; the width stays: the history chose it, not today's pairs.
        return replace(NOTHING_BORROWED, g=borrowed.g)
    return borrowed


def _source(runs: list[str]) -> str:
    return f"{len(runs)} stored run(s) of this host, newest {runs[0]}" if runs else ""
