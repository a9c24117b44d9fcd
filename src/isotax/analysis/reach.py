"""What this host can decide: from the pair spreads a run measured and the time its rounds
take, the smallest tax its budget can call worse or better, and the budget a ±5% answer would
need (issue 28's "tell the user what this host can decide").

Both are first-order estimates at the run's median pair spread over its ratios (the typical
ratio; half decide more easily, half less), never evidence: a verdict comes only from a
ratio's own confidence sequence (isotax.analysis.verdicts).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from isotax.analysis.verdicts import (
    NOTHING_BORROWED,
    pairs_for_half_width,
    smallest_decidable,
)

# The answer the budget line is about: every ratio's interval within ±5%.
HALF_WIDTH = 0.05


@dataclass(frozen=True)
class Reach:
    sd: float  # median pair spread (sd of log ratios) over the ratios that have one
    pairs: int  # pairs a ratio reaches in the budget, chased alone at one round per pair
    smallest: float  # smallest |ratio - 1| those pairs can decide at that spread
    round_s: float  # seconds of one round of every point (all environments)
    pairs_5pct: int | None  # pairs for a ±5% interval at that spread
    budget_5pct_s: float | None  # seconds of rounds those pairs take

    def words(self) -> str:
        """One line for the first screen."""
        five = (f"a ±5% answer for every ratio would take about {_duration(self.budget_5pct_s)}"
                if self.budget_5pct_s is not None else "no budget gives a ±5% answer at it")
        small = (f"{self.smallest:.0%}" if math.isfinite(self.smallest) else "no tax")
        return (f"at this host's noise (median pair spread {self.sd:.1%}), this budget can "
                f"decide a tax of about {small} or more ({self.pairs} pairs); {five}")

    def meta(self) -> dict[str, Any]:
        return {"sd": self.sd, "pairs": self.pairs, "smallest": _finite(self.smallest),
                "round_s": self.round_s, "pairs_5pct": self.pairs_5pct,
                "budget_5pct_s": self.budget_5pct_s}


def reach(sds: list[float], margins: list[float], round_s: float, budget_s: float,
          min_pairs: int) -> Reach | None:
    """The reach of a run whose ratios have pair spreads `sds` and margins `margins`, whose
    full round takes round_s seconds and whose budget is budget_s seconds of rounds in all.
    None without a spread."""
    spreads = [s for s in sds if s == s and s > 0]
    if not spreads or round_s <= 0:
        return None
    sd = statistics.median(spreads)
    margin = statistics.median(margins) if margins else 0.02
    pairs = max(min_pairs, int(budget_s // round_s))
    smallest = smallest_decidable(sd, pairs, margin, borrowed=NOTHING_BORROWED)
    need = pairs_for_half_width(sd, HALF_WIDTH)
    return Reach(sd, pairs, smallest, round_s, need,
                 need * round_s if need is not None else None)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
