"""Each headline ratio's equivalence margin: the plan's, or "auto": the larger of 2% and this
host's A/A noise floor for the workload point.

The noise floor is what isotax.analysis.stats.aa_noise_floor says of the baseline's A/A copy
against the baseline (the farthest the A/A ratio's interval reaches from 1): from the run's
own copy when the plan has aa = true, else from the newest complete A/A run in the store of
the same host (same hostname, kernel, CPU model and count, memory). A point without its own
A/A ratio takes the largest floor of the same workload and metric. Verdicts stay valid with
a margin that moves as the A/A values come in: the confidence sequence covers the true ratio
at every round whatever the margin (isotax.analysis.verdicts).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from isotax.analysis.stats import aa_noise_floor, ratio
from isotax.analysis.verdicts import MIN_MARGIN
from isotax.model import CellStatus
from isotax.store.base import CellRecord, Store

RowKey = tuple[str, str, str]  # (workload, params_key, metric)

# The fingerprint facts that make two runs "this host" for a stored A/A run.
SAME_HOST = ("hostname", "kernel", "cpu_model", "cpus", "memory_mib")
# How many recent complete runs are searched for a stored A/A run.
SEARCHED_RUNS = 50


@dataclass(frozen=True)
class Margin:
    value: float  # a fraction: 0.02 for ±2%
    source: str  # in words: "plan", "A/A in this run", "A/A run 2026...", "minimum (no A/A run)"


def aa_floors(cells: Sequence[CellRecord], baseline: str, aa_env: str, seed: int
              ) -> dict[RowKey, float]:
    """Per row, the noise floor the A/A copy shows against the baseline (measured, OK cells)."""
    values: dict[tuple[str, RowKey], list[float]] = defaultdict(list)
    higher: dict[RowKey, bool] = {}
    for c in cells:
        if c.key.warmup or c.status is not CellStatus.OK or \
                c.key.environment not in (baseline, aa_env):
            continue
        for s in c.samples:
            row = (c.key.workload, c.key.params_key, s.metric)
            values[(c.key.environment, row)].append(s.value)
            higher[row] = s.higher_is_better
    floors = {}
    for row, up in higher.items():
        a, b = values.get((aa_env, row), []), values.get((baseline, row), [])
        if len(a) >= 2 and len(b) >= 2 and sum(b) != 0:
            floor = aa_noise_floor(ratio(a, b, up, seed=seed))
            if floor == floor:  # not NaN
                floors[row] = floor
    return floors


def same_host(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(a.get(k) is not None and a.get(k) == b.get(k) for k in SAME_HOST)


def stored_aa_floors(store: Store, host: Mapping[str, Any], exclude: str
                     ) -> tuple[dict[RowKey, float], str | None]:
    """The floors of the newest complete A/A run of this host in the store, and its id."""
    import tomllib

    for run in list(reversed(store.list_runs()))[:SEARCHED_RUNS]:  # newest first
        if run.id == exclude or run.status != "complete" or not same_host(run.host, host):
            continue
        try:
            plan = tomllib.loads(run.plan_toml)
        except tomllib.TOMLDecodeError:
            continue
        if not plan.get("aa"):
            continue
        base = str(plan.get("baseline", "native"))
        floors = aa_floors(store.cells(run.id), base, f"{base}-aa", int(run.seed))
        if floors:
            return floors, run.id
    return {}, None


class Margins:
    """The margin of every row of one run."""

    def __init__(self, plan_margin: float | str, in_run: Mapping[RowKey, float],
                 stored: Mapping[RowKey, float], stored_run: str | None) -> None:
        self.plan_margin = plan_margin
        self.in_run, self.stored, self.stored_run = in_run, stored, stored_run

    def __call__(self, row: RowKey) -> Margin:
        if not isinstance(self.plan_margin, str):
            return Margin(float(self.plan_margin), "plan")
        for floors, source in ((self.in_run, "A/A in this run"),
                               (self.stored, f"A/A run {self.stored_run}")):
            floor = floors.get(row)
            if floor is None:  # the workload's other points, same metric
                same = [f for (w, _, m), f in floors.items() if (w, m) == (row[0], row[2])]
                floor = max(same) if same else None
            if floor is not None:
                return (Margin(floor, source) if floor > MIN_MARGIN else
                        Margin(MIN_MARGIN, f"minimum (above the {source} floor)"))
        return Margin(MIN_MARGIN, "minimum (no A/A run of this host)")


def margins_for(store: Store, run_id: str, plan_margin: float | str, baseline: str,
                aa_env: str | None, seed: int, cells: Sequence[CellRecord] | None = None,
                stored: tuple[Mapping[RowKey, float], str | None] | None = None) -> Margins:
    """The run's margins: the plan's, or auto from its A/A copy (aa_env, when it has one) or
    a stored A/A run of its host (`stored`, when already looked up)."""
    if not isinstance(plan_margin, str):
        return Margins(plan_margin, {}, {}, None)
    in_run = aa_floors(cells if cells is not None else store.cells(run_id), baseline, aa_env,
                       seed) if aa_env else {}
    if stored is None:
        stored = stored_aa_floors(store, store.get_run(run_id).host, run_id) if not in_run \
            else ({}, None)
    return Margins(plan_margin, in_run, stored[0], stored[1])
