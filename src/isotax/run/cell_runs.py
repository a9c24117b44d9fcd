"""The runner's side of cell length (isotax.analysis.cell_length decides): a measured cell of a
short point runs its workload several times in a row and stores the mean of the runs.

The count is fixed per environment and point by the first measured cell there (its first
run's time), written to run_meta at once so that a resumed run, the report and this host's
later runs read the same count; warm-up cells run once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from isotax.analysis import cell_length
from isotax.model import CellKey, Sample
from isotax.store.base import Store


class CellRuns:
    def __init__(self, store: Store, run_id: str, cell_s: float, most: int,
                 meta: Mapping[str, Any]) -> None:
        self.store, self.run_id, self.cell_s, self.most = store, run_id, cell_s, most
        stored = meta.get(cell_length.META_KEY)
        self.decided: dict[str, int] = dict(stored) if isinstance(stored, Mapping) else {}

    def measure(self, key: CellKey, run: Callable[[], list[Sample]]) -> tuple[list[Sample], int]:
        """The cell's samples (the mean of its runs) and how many runs it held. A run that
        returns no samples ends the cell with none (it fails, as a single run would)."""
        k = cell_length.key(key.environment, key.workload, key.params_key)
        t0 = time.monotonic()
        first = run()
        if key.warmup or not first or self.cell_s <= 0:
            return first, 1
        if k not in self.decided:
            self.decided[k] = cell_length.runs_for(time.monotonic() - t0, self.cell_s, self.most)
            self.store.put_run_meta(self.run_id, cell_length.META_KEY, self.decided)
        runs = [first]
        for _ in range(self.decided[k] - 1):
            more = run()
            if not more:
                return [], len(runs) + 1
            runs.append(more)
        return cell_length.mean_of_runs(runs), len(runs)


def per_run(env_cpu: Sample | None, runs: int) -> Sample | None:
    """The environment's own CPU over a cell of `runs` runs, as one run's share (the cell's
    other samples are means of its runs too)."""
    if env_cpu is None or runs <= 1:
        return env_cpu
    labels = dict(env_cpu.labels)
    by = labels.get("by_program")
    if isinstance(by, Mapping):
        labels["by_program"] = {p: round(v / runs, 4) for p, v in by.items()}
    return replace(env_cpu, value=round(env_cpu.value / runs, 4), labels=labels)
