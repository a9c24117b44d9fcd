"""A run as data: the long format (isotax.analysis.long_format) as CSV, as Parquet, and as a
pandas DataFrame (`isotax.load`).

pandas and pyarrow are an optional extra (`pip install 'isotax[data]'`): the long CSV needs
neither; the DataFrame needs pandas and Parquet pyarrow, and without them the one line
MissingExtra carries says how to install them.

The DataFrame types what the CSV cannot: a parameter column whose values are all integers is
pandas' nullable Int64 (a point without that parameter is <NA>, and 8 stays 8, not 8.0), all
booleans "boolean", all numbers float64; a column mixing kinds (a number here, a word there)
is text throughout. `started` and `ended` are UTC timestamps there (Unix seconds in the CSV).
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from isotax.analysis.long_format import LongTable, long_table
from isotax.host import owners
from isotax.store.base import Store
from isotax.store.bundle import open_bundle
from isotax.store.sqlite import open_store

if TYPE_CHECKING:
    import pandas as pd

# The same default as the command line's --results (isotax.cli.common.DEFAULT_RESULTS): the data
# layer sits below the CLI and cannot import it.
DEFAULT_RESULTS = Path("/var/lib/isotax/results")


class MissingExtra(ImportError):
    """pandas or pyarrow is not installed: the message is the one line to show."""


def missing(name: str) -> str:
    return (f"{name} is not installed: pip install 'isotax[data]' (or .venv/bin/pip install "
            "pandas pyarrow)")


def _require(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        raise MissingExtra(missing(name)) from None


def table(store: Store, run_id: str) -> LongTable:
    """run_id's cells in the long format."""
    return long_table(run_id, store.environments(run_id), store.cells(run_id))


def to_csv(t: LongTable) -> str:
    """The long format as CSV (no pandas needed): empty fields for None."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=t.columns, lineterminator="\n")
    w.writeheader()
    w.writerows(t.rows)
    return buf.getvalue()


def _param_dtype(values: list[Any]) -> str | None:
    """The pandas dtype of a parameter column: None where no single kind fits (text then)."""
    present = [v for v in values if v is not None]
    if all(isinstance(v, bool) for v in present):
        return "boolean"
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "Int64"
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return "float64"
    if all(isinstance(v, str) for v in present):
        return "string"
    return None


def frame(t: LongTable) -> pd.DataFrame:
    """The long format as a pandas DataFrame, columns typed (the module's docstring)."""
    pd = _require("pandas")
    df = pd.DataFrame(t.rows, columns=list(t.columns))
    for col in t.param_columns:
        values = [r[col] for r in t.rows]
        dtype = _param_dtype(values)
        if dtype is None:  # mixed kinds: Parquet needs one type per column
            df[col] = pd.array([None if v is None else str(v) for v in values], dtype="string")
        else:
            df[col] = pd.array(values, dtype=dtype)
    for col in ("environment", "kind", "workload", "status", "reason", "metric", "unit",
                "run_id"):
        df[col] = df[col].astype("string")
    df["value"] = df["value"].astype("float64")
    df["higher_is_better"] = df["higher_is_better"].astype("boolean")
    df["emulated"] = df["emulated"].astype(bool)
    df["warmup"] = df["warmup"].astype(bool)
    df["repetition"] = df["repetition"].astype("int64")
    for col in ("started", "ended"):
        df[col] = pd.to_datetime(df[col], unit="s", utc=True)
    return df


def write_parquet(t: LongTable, path: Path) -> Path:
    """The long format as Parquet at path (pandas and pyarrow); the DataFrame's types kept."""
    df = frame(t)
    _require("pyarrow")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        df.to_parquet(tmp, engine="pyarrow", index=False)
    except BaseException:
        tmp.unlink(missing_ok=True)  # half a file is no export
        raise
    tmp.replace(path)
    return path


@contextmanager
def opened(run_or_bundle: str | Path, results: str | Path | None = None,
           store: str | None = None) -> Iterator[tuple[Store, str]]:
    """(store, run id) for a run id (or an unambiguous prefix) in the store under `results`
    (default $ISOTAX_RESULTS, else /var/lib/isotax/results) or at the PostgreSQL URL `store`,
    or for a bundle file from `isotax export`; closed when the block ends. A run or bundle
    that cannot be read raises store.base.StoreError, one line."""
    if Path(run_or_bundle).is_file():
        with tempfile.TemporaryDirectory(prefix=owners.temp_prefix("bundle")) as d:
            unpacked, rid = open_bundle(Path(run_or_bundle), Path(d))
            try:
                yield unpacked, rid
            finally:
                unpacked.close()
        return
    s: Store
    if store is not None:
        # psycopg is loaded only for a PostgreSQL store (start-up speed, as in the CLI)
        from isotax.store.postgres import PostgresStore

        s = PostgresStore(store)
    else:
        where = Path(results or os.environ.get("ISOTAX_RESULTS") or DEFAULT_RESULTS)
        s = open_store(where, create=False)
    try:
        yield s, s.get_run(str(run_or_bundle)).id
    finally:
        s.close()


def load(run_or_bundle: str | Path, results: str | Path | None = None,
         store: str | None = None) -> pd.DataFrame:
    """A run as a pandas DataFrame of the long format: one row per cell x metric, every
    parameter its own column (param_<name>), repetition, warm-up flag, status.

    run_or_bundle: a run id in the store under `results` (default $ISOTAX_RESULTS, else
    /var/lib/isotax/results), or at the PostgreSQL URL `store`; or a bundle file. Raises
    MissingExtra (one line saying how to install pandas) without pandas, StoreError for a
    run or bundle that cannot be read."""
    _require("pandas")  # before opening anything
    with opened(run_or_bundle, results, store) as (s, rid):
        return frame(table(s, rid))
