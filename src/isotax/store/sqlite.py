"""SQLite store: one file, WAL journal, one transaction per cell so a crash loses at most the
cell in flight. Foreign keys cascade, so deleting a run removes all its rows."""

from __future__ import annotations

import contextlib
import errno
import shutil
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from isotax.store.base import DiskFull, StoreError
from isotax.store.schema import SQLITE, tables
from isotax.store.sql_store import SqlStore


class SQLiteStore(SqlStore):
    """The store in one SQLite file (its statements: isotax.store.sql_store)."""

    ENV_ORDER = "rowid"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)
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
        self.db.execute("PRAGMA foreign_keys = ON")
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = FULL")
        # executescript commits on its own, so it runs outside a transaction of ours.
        self.db.executescript(tables(SQLITE))
        self._check_schema_version()

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.db.execute(sql, params)

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.db.executemany(sql, rows)

    def _tx(self) -> _Tx:
        return _Tx(self.db, self.path)

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
