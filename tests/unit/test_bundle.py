"""Export and the portable bundle: a run's rows, plan and fingerprint in one file, from which
`isotax report` on another machine (another directory here) makes the same report."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from support import DATA

from isotax.analysis.report_data import analyze
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.report import FILENAMES, write_reports
from isotax.store.base import CellOutcome, EnvRecord, StoreError
from isotax.store.bundle import export_bundle, open_bundle
from isotax.store.sqlite import SQLiteStore
from isotax.telemetry.summary import TelemetrySummary

PLAN = """
name = "b"
repetitions = 2
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
[[workloads]]
name = "compress"
params = { corpus_mib = 16 }
"""


def _store(tmp_path: Path) -> SQLiteStore:
    """Two runs; r1 with results, real telemetry summaries, environments and run metadata."""
    store = SQLiteStore(tmp_path / "src" / "isotax.db")
    for rid in ("r0", "r1"):
        store.create_run(rid, "b", PLAN, 1, {"hostname": f"h-{rid}", "cpus": 2})
    for name in ("runc", "native"):  # not alphabetical: the report keeps this order
        store.put_environment(EnvRecord("r1", name, name, True, "",
                                        EnvironmentDescription.from_stored({"kind": name}),
                                        {"xz-utils": "5.4.1"}, {"ready": 0.1}))
    params = {"corpus_mib": 16, "level": 2, "seed": 1, "threads": 0}
    for rep in (1, 2):
        for env, v in (("native", 10.0 + rep), ("runc", 9.0 + rep / 3)):
            summary = TelemetrySummary.from_json(
                json.loads((DATA / "cost" / f"{env}-compress-1.json").read_text()))
            store.commit_cell("r1", CellKey(env, "compress", params, rep), "1",
                              CellOutcome(CellStatus.OK, "", [Sample("throughput", v, "MB/s")],
                                          (summary, {"t": [0.5]})), rep, rep + 1)
    store.commit_cell("r0", CellKey("native", "compress", params, 1), "1",
                      CellOutcome(CellStatus.OK, "", [Sample("throughput", 1.0, "MB/s")]), 0, 1)
    store.put_run_meta("r1", "adaptive", None)
    store.set_run_status("r1", "complete", 9)
    return store


def test_bundle_round_trip_gives_the_same_report(tmp_path: Path) -> None:
    store = _store(tmp_path)
    original = write_reports(analyze(store, "r1"), tmp_path / "original")
    bundle = export_bundle(store, "r1", tmp_path / "r1.itx.tar.gz")
    store.close()
    (tmp_path / "elsewhere").mkdir()
    copy, rid = open_bundle(bundle, tmp_path / "elsewhere")
    assert rid == "r1" and [r.id for r in copy.list_runs()] == ["r1"]  # only that run
    assert copy.telemetry("r1") and copy.run_meta("r1") == {"adaptive": None}
    again = write_reports(analyze(copy, rid), tmp_path / "again")
    copy.close()
    for a, b in zip(original, again, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    with tarfile.open(bundle) as tar:
        names = sorted(tar.getnames())
        manifest = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        assert "name = \"b\"" in tar.extractfile("plan.toml").read().decode()  # type: ignore[union-attr]
    assert names == ["fingerprint.json", "isotax.db", "manifest.json", "plan.toml"]
    assert manifest["format"] == "isotax-bundle" and manifest["run_id"] == "r1"


def _rewrite(bundle: Path, name: str, data: bytes) -> None:
    with tarfile.open(bundle) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    files[name] = data
    with tarfile.open(bundle, "w:gz") as tar:
        for n, d in files.items():
            info = tarfile.TarInfo(n)
            info.size = len(d)
            tar.addfile(info, io.BytesIO(d))


def test_a_changed_or_foreign_file_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    bundle = export_bundle(store, "r1", tmp_path / "r1.itx.tar.gz")
    _rewrite(bundle, "plan.toml", b"name = 'edited'\n")
    with pytest.raises(StoreError, match=r"plan\.toml .* digest"):
        open_bundle(bundle, tmp_path)
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"not a tar")
    with pytest.raises(StoreError, match="not a readable bundle"):
        open_bundle(junk, tmp_path)


def test_cli_export_and_report_from_a_bundle(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.close()
    cli = [sys.executable, "-m", "isotax"]
    done = subprocess.run([*cli, "export", "r1", "--results", str(tmp_path / "src")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    bundle = Path(done.stdout.strip())
    assert bundle == tmp_path / "src" / "r1.itx.tar.gz" and bundle.is_file()
    moved = tmp_path / "other" / bundle.name
    moved.parent.mkdir()
    bundle.rename(moved)
    done = subprocess.run([*cli, "report", str(moved)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    html = moved.parent / "r1" / FILENAMES["html"]
    assert done.stdout.strip().splitlines()[-1] == f"HTML report: {html}"
    assert ">Summary</h2>" in html.read_text()
    for fmt in ("json", "csv"):
        done = subprocess.run([*cli, "export", "r1", "--results", str(tmp_path / "src"),
                               "--format", fmt], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and Path(done.stdout.strip()).suffix == f".{fmt}"
    assert json.loads((tmp_path / "src" / "r1.json").read_text())["format_version"] >= 2
    bad = tmp_path / "bad.itx.tar.gz"
    bad.write_text("nope")
    done = subprocess.run([*cli, "report", str(bad)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


# -- crafted bundles from others ------------------------------------------------------------------

def _craft(path: Path, members: dict[str, bytes], manifest: object = None,
           digests: bool = True) -> Path:
    """A .tar.gz of members, with a manifest (the one given, or a correct one for them)."""
    import hashlib

    if manifest is None:
        manifest = {"format": "isotax-bundle", "version": 1, "schema": 2, "run_id": "r1",
                    "sha256": {n: hashlib.sha256(d).hexdigest() for n, d in members.items()}
                    if digests else {}}
    data = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
    with tarfile.open(path, "w:gz") as tar:
        for name, d in [("manifest.json", data), *members.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(d)
            tar.addfile(info, io.BytesIO(d))
    return path


def _members(tmp_path: Path, db: bytes | None = None) -> dict[str, bytes]:
    if db is None:
        store = _store(tmp_path)
        bundle = export_bundle(store, "r1", tmp_path / "good.itx.tar.gz")
        store.close()
        with tarfile.open(bundle) as tar:
            db = tar.extractfile("isotax.db").read()  # type: ignore[union-attr]
    return {"isotax.db": db, "plan.toml": b'name = "b"\n', "fingerprint.json": b"{}"}


def _no_tables_db(tmp_path: Path) -> bytes:
    import sqlite3

    p = tmp_path / "empty.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    con.commit()
    con.close()
    return p.read_bytes()


def _unknown_status_db(tmp_path: Path) -> bytes:
    import sqlite3

    (tmp_path / "status").mkdir()
    p = tmp_path / "status.db"
    p.write_bytes(_members(tmp_path / "status")["isotax.db"])
    con = sqlite3.connect(p)
    con.execute("UPDATE runs SET status = 'x'")
    con.commit()
    con.close()
    return p.read_bytes()


def _edited_db(tmp_path: Path, name: str, sql: str) -> bytes:
    """A correct bundle's database with one UPDATE applied (digests made for it after)."""
    import sqlite3

    (tmp_path / name).mkdir()
    p = tmp_path / f"{name}.db"
    p.write_bytes(_members(tmp_path / name)["isotax.db"])
    con = sqlite3.connect(p)
    con.execute(sql)
    con.commit()
    con.close()
    return p.read_bytes()


# Rows that a digest-correct bundle from elsewhere may hold, each refused in one line naming
# the table, the row and the column (tried as a new user would on 2026-11-28: tracebacks).
EDITED_ROWS = {
    "describe not json": ("UPDATE environments SET describe_json = '{\"kind\": ' "
                          "WHERE name = 'runc'",
                          "table environments, row 1: describe_json is not JSON"),
    "word for a number": ("UPDATE samples SET value = 'fast' WHERE id = 2",
                          "table samples, row 2: value is 'fast', not a number"),
    "infinite value": ("UPDATE samples SET value = 9e999 WHERE id = 3",
                       "table samples, row 3: value is inf, not a finite number"),
    "word for a time": ("UPDATE cells SET started = 'soon' WHERE id = 1",
                        "table cells, row 1: started is 'soon', not a number"),
    "labels a list": ("UPDATE samples SET labels_json = '[1]' WHERE id = 1",
                      "table samples, row 1: labels_json is a JSON list, not an object"),
    "unknown cell status": ("UPDATE cells SET status = 'great' WHERE id = 2",
                            "table cells, row 2: status is 'great', not one of"),
    # JSON objects of the right shape whose record does not hold what isotax writes.
    "parity word": ("UPDATE environments SET describe_json = "
                    "'{\"kind\": \"runc\", \"parity.cpus\": \"two\", "
                    "\"parity.memory_mib\": \"1\"}' WHERE name = 'runc'",
                    "table environments, row 1: describe_json does not hold an environment's "
                    "description: its parity lines do not hold the probe's resources"),
    "record isolation": ("UPDATE environments SET describe_json = "
                         "'{\"kind\": \"runc\", \"record\": {\"version\": 1, "
                         "\"isolation\": \"hypervisor\"}}' WHERE name = 'runc'",
                         "table environments, row 1: describe_json does not hold an "
                         "environment's description: record.isolation is 'hypervisor', not "
                         "one of"),
}


def _crafted(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Each crafted bundle and the words its refusal must have."""
    good = _members(tmp_path)
    bomb = tmp_path / "bomb.itx.tar.gz"
    # A header that claims 4 GiB and no data: never inflated. Written as bytes: Python 3.13's
    # tarfile refuses addfile() of a non-empty member without its data.
    info = tarfile.TarInfo("isotax.db")
    info.size = 4 << 30
    with gzip.open(bomb, "wb") as gz:
        gz.write(info.tobuf(tarfile.GNU_FORMAT) + bytes(2 * tarfile.BLOCKSIZE))
    return {
        "not json": (_craft(tmp_path / "a.tgz", good, b"{not json"), "manifest.json is not JSON"),
        "a list": (_craft(tmp_path / "b.tgz", good, [1, 2]), "is a JSON list, not an object"),
        "version x": (_craft(tmp_path / "c.tgz", good, {"format": "isotax-bundle",
                                                        "version": "x"}),
                      "version 'x' is not a whole number"),
        "not sqlite": (_craft(tmp_path / "d.tgz", _members(tmp_path, b"x" * 4096)),
                       "isotax.db is not an SQLite database"),
        "no tables": (_craft(tmp_path / "e.tgz", _members(tmp_path, _no_tables_db(tmp_path))),
                      "lacks the table(s) runs, environments, cells, samples"),
        "bomb": (bomb, "isotax.db is 4294967296 bytes, more than a bundle's"),
        "unknown status": (_craft(tmp_path / "f.tgz",
                                  _members(tmp_path, _unknown_status_db(tmp_path))),
                           "has a status isotax does not know ('x')"),
        **{what: (_craft(tmp_path / f"row{i}.tgz",
                         _members(tmp_path, _edited_db(tmp_path, f"row{i}", sql))),
                  f"isotax.db's {words}")
           for i, (what, (sql, words)) in enumerate(EDITED_ROWS.items())},
    }


def test_crafted_bundles_are_refused_in_one_line(tmp_path: Path) -> None:
    for what, (bundle, words) in _crafted(tmp_path).items():
        (tmp_path / what).mkdir()
        with pytest.raises(StoreError) as e:
            open_bundle(bundle, tmp_path / what)
        assert words in str(e.value) and "\n" not in str(e.value), what
        assert not any((tmp_path / what).iterdir()), what  # nothing left unpacked


def test_a_member_larger_than_a_bundle_can_be_is_not_inflated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real gzip bomb (zeros: 32 MiB in ~32 KiB) against a lowered bound: refused at its
    header, before a byte of it is inflated into memory or onto the disk (the 4 GiB header
    of _crafted has no data behind it: reading it would fail as a truncated archive)."""
    from isotax.store import bundle as bundle_mod

    monkeypatch.setattr(bundle_mod, "MAX_DB_BYTES", 1 << 20)
    members = {"isotax.db": bytes(32 << 20), "plan.toml": b"", "fingerprint.json": b"{}"}
    bomb = _craft(tmp_path / "bomb.tgz", members)
    assert bomb.stat().st_size < 1 << 20
    (tmp_path / "out").mkdir()
    with pytest.raises(StoreError, match="more than a bundle's"):
        open_bundle(bomb, tmp_path / "out")
    assert not any((tmp_path / "out").iterdir())


def test_a_bundles_database_is_only_read_and_its_schema_not_trusted(tmp_path: Path) -> None:
    """A bundle whose database carries a view for `runs` and a trigger is refused or copied
    without running them: the store opened is this isotax's schema with the rows only."""
    import sqlite3

    store = _store(tmp_path)
    bundle = export_bundle(store, "r1", tmp_path / "good.itx.tar.gz")
    store.close()
    with tarfile.open(bundle) as tar:
        db = tar.extractfile("isotax.db").read()  # type: ignore[union-attr]
    p = tmp_path / "crafted.db"
    p.write_bytes(db)
    con = sqlite3.connect(p)
    con.execute("CREATE TRIGGER itx_evil AFTER INSERT ON runs BEGIN DELETE FROM cells; END")
    con.commit()
    con.close()
    crafted = _craft(tmp_path / "t.tgz", _members(tmp_path, p.read_bytes()))
    (tmp_path / "open").mkdir()
    copy, rid = open_bundle(crafted, tmp_path / "open")
    triggers = copy.db.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall()
    assert triggers == [] and len(copy.cells(rid)) == 4
    copy.close()
    assert p.read_bytes() != db  # (the crafted file had the trigger)


def test_report_and_compare_refuse_crafted_bundles_in_one_line(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "isotax"]
    (tmp_path / "ok").mkdir()
    good = export_bundle(_store(tmp_path / "ok"), "r1", tmp_path / "ok.itx.tar.gz")
    for what, (bundle, words) in _crafted(tmp_path).items():
        for args in (["report", str(bundle)], ["compare", str(good), str(bundle)]):
            done = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=120,
                                  cwd=tmp_path)
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 2 and len(lines) == 1 and words in lines[0], \
                (what, args, done.stderr[-800:])
