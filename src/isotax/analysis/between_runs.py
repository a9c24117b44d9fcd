"""Ratios across runs, judged by the verdicts' own machinery: `isotax compare`'s B / A
(isotax.analysis.compare), the CI gate's `no_worse_than` and named metrics
(isotax.analysis.gate), and the fleet's hosts against their reference (isotax.analysis.fleet).

Each is a signed sum of means of log values, each mean with its own confidence sequence
(isotax.analysis.verdicts) at ALPHA split evenly between them: the sum of their bounds then
bounds the sum with probability 1 - ALPHA at least (a union bound), however many rounds each
run added before it stopped. It is judged against a margin as a ratio to the baseline is:
worse or better beyond it, equivalent within it, else undecided. (A percentile bootstrap of
the groups of repetitions, which this replaced, is a fixed-n interval on unpaired values: it
is too narrow at a handful of repetitions and ignores the runs' optional stopping.)

- One run's tax over another's on a point (`tax_change`): each run's sequential verdict, the
  mean of its round-paired log ratios with what that run borrowed, at ALPHA / 2 each.
- A metric without a sequential verdict (not a point's headline): each of the four groups of
  values (the environment and the baseline in each run) on its own, at ALPHA / 4
  (`taxes_unpaired`): wider, and as valid.
- Two runs' raw values (`judge`): each run's mean log value at ALPHA / 2. A confidence
  sequence is location-equivariant, so it needs no pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from isotax.analysis.sequential import RatioState
from isotax.analysis.verdicts import (
    ALPHA,
    MIN_MARGIN,
    ConfidenceSequence,
    RatioVerdict,
    confidence_sequence,
    decide_on,
    radius,
)


def _difference(plus: Sequence[ConfidenceSequence], minus: Sequence[ConfidenceSequence]
                ) -> ConfidenceSequence:
    """Σ plus − Σ minus of the means, bounded by the parts' bounds (each taken at its share
    of ALPHA by the caller)."""
    return ConfidenceSequence(min(c.n for c in (*plus, *minus)),
                              sum(c.mean for c in plus) - sum(c.mean for c in minus),
                              math.nan,
                              sum(c.low for c in plus) - sum(c.high for c in minus),
                              sum(c.high for c in plus) - sum(c.low for c in minus))


def _logs(values: Sequence[float], alpha: float) -> ConfidenceSequence:
    return confidence_sequence([math.log(v) for v in values], alpha)


def _tax(s: RatioState) -> ConfidenceSequence:
    """One run's tax on the log scale, its sequence at ALPHA / 2 (NaN without pairs)."""
    v = s.verdict
    mean = math.log(v.ratio) if v.ratio > 0 else math.nan
    r = radius(v.n, s.sd, ALPHA / 2, s.borrowed)
    return ConfidenceSequence(v.n, mean, s.sd, mean - r, mean + r)


def tax_change(this: RatioState, ref: RatioState, margin: float) -> RatioVerdict:
    """`this` run's tax over `ref`'s on the same point, with its 95% interval and verdict."""
    return decide_on(_difference([_tax(this)], [_tax(ref)]), this.verdict.higher_is_better,
                     margin)


def taxes_unpaired(env: Sequence[float], base: Sequence[float], ref_env: Sequence[float],
                   ref_base: Sequence[float], higher_is_better: bool, margin: float
                   ) -> RatioVerdict | None:
    """(env / base) over (ref_env / ref_base) of the geometric means, each group's confidence
    sequence at ALPHA / 4; None where a value is not positive."""
    groups = (env, base, ref_env, ref_base)
    if any(not g or min(g) <= 0 for g in groups):
        return None
    e, b, re_, rb = (_logs(g, ALPHA / 4) for g in groups)
    return decide_on(_difference([e, rb], [b, re_]), higher_is_better, margin)


def judge(xa: Sequence[float], xb: Sequence[float], higher_is_better: bool,
          margin: float = MIN_MARGIN) -> RatioVerdict | None:
    """B / A of the geometric means, each run's mean log value at ALPHA / 2: log(B / A) lies
    within [low_B - high_A, high_B - low_A] with probability 1 - ALPHA at least. None where a
    value is not positive."""
    if not xa or not xb or min(*xa, *xb) <= 0:
        return None
    return decide_on(_difference([_logs(xb, ALPHA / 2)], [_logs(xa, ALPHA / 2)]),
                     higher_is_better, margin)
