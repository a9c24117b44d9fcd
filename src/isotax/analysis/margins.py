"""Each headline ratio's equivalence margin: the plan's, or "auto": the larger of 2% and this
host's A/A noise floor for the workload point, at most MAX_AUTO_MARGIN.

The noise floor is how far from 1 the A/A copy's ratio to the baseline may lie: the farther
end of the 95% t interval of the mean of its paired log ratios (the A/A copy's value over
the baseline's of the same round; a fixed-n interval: the A/A run it comes from is complete,
or is this run's canary, read as it stands). It needs 3 pairs. The floor comes from the newest
complete A/A run in the store of the same host (same hostname, kernel, CPU model and count,
memory), looked up once when the run starts, so every verdict of a run is judged against
the same margin; the run's own canary (aa = true) stands in only where no stored A/A run of
this host has the point. Never from the pairs being judged. A point without a floor of its
own takes the largest floor of the same workload and metric.

A floor above MAX_AUTO_MARGIN (10%) does not widen the margin further: at that noise the
point's "equivalent" would say little; its margin stays 10% and the source says the floor was
above it. Verdicts stay valid with a margin that moves as the canary's values come in: the
confidence sequence covers the true ratio at every round whatever the margin
(isotax.analysis.verdicts).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from isotax.analysis import cell_length
from isotax.analysis.verdicts import MIN_MARGIN, pair_by_round
from isotax.model import CellStatus, RunStatus
from isotax.plan import read_stored_plan
from isotax.store.base import CellRecord, RunRecord, Store

RowKey = tuple[str, str, str]  # (workload, params_key, metric)

# The fingerprint facts that make two runs "this host" for a stored A/A run.
SAME_HOST = ("hostname", "kernel", "cpu_model", "cpus", "memory_mib")
# How many recent complete runs are searched for a stored A/A run.
SEARCHED_RUNS = 50
# The widest margin "auto" gives (the module docstring says why).
MAX_AUTO_MARGIN = 0.10
# Pairs an A/A floor needs (the t interval at 2 pairs is 12.7 standard errors wide).
MIN_AA_PAIRS = 3
# A margin's source when it is the floor of this run's own canary.
IN_RUN = "this run's A/A canary"


@dataclass(frozen=True)
class Margin:
    value: float  # a fraction: 0.02 for ±2%
    source: str  # in words: "plan", "A/A in this run", "A/A run 2026...", "minimum (no A/A run)"

    @property
    def from_this_run(self) -> bool:
        """Taken from this run's own cells (its canary's floor), not fixed before them."""
        return IN_RUN in self.source


def aa_floors(cells: Sequence[CellRecord], baseline: str, aa_env: str
              ) -> dict[RowKey, float]:
    """Per row, the noise floor the A/A copy shows against the baseline (measured, OK cells,
    paired by round): max |ratio - 1| over the 95% t interval of the paired log ratios."""
    values: dict[tuple[str, RowKey], dict[int, float]] = defaultdict(dict)
    for c in cells:
        if c.key.warmup or c.status is not CellStatus.OK or \
                c.key.environment not in (baseline, aa_env):
            continue
        for s in c.samples:
            row = (c.key.workload, c.key.params_key, s.metric)
            values[(c.key.environment, row)][c.key.repetition] = s.value
    floors = {}
    for (env, row), by_rep in values.items():
        if env != aa_env:
            continue
        d = pair_by_round(by_rep, values.get((baseline, row), {}))
        if len(d) >= MIN_AA_PAIRS:
            floors[row] = paired_floor(d)
    return floors


def paired_floor(d: Sequence[float]) -> float:
    """max |ratio - 1| over the 95% t interval of the mean of the paired log ratios d."""
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
    return max(abs(math.expm1(mean - half)), abs(math.expm1(mean + half)))


def same_host(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return all(a.get(k) is not None and a.get(k) == b.get(k) for k in SAME_HOST)


def host_history(store: Store, host: Mapping[str, Any], exclude: str) -> Iterator[RunRecord]:
    """The complete runs of this host (same_host) among the store's SEARCHED_RUNS newest,
    newest first, but `exclude` (the run asking): what the stored A/A floors, the borrowed
    spreads, the warm-ups and the start-of-run hint read."""
    for run in list(reversed(store.list_runs()))[:SEARCHED_RUNS]:
        if run.id != exclude and run.status == RunStatus.COMPLETE and same_host(run.host, host):
            yield run


def stored_aa_floors(store: Store, host: Mapping[str, Any], exclude: str,
                     today: Mapping[str, Any] | None = None, baseline: str | None = None
                     ) -> tuple[dict[RowKey, float], str | None]:
    """The floors of the newest complete A/A run of this host in the store, and its id with
    the day it ran ("20261126-2210-quick-ab12 (2026-11-26)"). With `today` (the asking run's
    run_meta), only the points whose cells held as many runs there as today (cell_length):
    a floor measured with other cells is another quantity. With `baseline`, only runs of
    that baseline (an A/A floor is its baseline's noise: runc measured twice says nothing
    of native's)."""

    for run in host_history(store, host, exclude):
        plan = read_stored_plan(run.plan_toml)
        if plan.canary is None:
            continue
        base = plan.baseline
        if baseline is not None and base != baseline:
            continue
        floors = aa_floors(store.cells(run.id), base, plan.canary)
        if today is not None:
            meta = store.run_meta(run.id)
            floors = {r: f for r, f in floors.items()
                      if cell_length.same(meta, today, (base, plan.canary), r[0], r[1])}
        if floors:
            day = time.strftime("%Y-%m-%d", time.localtime(run.finished or run.created))
            return floors, f"{run.id} ({day})"
    return {}, None


class Margins:
    """The margin of every row of one run."""

    def __init__(self, plan_margin: float | str, in_run: Mapping[RowKey, float],
                 stored: Mapping[RowKey, float], stored_run: str | None,
                 canary: str | None = None) -> None:
        self.plan_margin = plan_margin
        self.in_run, self.stored, self.stored_run = in_run, stored, stored_run
        self.canary = canary  # the run's A/A copy: never judged against its own floor

    def __call__(self, row: RowKey, environment: str = "") -> Margin:
        if not isinstance(self.plan_margin, str):
            return Margin(float(self.plan_margin), "plan")
        own = {} if environment == self.canary else self.in_run
        # The stored A/A run first: looked up when the run started, it does not move.
        for floors, source in ((self.stored, f"A/A run {self.stored_run}"),
                               (own, IN_RUN)):
            floor = floors.get(row)
            if floor is None:  # the workload's other points, same metric
                same = [f for (w, _, m), f in floors.items() if (w, m) == (row[0], row[2])]
                floor = max(same) if same else None
            if floor is None:
                continue
            if floor > MAX_AUTO_MARGIN:
                return Margin(MAX_AUTO_MARGIN, f"maximum (the floor of {source}, "
                                               f"±{floor:.0%}, is above it)")
            return (Margin(floor, source) if floor > MIN_MARGIN else
                    Margin(MIN_MARGIN, f"minimum (above the floor of {source})"))
        return Margin(MIN_MARGIN, "minimum (no A/A run of this host)")


def margins_for(store: Store, run_id: str, plan_margin: float | str, baseline: str,
                aa_env: str | None, cells: Sequence[CellRecord] | None = None,
                stored: tuple[Mapping[RowKey, float], str | None] | None = None) -> Margins:
    """The run's margins: the plan's, or auto from its A/A copy (aa_env, when it has one) or
    a stored A/A run of its host (`stored`, when already looked up)."""
    if not isinstance(plan_margin, str):
        return Margins(plan_margin, {}, {}, None)
    in_run = aa_floors(cells if cells is not None else store.cells(run_id), baseline,
                       aa_env) if aa_env else {}
    if stored is None:
        stored = stored_aa_floors(store, store.get_run(run_id).host, run_id,
                                  store.run_meta(run_id), baseline)
    return Margins(plan_margin, in_run, stored[0], stored[1], aa_env)
