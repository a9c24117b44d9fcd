"""Per result (environment x workload point): the CPU a unit of work cost, and the suspected
limiter with its evidence, from the telemetry stored with each measured repetition."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from isotax.analysis import cost, limiter
from isotax.model import CellStatus
from isotax.store.base import CellRecord
from isotax.telemetry.summary import TelemetrySummary

Point = tuple[str, str, str]  # (environment, workload, params_key)


@dataclass(frozen=True)
class Explained:
    cost: cost.CostSummary | None
    limiter: limiter.Verdict
    repetitions: int  # watched repetitions the verdict and the cost come from


def explain(cells: Sequence[CellRecord], telemetry: Mapping[int, TelemetrySummary]
            ) -> dict[Point, Explained]:
    """Every point with telemetry, from its OK measured repetitions. Pure."""
    by_point: dict[Point, list[TelemetrySummary]] = defaultdict(list)
    for c in cells:
        if c.key.warmup or c.status is not CellStatus.OK or c.id not in telemetry:
            continue
        by_point[(c.key.environment, c.key.workload, c.key.params_key)].append(
            telemetry[c.id])
    out: dict[Point, Explained] = {}
    for point, summaries in by_point.items():
        costs = [x for x in (cost.split(s) for s in summaries) if x is not None]
        verdict = limiter.aggregate([limiter.suspect(s) for s in summaries])
        out[point] = Explained(cost.summarize(costs), verdict, len(summaries))
    return out
