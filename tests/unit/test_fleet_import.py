"""Copying a run between stores through the store protocol (store.transfer), and `isotax
import`: a bundle's run comes into the store as it was recorded (times, environments in
order, cells with samples, telemetry and series, meta, status), the same report comes out of
it, and a run already there is refused, never overwritten."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import DATA

from isotax.analysis.report_data import analyze
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.report import write_reports
from isotax.store.base import CellOutcome, EnvRecord, StoreError
from isotax.store.bundle import export_bundle
from isotax.store.sqlite import SQLiteStore
from isotax.store.transfer import RunExists, copy_run, has_run
from isotax.telemetry.summary import TelemetrySummary

PLAN = """
name = "t"
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


def _store(path: Path) -> SQLiteStore:
    store = SQLiteStore(path)
    store.create_run("r1", "t", PLAN, 3, {"hostname": "h1", "cpus": 2}, created=1000.5)
    for name in ("runc", "native"):  # not alphabetical: the order is kept
        store.put_environment(EnvRecord("r1", name, name, True, "",
                                        EnvironmentDescription.from_stored({"kind": name}),
                                        {"xz-utils": "5.4.1"}, {"ready": 0.1}))
    params = {"corpus_mib": 16, "level": 2, "seed": 1, "threads": 0}
    summary = TelemetrySummary.from_json(
        json.loads((DATA / "cost" / "native-compress-1.json").read_text()))
    for rep in (1, 2):
        for env, v in (("runc", 9.0 + rep), ("native", 10.0 + rep)):
            store.commit_cell("r1", CellKey(env, "compress", params, rep), "1",
                              CellOutcome(CellStatus.OK, "", [Sample("throughput", v, "MB/s")],
                                          (summary, {"t": [0.5, rep]})), rep, rep + 1)
    store.commit_cell("r1", CellKey("runc", "compress", params, 3), "1",
                      CellOutcome(CellStatus.FAILED, "xz exited 1"), 5, 6)
    store.put_run_meta("r1", "fleet", {"id": "fleet-x", "host": "h1", "address": "10.0.0.1"})
    store.set_run_status("r1", "complete", 2000.25)
    return store


def _rows(store: SQLiteStore, run_id: str) -> dict[str, object]:
    return {
        "run": store.get_run(run_id),
        "envs": store.environments(run_id),
        "cells": [(c.key, c.workload_version, c.status, c.reason, c.started, c.ended,
                   c.samples) for c in store.cells(run_id)],
        "telemetry": [(s.to_json(), store.telemetry_series(cid))
                      for cid, s in sorted(store.telemetry(run_id).items())],
        "meta": store.run_meta(run_id),
    }


def test_copy_keeps_everything_and_never_overwrites(tmp_path: Path) -> None:
    src, dst = _store(tmp_path / "a.db"), SQLiteStore(tmp_path / "b.db")
    assert not has_run(dst, "r1")
    rec = copy_run(src, "r1", dst)
    assert rec.id == "r1" and has_run(dst, "r1")
    assert _rows(dst, "r1") == _rows(src, "r1")
    with pytest.raises(RunExists, match="run r1 is already in the store; nothing was imported"):
        copy_run(src, "r1", dst)
    assert has_run(dst, "r1") and not has_run(dst, "r")  # exact ids, not prefixes
    src.close()
    dst.close()


def test_import_a_bundle_gives_the_same_report(tmp_path: Path) -> None:
    src = _store(tmp_path / "src" / "isotax.db")
    original = write_reports(analyze(src, "r1"), tmp_path / "original")
    bundle = export_bundle(src, "r1", tmp_path / "r1.itx.tar.gz")
    src.close()
    results = tmp_path / "results"
    isotax = [sys.executable, "-m", "isotax"]
    p = subprocess.run([*isotax, "import", str(bundle), "--results", str(results)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == f"imported run r1 (t, complete) from {bundle}\n"
    store = SQLiteStore(results / "isotax.db")
    again = write_reports(analyze(store, "r1"), tmp_path / "again")
    assert store.get_run("r1").created == 1000.5
    store.close()
    for a, b in zip(original, again, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    # again: refused in one line, exit 2; a file that is no bundle likewise
    junk = tmp_path / "junk.itx.tar.gz"
    junk.write_bytes(b"no")
    p = subprocess.run([*isotax, "import", str(bundle), str(junk), "--results", str(results)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.splitlines()
    assert lines[0] == (f"isotax: {bundle}: run r1 is already in {results / 'isotax.db'}; "
                        "nothing was imported (to replace it, delete it there first)")
    assert lines[1].startswith(f"isotax: {junk}: {junk} is not a readable bundle")
    assert len(lines) == 2


def test_a_newer_format_is_refused(tmp_path: Path) -> None:
    src = SQLiteStore(tmp_path / "a.db")
    src.create_run("r9", "t", PLAN, 1, {}, format_version=99)
    with pytest.raises(StoreError, match="results format 99, newer than this isotax's"):
        copy_run(src, "r9", SQLiteStore(tmp_path / "b.db"))
    src.close()
