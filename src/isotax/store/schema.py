"""The store's tables, written once for both backends (isotax.store.sqlite, .postgres): the
column types that differ are named by role and each backend's Dialect spells them. SQLite's
spelling gives exactly the text its stores were always created with; PostgreSQL's gives
identity columns for ids (a cell's id orders a run's cells as SQLite's rowid does, and
environments.seq orders a run's environments the same way), double precision for times and
values, and booleans. JSON stays text in both, so a run read back from either gives the same
bytes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    id: str  # a row id the database assigns, in insertion order
    int64: str  # an integer that may pass 2**31 (a seed, a row id referenced)
    real: str  # a double
    boolean: str
    env_seq: str  # the environments' insertion order where the database has no rowid


SQLITE = Dialect(id="INTEGER PRIMARY KEY", int64="INTEGER", real="REAL", boolean="INTEGER",
                 env_seq="")
POSTGRES = Dialect(id="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", int64="BIGINT",
                   real="DOUBLE PRECISION", boolean="BOOLEAN",
                   env_seq="\n    seq BIGINT GENERATED ALWAYS AS IDENTITY,")

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created {real} NOT NULL,
    finished {real},
    status TEXT NOT NULL,
    plan_name TEXT NOT NULL,
    plan_toml TEXT NOT NULL,
    seed {int64} NOT NULL,
    host_json TEXT NOT NULL,
    format_version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS environments ({env_seq}
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    available {boolean} NOT NULL,
    reason TEXT NOT NULL,
    describe_json TEXT NOT NULL,
    tools_json TEXT NOT NULL,
    milestones_json TEXT NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE TABLE IF NOT EXISTS cells (
    id {id},
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    ident TEXT NOT NULL,
    environment TEXT NOT NULL,
    workload TEXT NOT NULL,
    workload_version TEXT NOT NULL,
    params_json TEXT NOT NULL,
    repetition INTEGER NOT NULL,
    warmup {boolean} NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    started {real} NOT NULL,
    ended {real} NOT NULL,
    UNIQUE (run_id, ident)
);
CREATE TABLE IF NOT EXISTS samples (
    id {id},
    cell_id {int64} NOT NULL REFERENCES cells(id) ON DELETE CASCADE,
    metric TEXT NOT NULL,
    value {real} NOT NULL,
    unit TEXT NOT NULL,
    higher_is_better {boolean} NOT NULL,
    labels_json TEXT NOT NULL
);
-- What the host did while a measured cell ran (telemetry.sampler): a summary the report reads,
-- and the sampled series, read only on demand. Schema 2.
CREATE TABLE IF NOT EXISTS telemetry (
    cell_id {int64} PRIMARY KEY REFERENCES cells(id) ON DELETE CASCADE,
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


def tables(dialect: Dialect) -> str:
    """Every CREATE statement in the dialect, as one script (SQLite's executescript)."""
    return _TABLES.format(id=dialect.id, int64=dialect.int64, real=dialect.real,
                          boolean=dialect.boolean, env_seq=dialect.env_seq)


def statements(dialect: Dialect) -> list[str]:
    """The same, one statement each (a driver that runs one at a time; no statement holds a
    semicolon of its own)."""
    return [s.strip() for s in tables(dialect).split(";") if s.strip()]
