"""Verdicts across a run's ratios: how many false ones to expect, and e-BH.

Each verdict's 95% holds per ratio (as every interval in the report does): over a run of N
ratios whose truth is within their margins, at most 5% of them, N / 20, are expected to end
worse or better falsely (fewer: the confidence sequence is conservative; the simulation on this
host's pairs gives the rate, docs/statistics.md). A reader who wants the run's worse/better
verdicts as a set, with the false discovery rate controlled at 5% under any dependence
between the ratios, gets e-BH (Wang and Ramdas, "False discovery rate control with e-values",
JRSSB 84, 2022): each ratio's e-value against "no change beyond the margin" is the smallest
mixture Bayes factor over the null's means (the edge of the margin nearer to its mean;
verdicts.bayes_factor, an e-value at every one of those means), and e-BH keeps the k largest,
k the largest with e_(k) >= N / (alpha k).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from isotax.analysis.sequential import RatioState
from isotax.analysis.verdicts import ALPHA, Borrowed, bayes_factor


def e_value(n: int, mean: float, sd: float, margin: float, borrowed: Borrowed) -> float:
    """Evidence against "|mean log ratio| <= log(1 + margin)": the Bayes factor at the null's
    mean nearest to the pairs' mean (1 when that mean is inside: no evidence)."""
    m = math.log1p(margin)
    if not math.isfinite(mean) or abs(mean) <= m:
        return 1.0
    return bayes_factor(n, mean, sd, math.copysign(m, mean), borrowed=borrowed)


def ceiling(n: int, borrowed: Borrowed) -> float:
    """The largest e-value n pairs can give, however far the mean is from the null: the
    mixture's Bayes factor tends to c^((n + dof - 1) / 2), c = 1 + n g, as the distance grows.
    A verdict decided on one pair with a little history (3 borrowed degrees of freedom, g = 10)
    tops out at about 36, so across many ratios e-BH cannot keep it, whatever its effect."""
    if n < 1 or (n < 2 and borrowed.dof <= 0):
        return 1.0
    c = 1 + n * borrowed.g
    return math.exp(min((n + borrowed.dof - 1) / 2 * math.log(c), 700.0))


def bar(total: int, kept: int, alpha: float = ALPHA) -> float:
    """The e-value e-BH asks of each of `kept` ratios among `total` to keep them all."""
    return total / (alpha * kept)


def kept(ratios: Sequence[RatioState], alpha: float = ALPHA) -> list[RatioState]:
    """The ratios whose worse/better verdicts e-BH keeps at alpha, each judged by e_value."""
    evalues = [e_value(r.verdict.n, math.log(r.verdict.ratio) if r.verdict.ratio > 0
                       else math.nan, r.sd, r.verdict.margin, r.borrowed) for r in ratios]
    return [ratios[i] for i in ebh(evalues, alpha)]


def ebh(evalues: Sequence[float], alpha: float = ALPHA) -> list[int]:
    """The indices e-BH rejects at level alpha (the false discovery rate it controls)."""
    total = len(evalues)
    order = sorted(range(total), key=lambda i: -evalues[i])
    keep = 0
    for k in range(1, total + 1):
        if evalues[order[k - 1]] >= bar(total, k, alpha):
            keep = k
    return sorted(order[:keep])


def expected_false(ratios: int, alpha: float = ALPHA) -> float:
    """At most how many of `ratios` verdicts are falsely worse/better, in expectation."""
    return ratios * alpha
