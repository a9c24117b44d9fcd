"""The store protocol in SQL, once, for both backends (isotax.store.sqlite, .postgres): every
statement is written here with `?` placeholders, and each backend says how it runs one
(`_exec`, `_many`: SQLite's own `?`, psycopg's `%s`), opens a transaction (`_tx`) and orders a
run's environments (`ENV_ORDER`: SQLite's rowid, PostgreSQL's identity column). The SQL is
what both speak: upserts as INSERT ... ON CONFLICT DO UPDATE, a new cell's id by RETURNING
(SQLite 3.35 and later), booleans as Python bools (SQLite stores them as 0 and 1).

A replaced environment is deleted and inserted again, so it is listed where it was last put
(a restarted environment last), in both stores alike."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

from isotax.model import FORMAT_VERSION, CellKey, RunStatus
from isotax.store import run_meta
from isotax.store.base import (
    CELL_COLUMNS,
    ENV_COLUMNS,
    RUN_COLUMNS,
    SAMPLE_COLUMNS,
    SCHEMA_VERSION,
    CellOutcome,
    CellRecord,
    EnvRecord,
    RunRecord,
    StoreError,
    cell_records,
    env_record,
    run_record,
    unknown_run,
)
from isotax.telemetry.summary import TelemetrySummary


class Rows(Protocol):
    """What a backend's `_exec` gives back: a cursor's fetchone and fetchall."""

    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class SqlStore:
    """The store's methods; a backend subclass supplies the four hooks below and `where`
    (the store's name in messages: a path, or a URL without its password)."""

    ENV_ORDER: ClassVar[str]  # the column that orders a run's environments as they were put
    where: str

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        raise NotImplementedError

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        raise NotImplementedError

    def _tx(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # the schema's version
    def _check_schema_version(self) -> None:
        """Refuse a store of a newer schema; record this one's where it changed (older
        schemas only lack tables, which CREATE TABLE IF NOT EXISTS just added; written only
        when it changes, so a store on a full disk still opens for reading)."""
        row = self._exec("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is not None and int(row[0]) > SCHEMA_VERSION:
            raise StoreError(f"{self.where} has schema version {row[0]}, newer than this "
                             f"isotax ({SCHEMA_VERSION}); upgrade isotax to read it")
        if row is None or int(row[0]) != SCHEMA_VERSION:
            self._exec("INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT (key) "
                       "DO UPDATE SET value = excluded.value", (str(SCHEMA_VERSION),))

    # runs
    def create_run(self, run_id: str, plan_name: str, plan_toml: str, seed: int,
                   host: Mapping[str, Any], created: float | None = None,
                   format_version: int | None = None) -> RunRecord:
        now = time.time() if created is None else created
        with self._tx():
            self._exec("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)",
                       (run_id, now, None, RunStatus.RUNNING.value, plan_name, plan_toml, seed,
                        json.dumps(dict(host)), format_version or FORMAT_VERSION))
        return self.get_run(run_id)

    def get_run(self, run_id: str) -> RunRecord:
        row = self._exec(f"SELECT {RUN_COLUMNS} FROM runs WHERE id=?", (run_id,)).fetchone()
        if row is None:
            # A unique prefix will do, as git does for commits.
            rows = self._exec(f"SELECT {RUN_COLUMNS} FROM runs WHERE substr(id, 1, ?) = ? "
                              "ORDER BY created", (len(run_id), run_id)).fetchall()
            if len(rows) == 1:
                return run_record(rows[0])
            raise unknown_run(run_id, len(rows), self.list_runs(), self.where)
        return run_record(row)

    def list_runs(self) -> list[RunRecord]:
        return [run_record(r) for r in
                self._exec(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY created").fetchall()]

    def set_run_status(self, run_id: str, status: RunStatus,
                       finished: float | None = None) -> None:
        with self._tx():
            self._exec("UPDATE runs SET status=?, finished=? WHERE id=?",
                       (RunStatus(status).value, finished, run_id))

    def update_host(self, run_id: str, host: Mapping[str, Any]) -> None:
        with self._tx():
            self._exec("UPDATE runs SET host_json=? WHERE id=?", (json.dumps(dict(host)), run_id))

    def delete_run(self, run_id: str) -> None:
        with self._tx():
            self._exec("DELETE FROM runs WHERE id=?", (run_id,))

    # environments
    def put_environment(self, env: EnvRecord) -> None:
        with self._tx():
            self._exec("DELETE FROM environments WHERE run_id=? AND name=?",
                       (env.run_id, env.name))
            self._exec("INSERT INTO environments (run_id, name, kind, available, reason, "
                       "describe_json, tools_json, milestones_json) VALUES (?,?,?,?,?,?,?,?)",
                       (env.run_id, env.name, env.kind, bool(env.available), env.reason,
                        json.dumps(env.describe.to_stored()), json.dumps(dict(env.tools)),
                        json.dumps(dict(env.milestones))))

    def environments(self, run_id: str) -> list[EnvRecord]:
        return [env_record(r) for r in self._exec(
            f"SELECT {ENV_COLUMNS} FROM environments WHERE run_id=? ORDER BY {self.ENV_ORDER}",
            (run_id,)).fetchall()]

    # cells and samples
    def commit_cell(self, run_id: str, key: CellKey, workload_version: str,
                    outcome: CellOutcome, started: float, ended: float) -> int:
        """One cell, its samples and (summary, series) telemetry, in one transaction."""
        # (a cell that did not pass carries no numbers: CellOutcome refuses them)
        telemetry = outcome.telemetry
        with self._tx():
            rows = self._exec(
                "INSERT INTO cells (run_id, ident, environment, workload, workload_version,"
                " params_json, repetition, warmup, status, reason, started, ended)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id",
                (run_id, key.ident, key.environment, key.workload, workload_version,
                 json.dumps(dict(key.params), sort_keys=True), key.repetition,
                 bool(key.warmup), outcome.status.value, outcome.reason, started, ended),
            ).fetchall()  # all of it: SQLite ends the statement only when read to its end
            cell_id = int(rows[0][0])
            if outcome.samples:
                self._many("INSERT INTO samples (cell_id, metric, value, unit, "
                           "higher_is_better, labels_json) VALUES (?,?,?,?,?,?)",
                           [(cell_id, s.metric, s.value, s.unit, bool(s.higher_is_better),
                             json.dumps(dict(s.labels), sort_keys=True))
                            for s in outcome.samples])
            if telemetry is not None:
                self._exec("INSERT INTO telemetry VALUES (?,?,?)",
                           (cell_id, json.dumps(telemetry[0].to_json()),
                            json.dumps(dict(telemetry[1]))))
        return cell_id

    def telemetry(self, run_id: str) -> dict[int, TelemetrySummary]:
        """cell id -> telemetry summary, for every cell of the run that has one."""
        return {int(cid): TelemetrySummary.from_json(json.loads(s)) for cid, s in self._exec(
            "SELECT t.cell_id, t.summary_json FROM telemetry t JOIN cells c ON c.id = t.cell_id"
            " WHERE c.run_id=?", (run_id,)).fetchall()}

    def telemetry_series(self, cell_id: int) -> Mapping[str, Any]:
        """The sampled series of one cell ({} when it has none)."""
        row = self._exec("SELECT series_json FROM telemetry WHERE cell_id=?",
                         (cell_id,)).fetchone()
        return json.loads(row[0]) if row else {}

    # run metadata
    def put_run_meta(self, run_id: str, key: str, value: Any,
                     verbatim: bool = False) -> None:
        if not verbatim:
            run_meta.check(key, value)
        with self._tx():
            self._exec("INSERT INTO run_meta VALUES (?,?,?) ON CONFLICT (run_id, key) "
                       "DO UPDATE SET value_json = excluded.value_json",
                       (run_id, key, json.dumps(value)))

    def run_meta(self, run_id: str) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self._exec(
            "SELECT key, value_json FROM run_meta WHERE run_id=?", (run_id,)).fetchall()}

    def done_cells(self, run_id: str) -> set[str]:
        return {r[0] for r in self._exec("SELECT ident FROM cells WHERE run_id=?",
                                         (run_id,)).fetchall()}

    def cells(self, run_id: str, after: int = 0) -> list[CellRecord]:
        return cell_records(
            self._exec(f"SELECT {SAMPLE_COLUMNS} FROM samples s JOIN cells c ON "
                       "c.id = s.cell_id WHERE c.run_id=? AND c.id>? ORDER BY s.id",
                       (run_id, after)).fetchall(),
            self._exec(f"SELECT {CELL_COLUMNS} FROM cells WHERE run_id=? AND id>? "
                       "ORDER BY id", (run_id, after)).fetchall())
