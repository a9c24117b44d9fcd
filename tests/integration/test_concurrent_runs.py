"""Two `isotax run`s on one host and one store (issue 17): by default the second waits for the
first to finish measuring; with --beside they measure together and every cell either takes
while the other measures is recorded and warned about, naming the other run. `isotax runs`
shows which runs are live and their PIDs; a live run cannot be resumed by another process;
the store passes SQLite's integrity check."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import requires_root_and

pytestmark = [pytest.mark.integration, requires_root_and("debootstrap")]

PLAN = """
name = "{name}"
seed = 4
repetitions = {reps}
warmups = 0
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "compress"
params = {{ corpus_mib = 2, threads = 1 }}
"""
ISOTAX = [sys.executable, "-m", "isotax"]


def _start(tmp: Path, name: str, reps: int, results: Path, *extra: str) -> subprocess.Popen[str]:
    plan = tmp / f"{name}.toml"
    plan.write_text(PLAN.format(name=name, reps=reps))
    log = (tmp / f"{name}.log").open("w")
    return subprocess.Popen([*ISOTAX, "run", "--results", str(results), "--no-report", *extra,
                             str(plan)], stdout=log, stderr=subprocess.STDOUT, text=True)


def _runs(db: Path) -> dict[str, tuple[str, float, float | None]]:
    """plan name -> (run id, first cell's start, run's finish)."""
    con = sqlite3.connect(db, timeout=30)
    try:
        return {plan: (rid, first, finished) for rid, plan, first, finished in con.execute(
            "SELECT r.id, r.plan_name, (SELECT min(started) FROM cells c WHERE c.run_id = r.id),"
            " r.finished FROM runs r")}
    finally:
        con.close()


def _live(results: Path, plan_name: str, timeout: float = 300) -> str:
    """Wait until `isotax runs` shows the run of plan_name measuring; its row."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (results / "isotax.db").exists():
            out = subprocess.run([*ISOTAX, "runs", "--results", str(results)],
                                 capture_output=True, text=True, timeout=60).stdout
            row = next((ln for ln in out.splitlines() if plan_name in ln), "")
            if "measuring, PID" in row:
                return row
        time.sleep(0.5)
    raise AssertionError(f"{plan_name} never showed as measuring")


def _meta(db: Path, run_id: str) -> str:
    con = sqlite3.connect(db, timeout=30)
    try:
        row = con.execute("SELECT value_json FROM run_meta WHERE run_id = ? AND key = "
                          "'concurrent'", (run_id,)).fetchone()
        return row[0] if row else ""
    finally:
        con.close()


def test_a_second_run_waits_then_measures_alone(tmp_path: Path, image: object) -> None:
    results = tmp_path / "results"
    first = _start(tmp_path, "first", 12, results)
    row = _live(results, "first")
    assert f"PID {first.pid}" in row
    second = _start(tmp_path, "second", 3, results)
    # Resuming a run that a live process is measuring is refused in one line.
    runs = _runs(results / "isotax.db")
    again = subprocess.run([*ISOTAX, "run", "--results", str(results), "--resume",
                            runs["first"][0]], capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and f"is running now (PID {first.pid})" in again.stderr
    assert first.wait(600) == 0, (tmp_path / "first.log").read_text()[-2000:]
    assert second.wait(600) == 0, (tmp_path / "second.log").read_text()[-2000:]
    said = (tmp_path / "second.log").read_text()
    assert f"waiting for run {runs['first'][0]} (PID {first.pid}) to end" in said
    runs = _runs(results / "isotax.db")
    finished = runs["first"][2]
    assert finished is not None and runs["second"][1] >= finished  # it measured alone
    assert _meta(results / "isotax.db", runs["second"][0]) == ""
    con = sqlite3.connect(results / "isotax.db")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()


def test_runs_beside_each_other_warn_naming_the_other(tmp_path: Path, image: object) -> None:
    results = tmp_path / "results"
    first = _start(tmp_path, "one", 12, results)
    _live(results, "one")
    second = _start(tmp_path, "two", 4, results, "--beside")
    assert second.wait(600) == 0, (tmp_path / "two.log").read_text()[-2000:]
    assert first.wait(600) == 0, (tmp_path / "one.log").read_text()[-2000:]
    runs = _runs(results / "isotax.db")
    one, two = runs["one"][0], runs["two"][0]
    assert "measuring beside run " + one in (tmp_path / "two.log").read_text()
    # Each run's overlapping cells name the other run, with its PID.
    assert f'"{one}": {{"pid": {first.pid}' in _meta(results / "isotax.db", two)
    assert f'"{two}": {{"pid": {second.pid}' in _meta(results / "isotax.db", one)
    report = subprocess.run([*ISOTAX, "report", two, "--results", str(results), "--out",
                             str(tmp_path / "report")], capture_output=True, text=True,
                            timeout=300)
    assert report.returncode == 0, report.stderr[-2000:]
    md = (tmp_path / "report" / "report.md").read_text()
    assert f"ran while run {one} (PID {first.pid}) measured on this host too" in md
    con = sqlite3.connect(results / "isotax.db")
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
