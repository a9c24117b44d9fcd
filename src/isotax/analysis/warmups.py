"""Whether the warm-ups differed from the measured runs: per environment and warmed-up point,
the warm-up's headline value against the same point's measured values.

A warm-up "differed" when its value lies outside the measured values' range and more than
three of their standard deviations from their mean: the first run paid for something the
others did not (cold caches, a JIT, a dataset loaded), which is what the warm-up is for. When
none differ the plan could do without warm-ups; when many do, one may not be enough. Pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from isotax.analysis.sequential import headline_values
from isotax.model import CellStatus
from isotax.store.base import CellRecord

SDS = 3.0  # how many measured standard deviations away a differing warm-up is, at least


@dataclass(frozen=True)
class WarmupCheck:
    environment: str
    workload: str
    params_key: str
    metric: str
    warmup: float  # the (first) warm-up's headline value
    mean: float  # of the measured values
    sd: float
    n: int
    differed: bool

    @property
    def ratio(self) -> float:
        """warm-up / measured mean."""
        return self.warmup / self.mean if self.mean else float("nan")


def check(cells: Sequence[CellRecord]) -> list[WarmupCheck]:
    """One check per environment x point that has a passing warm-up and 2 or more passing
    measured values, in the order the warm-ups ran."""
    measured, metric, _ = headline_values(cells)
    out = []
    seen: set[tuple[str, str, str]] = set()
    for c in cells:
        point = (c.key.environment, c.key.workload, c.key.params_key)
        if not c.key.warmup or c.status is not CellStatus.OK or point in seen:
            continue
        name = metric.get((c.key.workload, c.key.params_key))
        value = next((s.value for s in c.samples if s.metric == name), None)
        values = list(measured.get(point, {}).values())
        if value is None or len(values) < 2:
            continue
        seen.add(point)
        mean, sd = statistics.fmean(values), statistics.stdev(values)
        outside = value < min(values) or value > max(values)
        out.append(WarmupCheck(*point, name or "", value, mean, sd, len(values),
                               outside and abs(value - mean) > SDS * sd))
    return out
