"""The store interface: runs, environments, cells and samples. SQLite is the default backend;
PostgreSQL will implement the same interface. Reports read only from a store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from isotax.model import CellKey, CellStatus, Sample
from isotax.telemetry.summary import TelemetrySummary

SCHEMA_VERSION = 2  # 2: telemetry and run_meta tables


class StoreError(Exception):
    """A store problem the user can act on (missing run, newer schema, ...): one line."""


class DiskFull(StoreError):
    """The filesystem under `path` (a directory) had no room for `what` (the store, a report,
    a bundle). Whatever was being written is rolled back or removed: what was committed
    before stands, and the store stays whole. The caller says what to free and what to run
    next (isotax.host.diskspace has the figures and the words)."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"no space left under {path} for {what}; free space there")
        self.path = path
        self.what = what


@dataclass(frozen=True)
class RunRecord:
    id: str
    created: float
    finished: float | None
    status: str  # running | complete | interrupted | failed
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
    describe: Mapping[str, Any]
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


class Store(Protocol):
    def create_run(self, run_id: str, plan_name: str, plan_toml: str, seed: int,
                   host: Mapping[str, Any]) -> RunRecord: ...
    def get_run(self, run_id: str) -> RunRecord: ...
    def list_runs(self) -> list[RunRecord]: ...
    def set_run_status(self, run_id: str, status: str, finished: float | None = None) -> None: ...
    def update_host(self, run_id: str, host: Mapping[str, Any]) -> None: ...
    def put_environment(self, env: EnvRecord) -> None: ...
    def environments(self, run_id: str) -> list[EnvRecord]: ...
    def commit_cell(self, run_id: str, key: CellKey, workload_version: str, status: CellStatus,
                    reason: str, started: float, ended: float,
                    samples: Sequence[Sample],
                    telemetry: tuple[TelemetrySummary, Mapping[str, Any]] | None = None
                    ) -> int: ...
    def telemetry(self, run_id: str) -> dict[int, TelemetrySummary]: ...
    def telemetry_series(self, cell_id: int) -> Mapping[str, Any]: ...
    def put_run_meta(self, run_id: str, key: str, value: Any) -> None: ...
    def run_meta(self, run_id: str) -> dict[str, Any]: ...
    def done_cells(self, run_id: str) -> set[str]: ...
    def cells(self, run_id: str) -> list[CellRecord]: ...
    def close(self) -> None: ...
