"""Each point's headline value by repetition: what the paired verdicts
(isotax.analysis.sequential) and the borrowed spreads (isotax.analysis.borrowing) read."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from isotax.model import CellStatus
from isotax.protocols import headline_metric
from isotax.store.base import CellRecord
from isotax.telemetry import envcpu

# (environment, workload, params_key): what one cell of a round measures.
Point = tuple[str, str, str]


def headline_values(cells: Iterable[CellRecord]
                    ) -> tuple[dict[Point, dict[int, float]], dict[tuple[str, str], str],
                               dict[tuple[str, str], bool]]:
    """Per point, its headline value by repetition (measured, passing cells); the headline
    metric and its direction per (workload, params_key)."""
    ok = [c for c in cells if not c.key.warmup and c.status is CellStatus.OK]
    seen: dict[tuple[str, str], list[str]] = defaultdict(list)
    for c in ok:
        names = seen[(c.key.workload, c.key.params_key)]
        names += [s.metric for s in c.samples if s.metric not in names
                  and s.metric != envcpu.METRIC]
    metric = {k: headline_metric(k[0], v) for k, v in seen.items()}
    values: dict[Point, dict[int, float]] = defaultdict(dict)
    higher: dict[tuple[str, str], bool] = {}
    for c in ok:
        want = metric[(c.key.workload, c.key.params_key)]
        for s in c.samples:
            if s.metric == want:
                values[(c.key.environment, c.key.workload, c.key.params_key)][
                    c.key.repetition] = s.value
                higher[(c.key.workload, c.key.params_key)] = s.higher_is_better
    return dict(values), metric, higher
