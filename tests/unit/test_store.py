from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from support import DATA

from isotax.model import CellKey, CellStatus, Sample
from isotax.store.base import CellOutcome, StoreError
from isotax.store.sqlite import SQLiteStore
from isotax.telemetry.summary import TelemetrySummary


def _store(tmp_path: Path) -> SQLiteStore:
    s = SQLiteStore(tmp_path / "isotax.db")
    s.create_run("20261122-120000-quick-ab12", "quick", "name='quick'", 1, {"hostname": "h"})
    return s


def test_roundtrip_and_done_cells(tmp_path: Path) -> None:
    s = _store(tmp_path)
    key = CellKey("runc", "compress", {"level": 2, "threads": 0}, 1)
    s.commit_cell(s.list_runs()[0].id, key, "1",
                  CellOutcome(CellStatus.OK, "",
                              [Sample("throughput", 12.5, "MB/s", True, {"threads": 2})]), 1.0, 2.0)
    run = s.get_run("20261122-120000")  # a unique prefix is enough
    assert run.plan_name == "quick" and run.status == "running"
    (cell,) = s.cells(run.id)
    assert cell.key == key and cell.samples[0].value == 12.5
    assert cell.samples[0].labels["threads"] == 2
    assert s.done_cells(run.id) == {key.ident}
    s.close()
    # A new process sees the committed cell: it was on disk the moment commit_cell returned.
    again = SQLiteStore(tmp_path / "isotax.db")
    assert again.done_cells(run.id) == {key.ident}


def test_a_cell_is_committed_once(tmp_path: Path) -> None:
    s = _store(tmp_path)
    rid = s.list_runs()[0].id
    key = CellKey("native", "compress", {}, 1)
    s.commit_cell(rid, key, "1", CellOutcome(CellStatus.OK, "", [Sample("x", 1, "u")]), 0, 1)
    with pytest.raises(sqlite3.IntegrityError):
        s.commit_cell(rid, key, "1", CellOutcome(CellStatus.OK, "", [Sample("x", 2, "u")]), 0, 1)
    assert len(s.cells(rid)) == 1  # the failed insert left nothing half-written


def test_failed_cells_carry_no_numbers(tmp_path: Path) -> None:
    s = _store(tmp_path)
    rid = s.list_runs()[0].id
    with pytest.raises(ValueError, match="never numbers"):
        s.commit_cell(rid, CellKey("n", "w", {}, 1), "1",
                      CellOutcome(CellStatus.FAILED, "bad", [Sample("x", 1, "u")]), 0, 1)


def test_samples_need_units_and_finite_values() -> None:
    with pytest.raises(ValueError, match="no unit"):
        Sample("x", 1.0, "")
    with pytest.raises(ValueError, match="non-finite"):
        Sample("x", float("nan"), "u")


def test_delete_cascades(tmp_path: Path) -> None:
    s = _store(tmp_path)
    rid = s.list_runs()[0].id
    s.commit_cell(rid, CellKey("n", "w", {}, 1), "1",
                  CellOutcome(CellStatus.OK, "", [Sample("x", 1, "u")]), 0, 1)
    s.delete_run(rid)
    assert s.db.execute("SELECT count(*) FROM samples").fetchone()[0] == 0
    assert s.db.execute("SELECT count(*) FROM cells").fetchone()[0] == 0


def test_unknown_run_and_newer_schema(tmp_path: Path) -> None:
    s = _store(tmp_path)
    with pytest.raises(StoreError, match="is not in"):
        s.get_run("nope")
    s.db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    s.close()
    with pytest.raises(StoreError, match="upgrade isotax"):
        SQLiteStore(tmp_path / "isotax.db")


def test_telemetry_and_run_meta_round_trip_and_cascade(tmp_path: Path) -> None:
    s = _store(tmp_path)
    rid = s.list_runs()[0].id
    stored = (DATA / "cost" / "runc-throughput-1.json").read_text()
    summary = TelemetrySummary.from_json(json.loads(stored))
    cid = s.commit_cell(rid, CellKey("n", "w", {}, 1), "1",
                        CellOutcome(CellStatus.OK, "",
                                    [Sample("x", 1, "u")], (summary, {"t": [0.0, 0.5]})), 0, 1)
    other = s.commit_cell(rid, CellKey("n", "w", {}, 2), "1",
                          CellOutcome(CellStatus.OK, "", [Sample("x", 2, "u")]), 0, 1)
    assert s.telemetry(rid) == {cid: summary}
    # the store keeps the summary's own JSON
    raw = s.db.execute("SELECT summary_json FROM telemetry WHERE cell_id=?", (cid,)).fetchone()
    assert json.loads(raw[0]) == summary.to_json()
    assert s.telemetry_series(cid) == {"t": [0.0, 0.5]}
    assert s.telemetry_series(other) == {}
    s.put_run_meta(rid, "adaptive", {"ended": "target"})
    s.put_run_meta(rid, "adaptive", {"ended": "budget"})
    assert s.run_meta(rid) == {"adaptive": {"ended": "budget"}}
    s.delete_run(rid)
    assert s.db.execute("SELECT count(*) FROM telemetry").fetchone()[0] == 0
    assert s.db.execute("SELECT count(*) FROM run_meta").fetchone()[0] == 0


def test_schema_1_store_is_upgraded_in_place(tmp_path: Path) -> None:
    s = _store(tmp_path)
    rid = s.list_runs()[0].id
    s.db.execute("DROP TABLE telemetry")
    s.db.execute("DROP TABLE run_meta")
    s.db.execute("UPDATE meta SET value='1' WHERE key='schema_version'")
    s.close()
    s = SQLiteStore(tmp_path / "isotax.db")
    assert s.get_run(rid).id == rid  # nothing lost
    assert s.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == "2"
    assert s.telemetry(rid) == {}
