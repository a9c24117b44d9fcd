"""Export and the portable bundle: a run's rows, plan and fingerprint in one file, from which
`isotax report` on another machine (another directory here) makes the same report."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from support import DATA

from isotax.analysis.report_data import analyze
from isotax.model import CellKey, CellStatus, Sample
from isotax.report import FILENAMES, write_reports
from isotax.store.base import EnvRecord, StoreError
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
        store.put_environment(EnvRecord("r1", name, name, True, "", {"kind": name},
                                        {"xz-utils": "5.4.1"}, {"ready": 0.1}))
    params = {"corpus_mib": 16, "level": 2, "seed": 1, "threads": 0}
    for rep in (1, 2):
        for env, v in (("native", 10.0 + rep), ("runc", 9.0 + rep / 3)):
            summary = TelemetrySummary.from_json(
                json.loads((DATA / "cost" / f"{env}-compress-1.json").read_text()))
            store.commit_cell("r1", CellKey(env, "compress", params, rep), "1", CellStatus.OK,
                              "", rep, rep + 1, [Sample("throughput", v, "MB/s")],
                              (summary, {"t": [0.5]}))
    store.commit_cell("r0", CellKey("native", "compress", params, 1), "1", CellStatus.OK, "",
                      0, 1, [Sample("throughput", 1.0, "MB/s")])
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
