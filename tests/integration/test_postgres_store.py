"""The PostgreSQL store against a real server (Debian's postgresql, started by the fixture in a
temporary directory): the same answers as the SQLite store for the same writes, concurrent
writers that never mix their runs, and the CLI's run, runs, report and export on it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.store.base import SCHEMA_VERSION, CellOutcome, EnvRecord, Store, StoreError
from isotax.store.sqlite import SQLiteStore

pytestmark = pytest.mark.integration

WRITER = """
import sys
from isotax.model import CellKey, CellStatus, Sample
from isotax.store.base import CellOutcome
from isotax.store.postgres import PostgresStore
s = PostgresStore(sys.argv[1])
run = sys.argv[2]
s.create_run(run, "w", "", 1, {})
for i in range(int(sys.argv[3])):
    sample = Sample("throughput", float(i), "MB/s", True, {"writer": run})
    s.commit_cell(run, CellKey("native", "compress", {"i": i}, 1), "1",
                  CellOutcome(CellStatus.OK, "", [sample]), float(i), float(i) + 1)
s.set_run_status(run, "complete", 1.0)
"""


def _fill(store: Store) -> None:
    store.create_run("20261124-000000-p-aaaa", "p", "name = 'p'\n", 7, {"cpus": 2})
    store.create_run("20261124-000001-p-bbbb", "p", "", 7, {})
    store.put_environment(EnvRecord("20261124-000000-p-aaaa", "native", "native", True, "",
                                    EnvironmentDescription.from_stored({"kernel": "6.1"}),
                                    {"xz": "5.4"}, {"ready": 0.01}))
    store.put_environment(EnvRecord("20261124-000000-p-aaaa", "qemu", "qemu", False,
                                    "no kvm", EnvironmentDescription.from_stored({}), {}, {}))
    store.put_environment(EnvRecord("20261124-000000-p-aaaa", "native", "native", True, "",
                                    EnvironmentDescription.from_stored({"kernel": "6.1.1"}),
                                    {"xz": "5.4"}, {"ready": 0.02}))
    for rep in (1, 2):
        samples = [Sample("throughput", 9.75 + rep, "MB/s", True, {"b": 1, "a": [2]}),
                   Sample("cpu", 0.5, "s", False, {})]
        store.commit_cell("20261124-000000-p-aaaa", CellKey("native", "compress", {"level": 2},
                                                            rep), "3",
                          CellOutcome(CellStatus.OK, "", samples), 10.0 + rep, 11.5 + rep)
    store.commit_cell("20261124-000000-p-aaaa", CellKey("native", "compress", {"level": 2}, 1,
                                                        warmup=True), "3",
                      CellOutcome(CellStatus.FAILED, "xz exited 1"), 1.0, 2.0)
    store.put_run_meta("20261124-000000-p-aaaa", "adaptive", {"rounds": 2, "ended": None})
    store.put_run_meta("20261124-000000-p-aaaa", "adaptive", {"rounds": 3})
    store.set_run_status("20261124-000000-p-aaaa", "complete", 99.5)


def _read(store: Store) -> dict[str, object]:
    run = "20261124-000000-p-aaaa"
    r = store.get_run("20261124-000000")  # a unique prefix
    return {
        "run": (r.id, r.status, r.finished, r.plan_name, r.plan_toml, r.seed, dict(r.host),
                r.format_version),
        "runs": [x.id for x in store.list_runs()],
        "envs": [(e.name, e.kind, e.available, e.reason, e.describe.to_stored(), dict(e.tools),
                  dict(e.milestones)) for e in store.environments(run)],
        "cells": [(c.key.ident, c.workload_version, c.status, c.reason, c.started, c.ended,
                   [(s.metric, s.value, s.unit, s.higher_is_better, dict(s.labels))
                    for s in c.samples]) for c in store.cells(run)],
        "done": sorted(store.done_cells(run)),
        "meta": store.run_meta(run),
    }


def test_the_same_writes_read_back_the_same_from_either_store(pg_store_url: str,
                                                              tmp_path: Path) -> None:
    from isotax.store.postgres import PostgresStore

    lite, pg = SQLiteStore(tmp_path / "isotax.db"), PostgresStore(pg_store_url)
    try:
        for s in (lite, pg):
            _fill(s)
        assert _read(pg) == _read(lite)
        for s in (lite, pg):
            with pytest.raises(StoreError, match="is ambiguous"):
                s.get_run("20261124-00000")
            with pytest.raises(StoreError, match="is not in"):
                s.get_run("nope")
    finally:
        lite.close()
        pg.close()


def test_a_store_newer_than_this_isotax_is_refused(pg_store_url: str) -> None:
    import psycopg

    from isotax.store.postgres import PostgresStore

    PostgresStore(pg_store_url).close()
    with psycopg.connect(pg_store_url, autocommit=True) as con:
        con.execute("UPDATE meta SET value=%s WHERE key='schema_version'",
                    (str(SCHEMA_VERSION + 1),))
    with pytest.raises(StoreError, match="newer than this isotax"):
        PostgresStore(pg_store_url)


def test_concurrent_writers_keep_their_runs_apart(pg_store_url: str) -> None:
    from isotax.store.postgres import PostgresStore

    writers = [subprocess.Popen([sys.executable, "-c", WRITER, pg_store_url, f"run-{i}", "40"])
               for i in range(4)]
    assert [w.wait(300) for w in writers] == [0, 0, 0, 0]
    store = PostgresStore(pg_store_url)
    try:
        assert sorted(r.id for r in store.list_runs()) == [f"run-{i}" for i in range(4)]
        for i in range(4):
            cells = store.cells(f"run-{i}")
            assert [c.key.params["i"] for c in cells] == list(range(40))  # in commit order
            assert {s.labels["writer"] for c in cells for s in c.samples} == {f"run-{i}"}
            assert store.get_run(f"run-{i}").status == "complete"
    finally:
        store.close()


def test_run_report_runs_and_export_on_a_postgresql_store(pg_store_url: str, tmp_path: Path,
                                                          image: object) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "pg"\nrepetitions = 2\nwarmups = 0\n[[environments]]\n'
                    'name = "native"\nkind = "native"\n[[workloads]]\nname = "compress"\n'
                    'params = { corpus_mib = 1, threads = 1 }\n')
    results = tmp_path / "results"
    isotax = [sys.executable, "-m", "isotax"]
    done = subprocess.run([*isotax, "run", str(plan), "--store", pg_store_url, "--results",
                           str(results)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (results / "isotax.db").exists()  # the store is the server's
    runs = subprocess.run([*isotax, "runs", "--store", pg_store_url], capture_output=True,
                          text=True, timeout=60)
    run_id = next(w for w in runs.stdout.split() if w.endswith(tuple("0123456789abcdef"))
                  and "-pg-" in w)
    assert "complete" in runs.stdout
    report = subprocess.run([*isotax, "report", run_id, "--store", pg_store_url, "--out",
                             str(tmp_path / "report")], capture_output=True, text=True,
                            timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    assert run_id in (tmp_path / "report" / "results.json").read_text()
    bundle = tmp_path / "run.itx.tar.gz"
    export = subprocess.run([*isotax, "export", run_id, "--store", pg_store_url, "--out",
                             str(bundle)], capture_output=True, text=True, timeout=300)
    assert export.returncode == 0 and bundle.is_file(), export.stderr[-2000:]
    again = subprocess.run([*isotax, "report", str(bundle), "--out", str(tmp_path / "b")],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (tmp_path / "b" / "results.json").read_text() == \
        (tmp_path / "report" / "results.json").read_text()
