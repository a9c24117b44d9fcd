"""What this host can decide: from the pair spreads a run measured, what each ratio borrowed
and the time its cells take, the smallest tax its ratios could call worse or better with the
pairs the run gave them, and the budget a ±5% answer for every ratio would need (issue 28's
"tell the user what this host can decide").

Both are first-order estimates, never evidence (a verdict comes only from a ratio's own
confidence sequence, isotax.analysis.verdicts):
- smallest: per ratio, its margin plus its interval's half-width at its pairs, spread and
  borrowed spread; the median over the ratios (half decide a smaller tax, half need larger).
  Said as a number only up to SAID_UP_TO: "a tax of about 437% or more" (three pairs and
  nothing borrowed) is true and tells the user nothing they can act on;
- the ±5% budget: per ratio, the pairs whose interval is within ±5% at its spread (with what
  it borrows); per workload point, the rounds its neediest ratio wants, each round one cell
  of every environment still short and one of the baseline, at their mean cell times; said
  per workload (the group of ratios a user would give more time to) and in all.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from isotax.analysis.verdicts import Borrowed, pairs_for_half_width, smallest_decidable

# The answer the budget line is about: every ratio's interval within ±5%.
HALF_WIDTH = 0.05
# The largest smallest-decidable tax said as a number; beyond it, in words.
SAID_UP_TO = 1.0


@dataclass(frozen=True)
class RatioNoise:
    """What reach needs of one ratio."""

    point: tuple[str, str, str]  # (environment, workload, params_key)
    sd: float  # of its pair log ratios (NaN below 2 pairs)
    pairs: int
    margin: float
    borrowed: Borrowed


@dataclass(frozen=True)
class Reach:
    sd: float  # median pair spread over the ratios that have one
    pairs: int  # median pairs the run gave a ratio
    smallest: float  # median smallest |ratio - 1| a ratio's pairs can decide
    budget_5pct_s: float | None  # seconds of cells for ±5% on every ratio (None: unreachable)
    # The same per workload, in the plan's order (None: that workload's is unreachable).
    by_workload: tuple[tuple[str, float | None], ...] = ()

    def words(self) -> str:
        """One line for the first screen."""
        if self.budget_5pct_s is not None:
            five = f"a ±5% answer for every ratio would take about " \
                   f"{_duration(self.budget_5pct_s)} of cells"
        else:
            five = "no budget gives every ratio a ±5% answer at this noise"
        if len(self.by_workload) > 1:
            five += " (" + ", ".join(f"{wl} {_duration(s) if s is not None else 'unreachable'}"
                                     for wl, s in self.by_workload) + ")"
        if not math.isfinite(self.smallest):
            small = "decide no tax of any size"
        elif self.smallest > SAID_UP_TO:
            small = "decide only a tax of several times (an emulated VM's), nothing smaller"
        else:
            small = f"decide a tax of about {self.smallest:.0%} or more"
        return (f"at this host's noise (median pair spread {self.sd:.1%}), the pairs this run "
                f"gave its ratios (median {self.pairs}) {small}; {five}")

    def meta(self) -> dict[str, Any]:
        return {"sd": self.sd, "pairs": self.pairs, "smallest": _finite(self.smallest),
                "budget_5pct_s": self.budget_5pct_s,
                "budget_5pct_by_workload_s": dict(self.by_workload)}


def reach(ratios: Sequence[RatioNoise], cell_s: Mapping[tuple[str, str, str], float],
          baseline: str) -> Reach | None:
    """The reach of a run's ratios (the baseline's cells timed in cell_s too). None without
    a ratio that has a spread."""
    known = [r for r in ratios if r.sd == r.sd and r.sd > 0]
    if not known:
        return None
    smallest = statistics.median(
        smallest_decidable(r.sd, max(r.pairs, 2), r.margin, borrowed=r.borrowed)
        for r in known)
    need: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    unreachable: set[str] = set()
    for r in known:
        n = pairs_for_half_width(r.sd, HALF_WIDTH, borrowed=r.borrowed)
        if n is None:
            unreachable.add(r.point[1])
        else:
            need[(r.point[1], r.point[2])][r.point[0]] = n
    seconds: dict[str, float] = defaultdict(float)
    for (wl, pkey), envs in need.items():
        seconds[wl] += sum(n * cell_s.get((env, wl, pkey), 0.0) for env, n in envs.items())
        seconds[wl] += max(envs.values()) * cell_s.get((baseline, wl, pkey), 0.0)
    by_wl = {wl: None if wl in unreachable else seconds[wl]  # the ratios' order: the plan's
             for wl in dict.fromkeys(r.point[1] for r in known)}
    total = None if unreachable else sum(seconds.values())
    return Reach(statistics.median(r.sd for r in known),
                 int(statistics.median(r.pairs for r in known)), smallest, total,
                 tuple(by_wl.items()))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
