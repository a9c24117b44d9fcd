"""Latency distributions as compact cumulative distribution functions (CDFs). Pure.

A CDF is a list of [value, cumulative fraction] points, values ascending, fractions rising to
1. Tools give either a histogram (fio's json+ bins) or every observation (sockperf's
--full-log); both are thinned to at most ~80 points, enough to draw, small enough to store as
a sample's label (a sample holds one number, so the distribution rides along with it).

Thinning keeps a point whenever the CDF crosses a new 1/steps step of the body, or the tail
1-F crosses a new 1/tail_steps of a decade (so 99%, 99.9%, 99.99% keep their resolution),
plus the first and last points: the minimum and the maximum survive.

Repetitions of one point are pooled as a mixture with equal weights, F(x) = mean over runs of
F_r(x): each run counts the same, however many observations it made.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

Cdf = list[list[float]]

STEPS = 32
TAIL_STEPS = 8


def thin(counts: Iterable[tuple[float, float]], steps: int = STEPS,
         tail_steps: int = TAIL_STEPS) -> Cdf:
    """A thinned CDF from (value, count or weight) pairs in any order; empty without
    observations."""
    items = sorted((float(v), float(n)) for v, n in counts if n > 0)
    total = sum(n for _, n in items)
    if total <= 0:
        return []
    out: Cdf = []
    seen: tuple[int, int] | None = None
    cum = 0.0
    for i, (value, n) in enumerate(items):
        cum += n
        frac = min(1.0, cum / total) if i < len(items) - 1 else 1.0
        tail = 1.0 - frac
        key = (math.floor(frac * steps),
               math.floor(-math.log10(tail) * tail_steps) if tail > 0 else 10**6)
        if key != seen or i == 0 or i == len(items) - 1:
            out.append([float(f"{value:.4g}"), round(frac, 6)])
            seen = key
    return out


def from_values(values: Iterable[float]) -> Cdf:
    """A thinned CDF of raw observations (each counted once)."""
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return thin(counts.items())


def at(cdf: Sequence[Sequence[float]], x: float) -> float:
    """F(x): the fraction of observations at or below x (a step function)."""
    f = 0.0
    for value, frac in cdf:
        if value > x:
            break
        f = frac
    return f


def quantile(cdf: Sequence[Sequence[float]], q: float) -> float:
    """The smallest stored value whose cumulative fraction reaches q (0 < q <= 1)."""
    if not cdf:
        raise ValueError("empty CDF")
    for value, frac in cdf:
        if frac >= q - 1e-12:
            return float(value)
    return float(cdf[-1][0])


def pooled(cdfs: Sequence[Sequence[Sequence[float]]]) -> Cdf:
    """The equal-weight mixture of several runs' CDFs, evaluated at the union of their points
    and thinned again (the union of n runs has up to n times the points)."""
    runs = [c for c in cdfs if c]
    if not runs:
        return []
    xs = sorted({float(v) for c in runs for v, _ in c})
    mixed = [sum(at(c, x) for c in runs) / len(runs) for x in xs]
    return thin((x, f - prev) for x, f, prev in zip(xs, mixed, [0.0, *mixed], strict=False))


def valid(cdf: object) -> bool:
    """Whether a stored label really is a CDF (values ascending, fractions in (0, 1] rising)."""
    if not isinstance(cdf, list) or not cdf:
        return False
    prev_v, prev_f = -math.inf, 0.0
    for p in cdf:
        if not (isinstance(p, list | tuple) and len(p) == 2):
            return False
        v, f = p
        if not (isinstance(v, int | float) and isinstance(f, int | float)):
            return False
        if v < prev_v or f < prev_f or not 0 < f <= 1.000001:
            return False
        prev_v, prev_f = v, f
    return True
