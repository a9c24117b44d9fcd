"""A portable bundle of one run: its rows of the store, its plan and its host fingerprint, in
one .tar.gz that `isotax report BUNDLE` turns into the same report on another machine.

Layout (format BUNDLE_VERSION):
  manifest.json     {"format": "isotax-bundle", "version", "run_id", "isotax", "schema",
                     "results_format", "sha256": {file: digest}, "versions": the Python
                     packages and host tools the run was made with (isotax.host.facts.versions;
                     null for a run made before they were recorded)}
  isotax.db         an SQLite store holding only this run's rows (every table, ids kept)
  plan.toml         the exact plan the run used (also in the store; here for people)
  fingerprint.json  the host fingerprint the run recorded (likewise)
The store inside is the same schema isotax writes, so reading a bundle is opening a store;
the digests catch a damaged or edited bundle before a report is made from it.
"""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import Any

from isotax.host import owners
from isotax.host.facts import versions
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import FORMAT_VERSION, CellStatus
from isotax.store.base import SCHEMA_VERSION, DiskFull, Store, StoreError
from isotax.store.row_checks import first_bad_row
from isotax.store.sqlite import SQLiteStore, full_disk
from isotax.store.transfer import copy_run
from isotax.version import __version__

BUNDLE_VERSION = 1
_FILES = ("isotax.db", "plan.toml", "fingerprint.json")

# Each table's rows of one run, in the order they were written: cell and sample ids are kept
# (samples and telemetry refer to them), and rowid order is the order reports list
# environments in, so the same report comes out of the bundle.
_COPY = (
    ("runs", "SELECT * FROM src.runs WHERE id = :run"),
    ("environments", "SELECT * FROM src.environments WHERE run_id = :run ORDER BY rowid"),
    ("cells", "SELECT * FROM src.cells WHERE run_id = :run ORDER BY id"),
    ("samples", "SELECT s.* FROM src.samples s JOIN src.cells c ON c.id = s.cell_id "
                "WHERE c.run_id = :run ORDER BY s.id"),
    ("telemetry", "SELECT t.* FROM src.telemetry t JOIN src.cells c ON c.id = t.cell_id "
                  "WHERE c.run_id = :run ORDER BY t.cell_id"),
    ("run_meta", "SELECT * FROM src.run_meta WHERE run_id = :run ORDER BY rowid"),
)


def _copy_attached(store: SQLiteStore, run_id: str, db: Path) -> None:
    """One run's rows from a SQLite store into the bundle's, table by table, ids kept."""
    con = sqlite3.connect(db)
    try:
        con.execute("ATTACH DATABASE ? AS src", (str(store.path),))
        with con:
            for table, select in _COPY:
                con.execute(f"INSERT INTO main.{table} {select}", {"run": run_id})
        con.execute("DETACH DATABASE src")
    except sqlite3.Error as e:
        full = full_disk(e, db.parent, "the bundle's copy of the run")
        if full is None:
            raise
        raise full from e
    finally:
        con.close()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def export_bundle(store: Store, run_id: str, out: Path) -> Path:
    """Write run_id's bundle to `out` (a .tar.gz); returns its path."""
    run = store.get_run(run_id)
    with tempfile.TemporaryDirectory(prefix=owners.temp_prefix("bundle")) as d:
        db = Path(d) / "isotax.db"
        copy = SQLiteStore(db)  # the schema, empty
        try:
            if not isinstance(store, SQLiteStore):
                # Any other store (PostgreSQL): through the store protocol, the same values
                # and the cells' order kept (their ids are renumbered).
                copy_run(store, run.id, copy)
        except DiskFull as e:
            raise DiskFull(Path(d), "the bundle's copy of the run") from e
        finally:
            copy.close()
        if isinstance(store, SQLiteStore):
            _copy_attached(store, run.id, db)
        files = {
            "isotax.db": db.read_bytes(),
            "plan.toml": run.plan_toml.encode(),
            "fingerprint.json": json.dumps(dict(run.host), indent=2, sort_keys=True).encode(),
        }
    manifest = {
        "format": "isotax-bundle", "version": BUNDLE_VERSION, "run_id": run.id,
        "isotax": __version__, "schema": SCHEMA_VERSION, "results_format": FORMAT_VERSION,
        "sha256": {name: _sha256(data) for name, data in files.items()},
        # Named here too (they are in the store's run meta) so a reader of the bundle sees
        # which matplotlib, numpy, ... made its report without opening the database.
        "versions": store.run_meta(run.id).get(versions.META_KEY),
    }
    tmp = out.with_name(out.name + ".tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tmp, "w:gz") as tar:
            for name, data in [("manifest.json", json.dumps(manifest, indent=2).encode()),
                               *files.items()]:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, int(run.created)
                tar.addfile(info, io.BytesIO(data))
    except OSError as e:
        tmp.unlink(missing_ok=True)  # half a bundle is no bundle
        full = full_disk(e, out.parent, f"the bundle {out.name}")
        if full is None:
            raise
        raise full from e
    tmp.replace(out)
    return out


# What a bundle's members can be, at most: a run's rows are kilobytes per cell, so a database
# past MAX_DB_BYTES (or a text file past MAX_TEXT_BYTES) is not a bundle isotax wrote, and
# reading stops at its header (a gzip bomb is refused before it is inflated).
MAX_DB_BYTES = 1 << 30
MAX_TEXT_BYTES = 16 << 20
_CHUNK = 1 << 20
_SQLITE_MAGIC = b"SQLite format 3\x00"
# The tables a bundle's database must hold (a schema-1 bundle lacks telemetry and run_meta).
_NEEDED = ("meta", "runs", "environments", "cells", "samples")
_OPTIONAL = ("telemetry", "run_meta")


def open_bundle(path: Path, workdir: Path) -> tuple[SQLiteStore, str]:
    """The run inside a bundle, as a store of this isotax's own schema in workdir, and its run
    id; StoreError, one line, when the file is not a bundle this isotax can read or its
    contents were changed. Crafted files are refused the same way: a member larger than a
    bundle can be (read no further), a manifest that is not a JSON object of the expected
    fields, a database that is not SQLite, fails its integrity check or lacks the tables.
    The bundle's database is only read, read-only and with the schema untrusted (no view,
    trigger or function of its own runs); its rows are copied into a fresh store."""
    db = workdir / "bundle-isotax.db"
    try:
        texts, db_digest = _unpack(path, db)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        db.unlink(missing_ok=True)
        raise StoreError(f"{path} is not a readable bundle ({e}); make one with "
                         "`isotax export RUN --bundle FILE`") from None
    try:
        manifest = _manifest(path, texts)
        for name in _FILES:
            got = db_digest if name == "isotax.db" else \
                (_sha256(texts[name]) if name in texts else None)
            if got is None or manifest["sha256"].get(name) != got:
                raise StoreError(f"{path}: {name} is missing or does not match its digest "
                                 "in manifest.json (damaged or edited); export the run again")
        store = _import_db(path, db, workdir / "isotax.db")
    finally:
        # with the -wal and -shm files SQLite makes beside a WAL database it reads
        for unpacked in workdir.glob(f"{db.name}*"):
            unpacked.unlink(missing_ok=True)
    try:  # the run the manifest names is there, and reads as a run (its status one isotax knows)
        store.get_run(manifest["run_id"])
    except StoreError as e:
        store.close()
        for leftover in workdir.glob("isotax.db*"):  # with its WAL and shared memory
            leftover.unlink(missing_ok=True)
        raise StoreError(f"{path}: {e}") from None
    return store, manifest["run_id"]


def _unpack(path: Path, db: Path) -> tuple[dict[str, bytes], str | None]:
    """The bundle's small files in memory, its database streamed into `db` (digest taken on
    the way), each member refused at its header when it is larger than a bundle's can be."""
    texts: dict[str, bytes] = {}
    digest = None
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            if not member.isfile() or member.name not in ("manifest.json", *_FILES):
                continue
            limit = MAX_DB_BYTES if member.name == "isotax.db" else MAX_TEXT_BYTES
            if member.size > limit:
                raise StoreError(f"{path}: {member.name} is {member.size} bytes, more than a "
                                 f"bundle's ({limit} at most): not a bundle isotax wrote")
            f = tar.extractfile(member)
            if f is None:
                raise StoreError(f"{path}: bundle member {member.name} cannot be read")
            if member.name != "isotax.db":
                texts[member.name] = f.read(limit + 1)
                continue
            h = hashlib.sha256()
            with open(db, "wb") as out:
                while chunk := f.read(_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
            digest = h.hexdigest()
    if "manifest.json" not in texts:
        raise StoreError(f"{path} is not an isotax bundle (no manifest.json); make one with "
                         "`isotax export RUN --bundle FILE`")
    return texts, digest


def _manifest(path: Path, texts: dict[str, bytes]) -> dict[str, Any]:
    """manifest.json, checked field by field: StoreError naming what is wrong."""
    try:
        manifest = json.loads(texts["manifest.json"])
    except (ValueError, UnicodeDecodeError):
        raise StoreError(f"{path}: manifest.json is not JSON: not a bundle isotax wrote"
                         ) from None
    if not isinstance(manifest, dict):
        raise StoreError(f"{path}: manifest.json is a JSON {type(manifest).__name__}, not an "
                         "object: not a bundle isotax wrote")
    if manifest.get("format") != "isotax-bundle":
        raise StoreError(f"{path} is not an isotax bundle (format "
                         f"{str(manifest.get('format'))[:40]!r})")
    numbers = {}
    for field in ("version", "schema"):
        value = manifest.get(field, 0)
        if not isinstance(value, int) or isinstance(value, bool):
            raise StoreError(f"{path}: manifest.json's {field} {str(value)[:40]!r} is not a "
                             "whole number: not a bundle isotax wrote")
        numbers[field] = value
    if numbers["version"] > BUNDLE_VERSION or numbers["schema"] > SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer isotax "
                         f"({str(manifest.get('isotax'))[:40]}); upgrade isotax to read it")
    if not isinstance(manifest.get("sha256"), dict) or \
            not isinstance(manifest.get("run_id"), str) or not manifest["run_id"]:
        raise StoreError(f"{path}: manifest.json lacks its digests or run id: not a bundle "
                         "isotax wrote")
    return manifest


def _import_db(path: Path, bundled: Path, dest: Path) -> SQLiteStore:
    """The bundle's database checked and copied, table by table in rowid order (ids kept),
    into a fresh store at dest. The bundle's file is opened read-only, with its schema
    untrusted (trusted_schema off: no function with side effects from a view or trigger of
    its own), query_only, cell size checks on, and must pass SQLite's quick_check."""
    with open(bundled, "rb") as f:
        if f.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
            raise StoreError(f"{path}: isotax.db is not an SQLite database: not a bundle "
                             "isotax wrote")
    src = sqlite3.connect(f"{bundled.resolve().as_uri()}?mode=ro", uri=True)
    store: SQLiteStore | None = None
    try:
        for pragma in ("trusted_schema = OFF", "query_only = ON", "cell_size_check = ON",
                       "mmap_size = 0"):
            src.execute(f"PRAGMA {pragma}")
        check = src.execute("PRAGMA quick_check").fetchone()
        if not check or check[0] != "ok":
            raise StoreError(f"{path}: isotax.db fails SQLite's integrity check "
                             f"({str(check and check[0])[:80]}): damaged; export the run again")
        tables = {r[0] for r in src.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        missing = [t for t in _NEEDED if t not in tables]
        if missing:
            raise StoreError(f"{path}: isotax.db lacks the table(s) {', '.join(missing)}: not "
                             "a bundle isotax wrote")
        store = SQLiteStore(dest)
        store.db.execute("BEGIN")
        for table in (*_NEEDED[1:], *(t for t in _OPTIONAL if t in tables)):
            cols = [r[1] for r in store.db.execute(f"PRAGMA table_info({table})")]
            names = ", ".join(f'"{c}"' for c in cols)
            rows = src.execute(f'SELECT {names} FROM "{table}" ORDER BY rowid')
            marks = ", ".join("?" * len(cols))
            store.db.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", rows)
        # Every row holds what its column says before anything reads it (row_checks).
        bad = first_bad_row(store.db, (*_NEEDED[1:], *(t for t in _OPTIONAL if t in tables)),
                            {("cells", "status"): {s.value for s in CellStatus}},
                            {("environments", "describe_json"): _description_problem})
        if bad:
            raise StoreError(f"{path}: isotax.db's {bad}: not a bundle isotax wrote")
        store.db.execute("COMMIT")
        return store
    except sqlite3.Error as e:
        if store is not None:
            store.close()
            dest.unlink(missing_ok=True)
        raise StoreError(f"{path}: isotax.db cannot be read as an isotax store ({e}): not a "
                         "bundle isotax wrote") from None
    except StoreError:
        if store is not None:
            store.close()
            dest.unlink(missing_ok=True)
        raise
    finally:
        src.close()


def _description_problem(value: object) -> str:
    """What is wrong with an environments row's describe_json (JSON text, an object: checked
    before) as the record it stores, "" when nothing."""
    try:
        EnvironmentDescription.from_stored(json.loads(str(value)))
    except ValueError as e:
        return f"does not hold an environment's description: {e}"
    return ""
