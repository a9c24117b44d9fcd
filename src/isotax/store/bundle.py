"""A portable bundle of one run: its rows of the store, its plan and its host fingerprint, in
one .tar.gz that `isotax report BUNDLE` turns into the same report on another machine.

Layout (format BUNDLE_VERSION):
  manifest.json     {"format": "isotax-bundle", "version", "run_id", "isotax", "schema",
                     "results_format", "sha256": {file: digest}, "versions": the Python
                     packages and host tools the run was made with (isotax.host.versions;
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
from pathlib import Path
from typing import Any

from isotax import __version__
from isotax.host import versions
from isotax.model import FORMAT_VERSION
from isotax.store.base import SCHEMA_VERSION, DiskFull, Store, StoreError
from isotax.store.sqlite import SQLiteStore, full_disk
from isotax.store.transfer import copy_run

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
    with tempfile.TemporaryDirectory(prefix="itx-bundle-") as d:
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


def open_bundle(path: Path, workdir: Path) -> tuple[SQLiteStore, str]:
    """The store inside a bundle (unpacked into workdir) and its run id; StoreError, one line,
    when the file is not a bundle this isotax can read or its contents were changed."""
    try:
        with tarfile.open(path, "r:gz") as tar:
            members = {m.name: m for m in tar.getmembers() if m.isfile()}
            if "manifest.json" not in members:
                raise StoreError(f"{path} is not an isotax bundle (no manifest.json); make "
                                 "one with `isotax export RUN --bundle FILE`")
            data = {name: _read(tar, members[name]) for name in ("manifest.json", *_FILES)
                    if name in members}
    except (tarfile.TarError, OSError, EOFError) as e:
        raise StoreError(f"{path} is not a readable bundle ({e}); make one with "
                         "`isotax export RUN --bundle FILE`") from None
    manifest: dict[str, Any] = json.loads(data["manifest.json"])
    if manifest.get("format") != "isotax-bundle":
        raise StoreError(f"{path} is not an isotax bundle (format "
                         f"{manifest.get('format')!r})")
    if int(manifest.get("version", 0)) > BUNDLE_VERSION or \
            int(manifest.get("schema", 0)) > SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer isotax ({manifest.get('isotax')}); "
                         "upgrade isotax to read it")
    for name in _FILES:
        want = manifest.get("sha256", {}).get(name)
        if name not in data or want != _sha256(data[name]):
            raise StoreError(f"{path}: {name} is missing or does not match its digest in "
                             "manifest.json (damaged or edited); export the run again")
    db = workdir / "isotax.db"
    db.write_bytes(data["isotax.db"])
    return SQLiteStore(db), str(manifest["run_id"])


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = tar.extractfile(member)
    if f is None:
        raise StoreError(f"bundle member {member.name} cannot be read")
    return f.read()
