"""PostgreSQL store (psycopg 3): the same store protocol and schema as SQLite's, for a store
that several hosts or runs write at once (`--store postgresql://...`). SQLite stays the
default.

The tables are SQLite's, with PostgreSQL's types: ids are identity columns (a cell's id orders
the cells of a run as SQLite's rowid does), times are double precision, and JSON stays text, so
a run read back from either store gives the same bytes. Every write is one transaction, a cell
with its samples and telemetry included, so a crash loses at most the cell in flight and two
runs writing at once never see each other's half-written cells. The schema is versioned like
SQLite's (table meta, key schema_version) and brought up to date in place when a store is
opened, under a transaction-scoped advisory lock so that writers opening a new store together
create it once.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

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

SCHEMES = ("postgresql", "postgres")
# pg_advisory_xact_lock key for schema creation and upgrades: "itx" in ASCII.
_SCHEMA_LOCK = 0x697478

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        created DOUBLE PRECISION NOT NULL,
        finished DOUBLE PRECISION,
        status TEXT NOT NULL,
        plan_name TEXT NOT NULL,
        plan_toml TEXT NOT NULL,
        seed BIGINT NOT NULL,
        host_json TEXT NOT NULL,
        format_version INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS environments (
        seq BIGINT GENERATED ALWAYS AS IDENTITY,
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        available BOOLEAN NOT NULL,
        reason TEXT NOT NULL,
        describe_json TEXT NOT NULL,
        tools_json TEXT NOT NULL,
        milestones_json TEXT NOT NULL,
        PRIMARY KEY (run_id, name))""",
    """CREATE TABLE IF NOT EXISTS cells (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        ident TEXT NOT NULL,
        environment TEXT NOT NULL,
        workload TEXT NOT NULL,
        workload_version TEXT NOT NULL,
        params_json TEXT NOT NULL,
        repetition INTEGER NOT NULL,
        warmup BOOLEAN NOT NULL,
        status TEXT NOT NULL,
        reason TEXT NOT NULL,
        started DOUBLE PRECISION NOT NULL,
        ended DOUBLE PRECISION NOT NULL,
        UNIQUE (run_id, ident))""",
    """CREATE TABLE IF NOT EXISTS samples (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        cell_id BIGINT NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
        metric TEXT NOT NULL,
        value DOUBLE PRECISION NOT NULL,
        unit TEXT NOT NULL,
        higher_is_better BOOLEAN NOT NULL,
        labels_json TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS telemetry (
        cell_id BIGINT PRIMARY KEY REFERENCES cells(id) ON DELETE CASCADE,
        summary_json TEXT NOT NULL,
        series_json TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS run_meta (
        run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        key TEXT NOT NULL,
        value_json TEXT NOT NULL,
        PRIMARY KEY (run_id, key))""",
    "CREATE INDEX IF NOT EXISTS cells_run ON cells(run_id)",
    "CREATE INDEX IF NOT EXISTS samples_cell ON samples(cell_id)",
)


def is_postgres_url(text: str) -> bool:
    return text.split("://", 1)[0] in SCHEMES and "://" in text


def redacted(url: str) -> str:
    """The URL without its password, for messages and the report."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresStore:
    def __init__(self, url: str) -> None:
        self.url = url
        self.where = redacted(url)
        try:
            self.db = psycopg.connect(url, autocommit=True, connect_timeout=10)
        except psycopg.Error as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise StoreError(f"cannot reach the PostgreSQL store {self.where} ({first}); "
                             "check the URL, that the server runs and accepts you") from None
        with self._tx():
            self.db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            for statement in _SCHEMA:
                self.db.execute(statement)
            row = self.db.execute(
                "SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is not None and int(row[0]) > SCHEMA_VERSION:
                raise StoreError(f"{self.where} has schema version {row[0]}, newer than this "
                                 f"isotax ({SCHEMA_VERSION}); upgrade isotax to read it")
            # Older schemas only lack tables, which CREATE TABLE IF NOT EXISTS just added.
            if row is None or int(row[0]) != SCHEMA_VERSION:
                self.db.execute("INSERT INTO meta VALUES ('schema_version', %s) ON CONFLICT "
                                "(key) DO UPDATE SET value = excluded.value",
                                (str(SCHEMA_VERSION),))

    @contextmanager
    def _tx(self) -> Iterator[None]:
        with self.db.transaction():
            yield

    # runs
    def create_run(self, run_id: str, plan_name: str, plan_toml: str, seed: int,
                   host: Mapping[str, Any], created: float | None = None,
                   format_version: int | None = None) -> RunRecord:
        now = time.time() if created is None else created
        with self._tx():
            self.db.execute("INSERT INTO runs VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                            (run_id, now, None, RunStatus.RUNNING.value, plan_name, plan_toml, seed,
                             json.dumps(dict(host)), format_version or FORMAT_VERSION))
        return self.get_run(run_id)

    def get_run(self, run_id: str) -> RunRecord:
        row = self.db.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE id=%s", (run_id,)
                              ).fetchone()
        if row is None:
            # A unique prefix will do, as git does for commits.
            rows = self.db.execute(f"SELECT {RUN_COLUMNS} FROM runs WHERE starts_with(id, %s) "
                                   "ORDER BY created", (run_id,)).fetchall()
            if len(rows) == 1:
                return run_record(rows[0])
            raise unknown_run(run_id, len(rows), self.list_runs(), self.where)
        return run_record(row)

    def list_runs(self) -> list[RunRecord]:
        return [run_record(r) for r in
                self.db.execute(f"SELECT {RUN_COLUMNS} FROM runs ORDER BY created").fetchall()]

    def set_run_status(self, run_id: str, status: RunStatus,
                       finished: float | None = None) -> None:
        with self._tx():
            self.db.execute("UPDATE runs SET status=%s, finished=%s WHERE id=%s",
                            (status, finished, run_id))

    def update_host(self, run_id: str, host: Mapping[str, Any]) -> None:
        with self._tx():
            self.db.execute("UPDATE runs SET host_json=%s WHERE id=%s",
                            (json.dumps(dict(host)), run_id))

    def delete_run(self, run_id: str) -> None:
        with self._tx():
            self.db.execute("DELETE FROM runs WHERE id=%s", (run_id,))

    # environments
    def put_environment(self, env: EnvRecord) -> None:
        # Replaced as SQLite's INSERT OR REPLACE does: the new row goes last (a restarted
        # environment is listed where it was last put).
        with self._tx():
            self.db.execute("DELETE FROM environments WHERE run_id=%s AND name=%s",
                            (env.run_id, env.name))
            self.db.execute(
                "INSERT INTO environments (run_id, name, kind, available, reason, "
                "describe_json, tools_json, milestones_json) VALUES (%s,%s,%s,%s,%s,%s,%s,%s)",
                (env.run_id, env.name, env.kind, env.available, env.reason,
                 json.dumps(dict(env.describe)), json.dumps(dict(env.tools)),
                 json.dumps(dict(env.milestones))))

    def environments(self, run_id: str) -> list[EnvRecord]:
        rows = self.db.execute(
            f"SELECT {ENV_COLUMNS} FROM environments WHERE run_id=%s ORDER BY seq", (run_id,))
        return [env_record(r) for r in rows.fetchall()]

    # cells and samples
    def commit_cell(self, run_id: str, key: CellKey, workload_version: str,
                    outcome: CellOutcome, started: float, ended: float) -> int:
        """One cell, its samples and (summary, series) telemetry, in one transaction."""
        # (a cell that did not pass carries no numbers: CellOutcome refuses them)
        telemetry = outcome.telemetry
        with self._tx():
            row = self.db.execute(
                "INSERT INTO cells (run_id, ident, environment, workload, workload_version,"
                " params_json, repetition, warmup, status, reason, started, ended)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) RETURNING id",
                (run_id, key.ident, key.environment, key.workload, workload_version,
                 json.dumps(dict(key.params), sort_keys=True), key.repetition, key.warmup,
                 outcome.status.value, outcome.reason, started, ended)).fetchone()
            assert row is not None
            cell_id = int(row[0])
            if outcome.samples:
                with self.db.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO samples (cell_id, metric, value, unit, higher_is_better,"
                        " labels_json) VALUES (%s,%s,%s,%s,%s,%s)",
                        [(cell_id, s.metric, s.value, s.unit, s.higher_is_better,
                          json.dumps(dict(s.labels), sort_keys=True)) for s in outcome.samples])
            if telemetry is not None:
                self.db.execute("INSERT INTO telemetry VALUES (%s,%s,%s)",
                                (cell_id, json.dumps(telemetry[0].to_json()),
                                 json.dumps(dict(telemetry[1]))))
        return cell_id

    def telemetry(self, run_id: str) -> dict[int, TelemetrySummary]:
        """cell id -> telemetry summary, for every cell of the run that has one."""
        return {int(cid): TelemetrySummary.from_json(json.loads(s)) for cid, s in self.db.execute(
            "SELECT t.cell_id, t.summary_json FROM telemetry t JOIN cells c ON c.id = t.cell_id"
            " WHERE c.run_id=%s", (run_id,)).fetchall()}

    def telemetry_series(self, cell_id: int) -> Mapping[str, Any]:
        row = self.db.execute("SELECT series_json FROM telemetry WHERE cell_id=%s",
                              (cell_id,)).fetchone()
        return json.loads(row[0]) if row else {}

    # run metadata
    def put_run_meta(self, run_id: str, key: str, value: Any,
                     verbatim: bool = False) -> None:
        if not verbatim:
            run_meta.check(key, value)
        with self._tx():
            self.db.execute("INSERT INTO run_meta VALUES (%s,%s,%s) ON CONFLICT (run_id, key) "
                            "DO UPDATE SET value_json = excluded.value_json",
                            (run_id, key, json.dumps(value)))

    def run_meta(self, run_id: str) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self.db.execute(
            "SELECT key, value_json FROM run_meta WHERE run_id=%s", (run_id,)).fetchall()}

    def done_cells(self, run_id: str) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT ident FROM cells WHERE run_id=%s",
                                              (run_id,)).fetchall()}

    def cells(self, run_id: str, after: int = 0) -> list[CellRecord]:
        return cell_records(
            self.db.execute(f"SELECT {SAMPLE_COLUMNS} FROM samples s JOIN cells c ON "
                            "c.id = s.cell_id WHERE c.run_id=%s AND c.id>%s ORDER BY s.id",
                            (run_id, after)).fetchall(),
            self.db.execute(f"SELECT {CELL_COLUMNS} FROM cells WHERE run_id=%s AND id>%s "
                            "ORDER BY id", (run_id, after)).fetchall())

    def close(self) -> None:
        self.db.close()
