"""A portable bundle of one run: its rows of the store, its plan and its host fingerprint, in
one .tar.gz that `isotax report BUNDLE` turns into the same report on another machine.

Layout (format BUNDLE_VERSION):
  manifest.json     {"format": "isotax-bundle", "version", "run_id", "isotax", "schema",
                     "results_format", "sha256": {file: digest}}
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
from isotax.model import FORMAT_VERSION
from isotax.store.base import SCHEMA_VERSION, Store, StoreError
from isotax.store.sqlite import SQLiteStore, full_disk

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


def _copy_through(store: Store, run_id: str, con: sqlite3.Connection) -> None:
    """One run's rows from any store (PostgreSQL) into a bundle's SQLite file, through the
    store protocol: the same values, and the cells' order kept (their ids are renumbered)."""
    run = store.get_run(run_id)
    con.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)",
                (run.id, run.created, run.finished, run.status, run.plan_name, run.plan_toml,
                 run.seed, json.dumps(dict(run.host)), run.format_version))
    for e in store.environments(run_id):
        con.execute("INSERT INTO environments VALUES (?,?,?,?,?,?,?,?)",
                    (e.run_id, e.name, e.kind, int(e.available), e.reason,
                     json.dumps(dict(e.describe)), json.dumps(dict(e.tools)),
                     json.dumps(dict(e.milestones))))
    summaries = store.telemetry(run_id)
    for c in store.cells(run_id):
        k = c.key
        cur = con.execute(
            "INSERT INTO cells (run_id, ident, environment, workload, workload_version,"
            " params_json, repetition, warmup, status, reason, started, ended)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (run_id, k.ident, k.environment, k.workload, c.workload_version,
             json.dumps(dict(k.params), sort_keys=True), k.repetition, int(k.warmup),
             c.status.value, c.reason, c.started, c.ended))
        cid = cur.lastrowid
        con.executemany(
            "INSERT INTO samples (cell_id, metric, value, unit, higher_is_better, labels_json)"
            " VALUES (?,?,?,?,?,?)",
            [(cid, x.metric, x.value, x.unit, int(x.higher_is_better),
              json.dumps(dict(x.labels), sort_keys=True)) for x in c.samples])
        if c.id in summaries:
            con.execute("INSERT INTO telemetry VALUES (?,?,?)",
                        (cid, json.dumps(summaries[c.id].to_json()),
                         json.dumps(dict(store.telemetry_series(c.id)))))
    for key, value in store.run_meta(run_id).items():
        con.execute("INSERT INTO run_meta VALUES (?,?,?)", (run_id, key, json.dumps(value)))


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def export_bundle(store: Store, run_id: str, out: Path) -> Path:
    """Write run_id's bundle to `out` (a .tar.gz); returns its path."""
    run = store.get_run(run_id)
    with tempfile.TemporaryDirectory(prefix="itx-bundle-") as d:
        db = Path(d) / "isotax.db"
        SQLiteStore(db).close()  # the schema, empty
        con = sqlite3.connect(db)
        try:
            if isinstance(store, SQLiteStore):
                con.execute("ATTACH DATABASE ? AS src", (str(store.path),))
                with con:
                    for table, select in _COPY:
                        con.execute(f"INSERT INTO main.{table} {select}", {"run": run.id})
                con.execute("DETACH DATABASE src")
            else:
                with con:
                    _copy_through(store, run.id, con)
        except sqlite3.Error as e:
            full = full_disk(e, Path(d), "the bundle's copy of the run")
            if full is None:
                raise
            raise full from e
        finally:
            con.close()
        files = {
            "isotax.db": db.read_bytes(),
            "plan.toml": run.plan_toml.encode(),
            "fingerprint.json": json.dumps(dict(run.host), indent=2, sort_keys=True).encode(),
        }
    manifest = {
        "format": "isotax-bundle", "version": BUNDLE_VERSION, "run_id": run.id,
        "isotax": __version__, "schema": SCHEMA_VERSION, "results_format": FORMAT_VERSION,
        "sha256": {name: _sha256(data) for name, data in files.items()},
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
