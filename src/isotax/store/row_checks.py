"""The rows of a store that isotax did not write itself (a bundle from another machine), checked
field by field before anything reads them: the first row that does not hold what its column
says, named by table, row and column, or None.

SQLite keeps whatever a row was given: a word in a REAL column stays text, an infinity is a
REAL, and a *_json column is only text. isotax's own writes never store such values, so one
found here comes from a file made or edited elsewhere; reading on would end in a traceback
deep in the analysis (a ValueError on float('fast'), a JSONDecodeError) instead of one line.
The checks follow the schema itself (PRAGMA table_info), so a column added later is checked
without a table kept here."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Collection, Mapping

# Columns holding JSON that must be an object (the rest, run_meta's value_json, any JSON).
_ANY_JSON = frozenset({"value_json"})
_NUMERIC = ("REAL", "INTEGER")


def first_bad_row(db: sqlite3.Connection, tables: tuple[str, ...],
                  allowed: Mapping[tuple[str, str], Collection[str]] | None = None,
                  content: Mapping[tuple[str, str], Callable[[object], str]] | None = None
                  ) -> str | None:
    """'table cells, row 3: started is 'soon', not a number' for the first offending row of
    the tables, in order; None when every row holds what its columns say. `allowed` gives
    the words a (table, column) may hold (a status isotax knows); `content` a check of what
    a (table, column) of the right type holds (a description's typed parts): what is wrong
    with a value, "" when nothing."""
    allowed = allowed or {}
    content = content or {}
    for table in tables:
        cols = [(r[1], str(r[2]).upper(), bool(r[3]))
                for r in db.execute(f'PRAGMA table_info("{table}")')]
        names = ", ".join(f'"{c}"' for c, _, _ in cols)
        for row in db.execute(f'SELECT rowid, {names} FROM "{table}" ORDER BY rowid'):
            for (col, kind, not_null), value in zip(cols, row[1:], strict=True):
                why = _problem(col, kind, not_null, value)
                words = allowed.get((table, col))
                if not why and words is not None and value not in words:
                    why = f"is {_shown(value)}, not one of {', '.join(sorted(words))}"
                check = content.get((table, col))
                if not why and check is not None:
                    why = check(value)
                if why:
                    return f"table {table}, row {row[0]}: {col} {why}"
    return None


def _problem(col: str, kind: str, not_null: bool, value: object) -> str:
    """What is wrong with one value of a column of this declared type ("" when nothing)."""
    if value is None:
        return "is empty (NULL)" if not_null else ""
    if kind in _NUMERIC:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"is {_shown(value)}, not a number"
        if not math.isfinite(value):
            return f"is {value}, not a finite number"
        return ""
    if col.endswith("_json"):
        if not isinstance(value, str):
            return f"is {_shown(value)}, not JSON text"
        try:
            parsed = json.loads(value)
        except ValueError as e:
            return f"is not JSON ({e})"
        if col not in _ANY_JSON and not isinstance(parsed, dict):
            return f"is a JSON {type(parsed).__name__}, not an object"
    return ""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}..."
