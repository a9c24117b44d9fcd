"""The store interface: runs, environments, cells and samples. SQLite is the default backend;
PostgreSQL will implement the same interface. Reports read only from a store."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, RunStatus, Sample
from isotax.telemetry.summary import TelemetrySummary

SCHEMA_VERSION = 2  # 2: telemetry and run_meta tables


class StoreError(Exception):
    """A store problem the user can act on (missing run, newer schema, ...): one line."""


class DiskFull(StoreError):
    """The filesystem under `path` (a directory) had no room for `what` (the store, a report,
    a bundle). Whatever was being written is rolled back or removed: what was committed
    before stands, and the store stays whole. The caller says what to free and what to run
    next (isotax.host.facts.diskspace has the figures and the words)."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"no space left under {path} for {what}; free space there")
        self.path = path
        self.what = what


@dataclass(frozen=True)
class CellOutcome:
    """What one cell came to, as one typed object: the runner's _run_cell returns it and the
    store commits it, so that no part of it (the telemetry that watched the cell, where its
    time went) travels through the runner's attributes on the side."""

    status: CellStatus
    reason: str = ""  # why it did not pass ("" when it passed)
    samples: Sequence[Sample] = ()  # a passing cell's only
    # (summary, series) of the telemetry that watched a passing measured cell, else None
    telemetry: tuple[TelemetrySummary, Mapping[str, Any]] | None = None
    prepare_s: float = 0.0  # preparing its workload point (the first cell of it only)
    run_s: float = 0.0  # the workload running (inside the telemetry's watch)

    def __post_init__(self) -> None:
        if self.status is not CellStatus.OK and self.samples:
            raise ValueError(f"a cell that is {self.status.value} carries a reason, never "
                             "numbers")

    @classmethod
    def ended(cls, status: CellStatus, reason: str, prepare_s: float = 0.0,
              run_s: float = 0.0) -> CellOutcome:
        """A cell that did not pass: its status and reason, no numbers."""
        return cls(status, reason, prepare_s=prepare_s, run_s=run_s)


@dataclass(frozen=True)
class RunRecord:
    id: str
    created: float
    finished: float | None
    status: RunStatus
    plan_name: str
    plan_toml: str
    seed: int
    host: Mapping[str, Any]
    format_version: int


@dataclass(frozen=True)
class EnvRecord:
    run_id: str
    name: str
    kind: str
    available: bool
    reason: str
    describe: EnvironmentDescription  # stored as describe_json (its to_stored())
    tools: Mapping[str, str]
    milestones: Mapping[str, float]


@dataclass(frozen=True)
class CellRecord:
    id: int
    key: CellKey
    workload_version: str
    status: CellStatus
    reason: str
    started: float
    ended: float
    samples: Sequence[Sample]


# -- rows to records: what every backend's SELECTs give, in the tables' column order ---------

def run_record(row: Sequence[Any]) -> RunRecord:
    """A runs row (id, created, finished, status, plan_name, plan_toml, seed, host_json,
    format_version)."""
    try:
        status = RunStatus(row[3])
    except ValueError:
        raise StoreError(f"run {row[0]!r} has a status isotax does not know ({row[3]!r}); "
                         "it was not written by isotax") from None
    return RunRecord(row[0], row[1], row[2], status, row[4], row[5], row[6],
                     json.loads(row[7]), row[8])


def env_record(row: Sequence[Any]) -> EnvRecord:
    """An environments row (run_id, name, kind, available, reason, describe_json, tools_json,
    milestones_json)."""
    try:
        described = EnvironmentDescription.from_stored(json.loads(row[5]))
    except ValueError as e:
        raise StoreError(f"run {row[0]!r}, environment {row[1]!r}: its describe_json: {e}: "
                         "not a row isotax wrote") from None
    return EnvRecord(row[0], row[1], row[2], bool(row[3]), row[4], described,
                     json.loads(row[6]), json.loads(row[7]))


def cell_records(sample_rows: Iterable[Sequence[Any]],
                 cell_rows: Iterable[Sequence[Any]]) -> list[CellRecord]:
    """A run's cells with their samples: sample rows (cell_id, metric, value, unit,
    higher_is_better, labels_json) in order, cell rows (id, environment, workload,
    params_json, repetition, warmup, workload_version, status, reason, started, ended)."""
    samples: dict[int, list[Sample]] = {}
    for cid, metric, value, unit, hib, labels in sample_rows:
        samples.setdefault(int(cid), []).append(
            Sample(metric, value, unit, bool(hib), json.loads(labels)))
    out = []
    for r in cell_rows:
        key = CellKey(r[1], r[2], json.loads(r[3]), r[4], bool(r[5]))
        out.append(CellRecord(int(r[0]), key, r[6], CellStatus(r[7]), r[8], r[9], r[10],
                              tuple(samples.get(int(r[0]), []))))
    return out


def unknown_run(run_id: str, matches: int, recent: Sequence[RunRecord], where: str
                ) -> StoreError:
    """The error for a run id that names no run, or more than one by its prefix."""
    known = ", ".join(r.id for r in recent[-5:]) or "none yet"
    why = "is ambiguous" if matches else "is not in"
    return StoreError(f"run {run_id!r} {why} {where} (recent runs: {known}); "
                      "give a full id from `isotax runs`")


# Every store's SELECTs, in the column order the functions above read.
RUN_COLUMNS = ("id, created, finished, status, plan_name, plan_toml, seed, host_json, "
               "format_version")
ENV_COLUMNS = ("run_id, name, kind, available, reason, describe_json, tools_json, "
               "milestones_json")
SAMPLE_COLUMNS = "s.cell_id, s.metric, s.value, s.unit, s.higher_is_better, s.labels_json"
CELL_COLUMNS = ("id, environment, workload, params_json, repetition, warmup, workload_version,"
                " status, reason, started, ended")


class Store(Protocol):
    # created and format_version: now and this isotax's, unless a run is copied from another
    # store (store.transfer) with its own.
    def create_run(self, run_id: str, plan_name: str, plan_toml: str, seed: int,
                   host: Mapping[str, Any], created: float | None = None,
                   format_version: int | None = None) -> RunRecord: ...
    def get_run(self, run_id: str) -> RunRecord: ...
    def list_runs(self) -> list[RunRecord]: ...
    def set_run_status(self, run_id: str, status: RunStatus,
                       finished: float | None = None) -> None: ...
    def update_host(self, run_id: str, host: Mapping[str, Any]) -> None: ...
    def put_environment(self, env: EnvRecord) -> None: ...
    def environments(self, run_id: str) -> list[EnvRecord]: ...
    def commit_cell(self, run_id: str, key: CellKey, workload_version: str,
                    outcome: CellOutcome, started: float, ended: float) -> int: ...
    def telemetry(self, run_id: str) -> dict[int, TelemetrySummary]: ...
    def telemetry_series(self, cell_id: int) -> Mapping[str, Any]: ...
    # A value is checked against its key's schema (isotax.store.run_meta) unless verbatim
    # (a run copied between stores keeps what an older isotax stored).
    def put_run_meta(self, run_id: str, key: str, value: Any,
                     verbatim: bool = False) -> None: ...
    def run_meta(self, run_id: str) -> dict[str, Any]: ...
    def done_cells(self, run_id: str) -> set[str]: ...
    # The run's cells in commit order; those with an id above `after` only, where given (a
    # runner that keeps what it read asks for the new ones: isotax.run.rounds).
    def cells(self, run_id: str, after: int = 0) -> list[CellRecord]: ...
    def close(self) -> None: ...
