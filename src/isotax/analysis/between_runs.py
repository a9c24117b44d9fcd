"""One run's tax over another run's, judged by the verdicts' own machinery: the CI gate's
`no_worse_than` (isotax.analysis.gate) and the fleet's hosts against their reference
(isotax.analysis.fleet).

Each run's tax on a point is its sequential verdict's ratio to its baseline: the mean of its
round-paired log ratios and their confidence sequence (isotax.analysis.verdicts), with what
that run borrowed. Taken at ALPHA / 2 each, the two sequences bound the difference of the
mean log ratios, log(this tax / that tax), within [low - other's high, high - other's low]
with probability 1 - ALPHA at least, however many rounds either run added before it stopped.
It is judged against a margin as a ratio to the baseline is: worse or better beyond it,
equivalent within it, else undecided. (A percentile bootstrap of the four groups of
repetitions, which this replaced, is a fixed-n interval on unpaired values: it is too narrow
at a handful of repetitions and ignores the runs' optional stopping.)

A metric without a sequential verdict (not a point's headline) has no pairs judged: there,
each of the four groups of values (the environment and the baseline in each run) gets its own
confidence sequence on its mean log value at ALPHA / 4 (`taxes_unpaired`): wider, and as valid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from isotax.analysis.sequential import RatioState
from isotax.analysis.verdicts import (
    ALPHA,
    ConfidenceSequence,
    RatioVerdict,
    confidence_sequence,
    decide_on,
    radius,
)


def _bounds(s: RatioState) -> tuple[float, float, float]:
    """(mean, low, high) of one run's tax on the log scale, its sequence at ALPHA / 2."""
    v = s.verdict
    mean = math.log(v.ratio) if v.ratio > 0 else math.nan
    r = radius(v.n, s.sd, ALPHA / 2, s.borrowed)
    return mean, mean - r, mean + r


def tax_change(this: RatioState, ref: RatioState, margin: float) -> RatioVerdict:
    """`this` run's tax over `ref`'s on the same point, with its 95% interval and verdict."""
    mt, lt, ht = _bounds(this)
    mr, lr, hr = _bounds(ref)
    if math.isnan(mt) or math.isnan(mr):
        cs = ConfidenceSequence(0, math.nan, math.nan, -math.inf, math.inf)
    else:
        cs = ConfidenceSequence(min(this.verdict.n, ref.verdict.n), mt - mr, math.nan,
                                lt - hr, ht - lr)
    return decide_on(cs, this.verdict.higher_is_better, margin)


def taxes_unpaired(env: Sequence[float], base: Sequence[float], ref_env: Sequence[float],
                   ref_base: Sequence[float], higher_is_better: bool, margin: float
                   ) -> RatioVerdict | None:
    """(env / base) over (ref_env / ref_base) of the geometric means, each group's confidence
    sequence at ALPHA / 4; None where a value is not positive."""
    groups = (env, base, ref_env, ref_base)
    if any(not g or min(g) <= 0 for g in groups):
        return None
    e, b, re_, rb = (confidence_sequence([math.log(v) for v in g], ALPHA / 4) for g in groups)
    cs = ConfidenceSequence(min(e.n, b.n, re_.n, rb.n), e.mean - b.mean - re_.mean + rb.mean,
                            math.nan, e.low - b.high - re_.high + rb.low,
                            e.high - b.low - re_.low + rb.high)
    return decide_on(cs, higher_is_better, margin)
