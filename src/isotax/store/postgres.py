"""PostgreSQL store (psycopg 3): the same store protocol and schema as SQLite's, for a store
that several hosts or runs write at once (`--store postgresql://...`). SQLite stays the
default.

The tables are SQLite's, with PostgreSQL's types (isotax.store.schema: one text for both).
Every write is one transaction, a cell with its samples and telemetry included, so a crash
loses at most the cell in flight and two runs writing at once never see each other's
half-written cells. The schema is versioned like SQLite's (table meta, key schema_version)
and brought up to date in place when a store is opened, under a transaction-scoped advisory
lock so that writers opening a new store together create it once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from isotax.store.base import StoreError
from isotax.store.schema import POSTGRES, statements
from isotax.store.sql_store import SqlStore

SCHEMES = ("postgresql", "postgres")
# pg_advisory_xact_lock key for schema creation and upgrades: "itx" in ASCII.
_SCHEMA_LOCK = 0x697478


def is_postgres_url(text: str) -> bool:
    return text.split("://", 1)[0] in SCHEMES and "://" in text


def redacted(url: str) -> str:
    """The URL without its password, for messages and the report."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresStore(SqlStore):
    """The store in a PostgreSQL database (its statements: isotax.store.sql_store)."""

    ENV_ORDER = "seq"  # an identity column: SQLite's rowid order

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
            for statement in statements(POSTGRES):
                self.db.execute(statement)
            self._check_schema_version()

    def _exec(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        # The statements are written with SQLite's `?` (isotax.store.sql_store); none holds
        # a literal question mark or percent sign.
        return self.db.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self.db.cursor() as cur:
            cur.executemany(sql.replace("?", "%s"), rows)  # type: ignore[arg-type]

    @contextmanager
    def _tx(self) -> Iterator[None]:
        with self.db.transaction():
            yield

    def close(self) -> None:
        self.db.close()
