"""The long format of a run: one row per cell x metric, every parameter its own column.

Where results.json and results.csv summarise (one row per point and metric, the repetitions
folded into n, mean and an interval), this is the raw material for an analysis of one's own:
every repetition, warm-ups included and flagged, failed and not-applicable cells included
with their status and reason (and no metric or value). `isotax export RUN --format long|parquet`
writes it and `isotax.load(RUN)` returns it as a pandas DataFrame (isotax.data).

Parameters are columns named PARAM_PREFIX + name (param_threads, param_level): the prefix
keeps them apart from the fixed columns whatever a workload names its parameters, and the
name stays usable in pandas' query() and as an attribute. A point without a parameter
another point has gets None there. Sample labels (latency CDFs, per-program CPU) are not
carried: results.json has the pooled CDFs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from isotax.model import Sample
from isotax.store.base import CellRecord, EnvRecord

PARAM_PREFIX = "param_"
# The fixed columns around the parameter columns, in order.
HEAD = ("run_id", "environment", "kind", "emulated", "workload")
TAIL = ("repetition", "warmup", "status", "reason", "metric", "value", "unit",
        "higher_is_better", "started", "ended")


@dataclass(frozen=True)
class LongTable:
    columns: tuple[str, ...]
    rows: list[dict[str, Any]]
    param_columns: tuple[str, ...]  # the columns that are parameters, in `columns` order


def is_emulated(env: EnvRecord | None) -> bool:
    """An environment under software emulation (TCG): its stored facts say so."""
    return bool(env and env.describe.facts.emulated)


def param_columns(params: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The column of every parameter any of `params` names, sorted by name."""
    return tuple(PARAM_PREFIX + k for k in sorted({k for p in params for k in p}))


def long_table(run_id: str, environments: Sequence[EnvRecord],
               cells: Sequence[CellRecord]) -> LongTable:
    """A run's cells in the long format, in the store's order of cells and samples. Pure."""
    envs = {e.name: e for e in environments}
    params = param_columns(c.key.params for c in cells)
    rows = []
    for c in cells:
        env = envs.get(c.key.environment)
        fixed = {"run_id": run_id, "environment": c.key.environment,
                 "kind": env.kind if env else None, "emulated": is_emulated(env),
                 "workload": c.key.workload,
                 **{col: c.key.params.get(col[len(PARAM_PREFIX):]) for col in params},
                 "repetition": c.key.repetition, "warmup": c.key.warmup,
                 "status": c.status.value, "reason": c.reason,
                 "started": c.started, "ended": c.ended}
        # A cell without samples (failed, n/a) is still a row: its absence is a result too.
        samples: Sequence[Sample | None] = c.samples or [None]
        for s in samples:
            rows.append({**fixed,
                         "metric": s.metric if s else None, "value": s.value if s else None,
                         "unit": s.unit if s else None,
                         "higher_is_better": s.higher_is_better if s else None})
    return LongTable((*HEAD, *params, *TAIL), rows, params)
