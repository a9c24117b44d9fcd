"""Whether the warm-ups differed from the measured runs: per environment and warmed-up point,
the warm-up's headline value against the same point's measured values.

A warm-up "differed" when its value lies outside the measured values' range and more than
three of their standard deviations from their mean: the first run paid for something the
others did not (cold caches, a JIT, a dataset loaded), which is what the warm-up is for. When
none differ the plan could do without warm-ups; when many do, one may not be enough.

`unneeded` reads that from this host's stored runs: with the plan's warmups_from = "history"
(the default) an environment x workload whose newest stored warm-up did not differ is not
warmed up again (a warm-up is a whole unmeasured cell: 21% of a quick run's time).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from isotax.analysis.headline import headline_values
from isotax.analysis.margins import host_history
from isotax.model import CellStatus
from isotax.store.base import CellRecord, Store

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


def unneeded(store: Store, host: Mapping[str, Any], exclude: str, kinds: Mapping[str, str]
             ) -> dict[tuple[str, str], str]:
    """Per (environment, workload) of this run (`kinds`: name -> kind) whose warm-up this
    host's history says is not needed, why: in the newest complete run of the same host
    where that environment (same name and kind) warmed that workload up, no warm-up of it
    differed from its measured runs. No history, or one that differed: it is warmed up."""
    out: dict[tuple[str, str], str] = {}
    decided: set[tuple[str, str]] = set()
    for run in host_history(store, host, exclude):
        theirs = {e.name: e.kind for e in store.environments(run.id)}
        same = {n for n, k in kinds.items() if theirs.get(n) == k}
        if not same:
            continue
        by: dict[tuple[str, str], list[bool]] = {}
        for w in check(store.cells(run.id)):
            if w.environment in same:
                by.setdefault((w.environment, w.workload), []).append(w.differed)
        for key, differed in by.items():
            if key in decided:
                continue
            decided.add(key)
            if not any(differed):
                out[key] = f"its warm-up in run {run.id} did not differ from its measured runs"
    return out
