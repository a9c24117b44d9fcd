"""SQLite store: one file, WAL journal, one transaction per cell so a crash loses at most the
cell in flight. Foreign keys cascade, so deleting a run removes all its rows."""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
    DiskFull,
    EnvRecord,
    RunRecord,
    StoreError,
    cell_records,
    env_record,
    run_record,
    unknown_run,
)
from isotax.telemetry.summary import TelemetrySummary

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created REAL NOT NULL,
    finished REAL,
    status TEXT NOT NULL,
    plan_name TEXT NOT NULL,
    plan_toml TEXT NOT NULL,
    seed INTEGER NOT NULL,
    host_json TEXT NOT NULL,
    format_version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS environments (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    available INTEGER NOT NULL,
    reason TEXT NOT NULL,
    describe_json TEXT NOT NULL,
    tools_json TEXT NOT NULL,
    milestones_json TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS cells (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    ident TEXT NOT NULL,
    environment TEXT NOT NULL,
    workload TEXT NOT NULL,
    workload_version TEXT NOT NULL,
    params_json TEXT NOT NULL,
    repetition INTEGER NOT NULL,
    warmup INTEGER NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL NOT NULL,
    UNIQUE (run_id, ident)
);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY,
    cell_id INTEGER NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
    metric TEXT NOT NULL,
    value REAL NOT NULL,
    unit TEXT NOT NULL,
    higher_is_better INTEGER NOT NULL,
    labels_json TEXT NOT NULL
);
-- What the host did while a measured cell ran (telemetry.sampler): a summary the report reads,
-- and the sampled series, read only on demand. Schema 2.
CREATE TABLE IF NOT EXISTS telemetry (
    cell_id INTEGER PRIMARY KEY REFERENCES cells(id) ON DELETE CASCADE,
    summary_json TEXT NOT NULL,
    series_json TEXT NOT NULL
);
-- Facts about a run decided while it ran (e.g. how its added rounds ended). Schema 2.
CREATE TABLE IF NOT EXISTS run_meta (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value_json TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX IF NOT EXISTS cells_run ON cells(run_id);
CREATE INDEX IF NOT EXISTS samples_cell ON samples(cell_id);
"""


class SQLiteStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            full = full_disk(e, path.parent, _what(path))
            if full is None:
                raise
            raise full from e
        try:
            self._open()
        except (OSError, sqlite3.Error) as e:
            self.db.close()
            full = full_disk(e, path.parent, _what(path))
            if full is None:
                raise
            raise full from e
        except StoreError:
            self.db.close()
            raise

    def _open(self) -> None:
        path = self.path
        self.db.execute("PRAGMA foreign_keys = ON")
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = FULL")
        # executescript commits on its own, so it runs outside a transaction of ours.
        self.db.executescript(_SCHEMA)
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if row is not None and int(row[0]) > SCHEMA_VERSION:
            raise StoreError(
                f"{path} has schema version {row[0]}, newer than this isotax ({SCHEMA_VERSION});"
                " upgrade isotax to read it"
            )
        # Older schemas only lack tables, which CREATE TABLE IF NOT EXISTS just added. Written
        # only when it changes: a store on a full disk still opens for reading.
        if row is None or int(row[0]) != SCHEMA_VERSION:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                            (str(SCHEMA_VERSION),))

    def _tx(self) -> _Tx:
        return _Tx(self.db, self.path)

    # runs
    def create_run(self, run_id: str, plan_name: str, plan_toml: str, seed: int,
                   host: Mapping[str, Any], created: float | None = None,
                   format_version: int | None = None) -> RunRecord:
        now = time.time() if created is None else created
        with self._tx():
            self.db.execute(
                "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)",
                (run_id, now, None, RunStatus.RUNNING.value, plan_name, plan_toml, seed,
                 json.dumps(dict(host)), format_version or FORMAT_VERSION),
            )
        return self.get_run(run_id)

    def get_run(self, run_id: str) -> RunRecord:
        row = self.db.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE id=?", (run_id,)
                              ).fetchone()
        if row is None:
            # Accept a unique prefix, as git does for commits.
            rows = self.db.execute(
                f"SELECT {RUN_COLUMNS} FROM runs WHERE substr(id, 1, ?) = ? ORDER BY created",
                (len(run_id), run_id)).fetchall()
            if len(rows) == 1:
                return run_record(rows[0])
            raise unknown_run(run_id, len(rows), self.list_runs(), str(self.path))
        return run_record(row)

    def list_runs(self) -> list[RunRecord]:
        rows = self.db.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY created").fetchall()
        return [run_record(r) for r in rows]

    def set_run_status(self, run_id: str, status: RunStatus,
                       finished: float | None = None) -> None:
        with self._tx():
            self.db.execute("UPDATE runs SET status=?, finished=? WHERE id=?",
                            (status, finished, run_id))

    def update_host(self, run_id: str, host: Mapping[str, Any]) -> None:
        with self._tx():
            self.db.execute("UPDATE runs SET host_json=? WHERE id=?",
                            (json.dumps(dict(host)), run_id))

    def delete_run(self, run_id: str) -> None:
        with self._tx():
            self.db.execute("DELETE FROM runs WHERE id=?", (run_id,))

    # environments
    def put_environment(self, env: EnvRecord) -> None:
        with self._tx():
            self.db.execute(
                "INSERT OR REPLACE INTO environments VALUES (?,?,?,?,?,?,?,?)",
                (env.run_id, env.name, env.kind, int(env.available), env.reason,
                 json.dumps(dict(env.describe)), json.dumps(dict(env.tools)),
                 json.dumps(dict(env.milestones))),
            )

    def environments(self, run_id: str) -> list[EnvRecord]:
        rows = self.db.execute(
            f"SELECT {ENV_COLUMNS} FROM environments WHERE run_id=? ORDER BY rowid", (run_id,)
        ).fetchall()
        return [env_record(r) for r in rows]

    # cells and samples
    def commit_cell(self, run_id: str, key: CellKey, workload_version: str,
                    outcome: CellOutcome, started: float, ended: float) -> int:
        """One cell, its samples and (summary, series) telemetry, in one transaction."""
        # (a cell that did not pass carries no numbers: CellOutcome refuses them)
        telemetry = outcome.telemetry
        with self._tx():
            cur = self.db.execute(
                "INSERT INTO cells (run_id, ident, environment, workload, workload_version,"
                " params_json, repetition, warmup, status, reason, started, ended)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (run_id, key.ident, key.environment, key.workload, workload_version,
                 json.dumps(dict(key.params), sort_keys=True), key.repetition, int(key.warmup),
                 outcome.status.value, outcome.reason, started, ended),
            )
            cell_id = int(cur.lastrowid or 0)
            self.db.executemany(
                "INSERT INTO samples (cell_id, metric, value, unit, higher_is_better,"
                " labels_json) VALUES (?,?,?,?,?,?)",
                [(cell_id, s.metric, s.value, s.unit, int(s.higher_is_better),
                  json.dumps(dict(s.labels), sort_keys=True)) for s in outcome.samples],
            )
            if telemetry is not None:
                self.db.execute("INSERT INTO telemetry VALUES (?,?,?)",
                                (cell_id, json.dumps(telemetry[0].to_json()),
                                 json.dumps(dict(telemetry[1]))))
        return cell_id

    def telemetry(self, run_id: str) -> dict[int, TelemetrySummary]:
        """cell id -> telemetry summary, for every cell of the run that has one."""
        return {cid: TelemetrySummary.from_json(json.loads(s)) for cid, s in self.db.execute(
            "SELECT t.cell_id, t.summary_json FROM telemetry t JOIN cells c ON c.id = t.cell_id"
            " WHERE c.run_id=?", (run_id,))}

    def telemetry_series(self, cell_id: int) -> Mapping[str, Any]:
        """The sampled series of one cell ({} when it has none)."""
        row = self.db.execute("SELECT series_json FROM telemetry WHERE cell_id=?",
                              (cell_id,)).fetchone()
        return json.loads(row[0]) if row else {}

    # run metadata
    def put_run_meta(self, run_id: str, key: str, value: Any,
                     verbatim: bool = False) -> None:
        if not verbatim:
            run_meta.check(key, value)
        with self._tx():
            self.db.execute("INSERT OR REPLACE INTO run_meta VALUES (?,?,?)",
                            (run_id, key, json.dumps(value)))

    def run_meta(self, run_id: str) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self.db.execute(
            "SELECT key, value_json FROM run_meta WHERE run_id=?", (run_id,))}

    def done_cells(self, run_id: str) -> set[str]:
        rows = self.db.execute("SELECT ident FROM cells WHERE run_id=?", (run_id,)).fetchall()
        return {r[0] for r in rows}

    def cells(self, run_id: str, after: int = 0) -> list[CellRecord]:
        return cell_records(
            self.db.execute(f"SELECT {SAMPLE_COLUMNS} FROM samples s JOIN cells c ON "
                            "c.id = s.cell_id WHERE c.run_id=? AND c.id>? ORDER BY s.id",
                            (run_id, after)),
            self.db.execute(f"SELECT {CELL_COLUMNS} FROM cells WHERE run_id=? AND id>? "
                            "ORDER BY id", (run_id, after)))

    def close(self) -> None:
        self.db.close()


class _Tx:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (Ctrl-C included). A full
    disk, at any step (the COMMIT included), ends in DiskFull once the transaction is rolled
    back: every transaction committed before stands, and the store stays whole."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db = db
        self.path = path

    def __enter__(self) -> None:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            full = full_disk(e, self.path.parent, _what(self.path))
            if full is None:
                raise
            raise full from e

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            try:
                self.db.execute("COMMIT")
                return
            except sqlite3.Error as e:
                failed: BaseException = e
        else:
            failed = exc
        # SQLite rolls back on its own after some errors (a full disk among them).
        if self.db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")
        full = full_disk(failed, self.path.parent, _what(self.path))
        if full is not None:
            raise full from failed
        if exc is None:
            raise failed


def _what(path: Path) -> str:
    return f"the store {path.name}"


def full_disk(e: BaseException, where: Path, what: str) -> DiskFull | None:
    """The DiskFull that `e` amounts to, or None: SQLite's SQLITE_FULL ("database or disk is
    full"), an OSError ENOSPC or EDQUOT, or an SQLite I/O error while the filesystem under
    `where` has less than 1 MiB left (SQLite reports a -shm index it cannot grow so)."""
    if isinstance(e, OSError):
        return DiskFull(where, what) if e.errno in (errno.ENOSPC, errno.EDQUOT) else None
    if not isinstance(e, sqlite3.Error):
        return None
    code = (getattr(e, "sqlite_errorcode", 0) or 0) & 0xFF
    if code == sqlite3.SQLITE_FULL:
        return DiskFull(where, what)
    if code == sqlite3.SQLITE_IOERR:
        try:
            left = shutil.disk_usage(where).free
        except OSError:
            return None
        if left < 1024 * 1024:
            return DiskFull(where, what)
    return None


def open_store(results_dir: Path, create: bool = True) -> SQLiteStore:
    """The store in results_dir; with create=False a missing one is a StoreError (one line
    naming where it looked), and nothing is made on disk."""
    path = results_dir / "isotax.db"
    if not create and not path.is_file():
        raise StoreError(f"no results store at {path}: nothing has been run with these results "
                         "yet; `isotax run quick` makes one, or give --results DIR (or "
                         "ISOTAX_RESULTS) where your runs are")
    return SQLiteStore(path)
