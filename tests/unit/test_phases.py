"""Where a run's wall time went (run_meta["phases"]): the breakdown's arithmetic, and its section
in the Markdown and HTML reports and its value in results.json."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import ROOT, hostile_store

from isotax.analysis.phases import OVERHEAD_TARGET, PHASES, breakdown
from isotax.analysis.report_data import analyze
from isotax.report import html, json_report, markdown

SAMPLE: dict[str, Any] = {
    "wall_s": 512.3,
    "seconds": {"workload": 401.2, "warmup": 30.1, "prepare": 20.5, "environments": 25.0,
                "telemetry": 5.2, "store": 1.1, "loadgen": 4.0, "setup": 3.0, "other": 22.2},
    "report_s": 6.0}


def test_the_sample_adds_up() -> None:
    b = breakdown(SAMPLE)
    assert b is not None
    assert b.wall_s == 512.3 and b.report_s == 6.0 and b.total_s == pytest.approx(518.3)
    assert [r.name for r in b.rows] == [name for name, _, _ in PHASES]  # the display order
    assert all(r.description for r in b.rows)
    assert sum(r.seconds for r in b.rows) == pytest.approx(b.total_s)
    assert sum(r.share for r in b.rows) == pytest.approx(1.0)
    assert b.workload_share == pytest.approx((401.2 + 30.1 + 20.5) / 518.3)
    assert b.overhead_s == pytest.approx(25.0 + 5.2 + 1.1 + 4.0 + 3.0 + 22.2 + 6.0)
    assert b.workload_share + b.overhead_share == pytest.approx(1.0)
    assert b.overhead_share == pytest.approx(66.5 / 518.3)  # 12.8%: over the 5% goal
    assert not b.within() and b.within(0.2) and OVERHEAD_TARGET == 0.05
    top = b.largest_overhead()
    assert top is not None and top.name == "environments" and not top.workload
    assert b.seconds == SAMPLE["seconds"]  # the report's seconds are not a stored phase


def test_within_the_goal_without_a_report() -> None:
    b = breakdown({"wall_s": 1000.0, "seconds": {"workload": 900.0, "warmup": 60.0,
                                                 "environments": 20.0, "store": 5.0}})
    assert b is not None and b.report_s is None
    assert "report" not in [r.name for r in b.rows]
    # Missing phases are 0; a missing "other" is the rest of the wall time.
    assert dict((r.name, r.seconds) for r in b.rows)["prepare"] == 0.0
    assert b.seconds["other"] == pytest.approx(15.0)
    assert b.overhead_s == pytest.approx(40.0) and b.overhead_share == pytest.approx(0.04)
    assert b.workload_share == pytest.approx(0.96) and b.within()
    assert b.within(OVERHEAD_TARGET) and not b.within(0.03)


@pytest.mark.parametrize("meta", [
    None, {}, [], "phases", 42,
    {"seconds": {"workload": 1.0}},  # no wall time
    {"wall_s": 0, "seconds": {}},
    {"wall_s": -5.0, "seconds": {}},
    {"wall_s": "512", "seconds": {}},
    {"wall_s": math.nan, "seconds": {}},
    {"wall_s": True, "seconds": {}},
    {"wall_s": 10.0},  # no seconds
    {"wall_s": 10.0, "seconds": [1, 2]},
    {"wall_s": 10.0, "seconds": {"workload": "a lot"}},
    {"wall_s": 10.0, "seconds": {"workload": -1.0}},
    {"wall_s": 10.0, "seconds": {"workload": math.inf}},
    {"wall_s": 10.0, "seconds": {"workload": 5.0}, "report_s": "soon"},
])
def test_malformed_or_missing_is_none(meta: Any) -> None:
    assert breakdown(meta) is None


def test_unknown_phases_are_ignored() -> None:
    b = breakdown({"wall_s": 10.0, "seconds": {"workload": 9.0, "later": 3.0}})
    assert b is not None and "later" not in b.seconds and b.seconds["other"] == 1.0


def test_the_reports_show_where_the_time_went(tmp_path: Path) -> None:
    store, run_id = hostile_store(tmp_path)
    store.put_run_meta(run_id, "phases", SAMPLE)
    d = analyze(store, run_id)
    md = markdown.render(d)
    assert "## Where the time went" in md
    assert "| phase | seconds | share |" in md
    assert "| workload | 401.2 | 77.4% |" in md and "| report | 6.0 | 1.2% |" in md
    assert "| total | 518.3 | 100% |" in md
    line = ("Outside the workloads: 66.5 s (12.8% of the run's wall time; isotax's goal is at "
            "most 5%).")
    assert line in md
    assert "**Over the goal**: the largest part outside the workloads is environments" in md
    # Near the end: after the results, before the appendix-like sections.
    assert md.index("## Results") < md.index("## Where the time went") < md.index("## Plan")
    page = html.render(d)
    assert ">Where the time went</h2>" in page and "href=#where-the-time-went" in page
    assert "<td>environments</td>" in page and "<b>Over the goal</b>" in page
    assert line.replace("'", "&#x27;") in page or line in page
    doc = json.loads(json_report.render(d))
    assert doc["phases"] == {
        "wall_s": 512.3, "report_s": 6.0, "seconds": SAMPLE["seconds"],
        "workload_share": pytest.approx(451.8 / 518.3),
        "overhead_share": pytest.approx(66.5 / 518.3), "overhead_target": 0.05}


def test_within_the_goal_names_no_culprit(tmp_path: Path) -> None:
    store, run_id = hostile_store(tmp_path)
    store.put_run_meta(run_id, "phases", {"wall_s": 100.0, "seconds": {"workload": 97.0,
                                                                        "store": 1.0}})
    md = markdown.render(analyze(store, run_id))
    assert "Outside the workloads: 3.0 s (3.0% of the run's wall time" in md
    assert "Over the goal" not in md


def test_a_run_without_phases_has_none(tmp_path: Path) -> None:
    store, run_id = hostile_store(tmp_path)
    store.put_run_meta(run_id, "other", {"x": 1}, verbatim=True)  # an unknown key
    d = analyze(store, run_id)
    assert "Where the time went" not in markdown.render(d)
    assert "Where the time went" not in html.render(d)
    doc = json.loads(json_report.render(d))
    assert "phases" in doc and doc["phases"] is None


def test_a_malformed_one_renders_as_none(tmp_path: Path) -> None:
    store, run_id = hostile_store(tmp_path)
    with pytest.raises(ValueError, match="run meta 'phases': wall_s"):
        store.put_run_meta(run_id, "phases", {"wall_s": "long", "seconds": None})
    # as an older or foreign store may hold it: copied verbatim, read as absent
    store.put_run_meta(run_id, "phases", {"wall_s": "long", "seconds": None}, verbatim=True)
    d = analyze(store, run_id)
    assert "Where the time went" not in markdown.render(d)
    assert json.loads(json_report.render(d))["phases"] is None


def test_the_benchmark_reads_a_stored_run(tmp_path: Path) -> None:
    """benchmarks/time_to_verdict.py --run: the phase table, the goal and the verdict counts;
    n/a for what a run did not store."""
    store, run_id = hostile_store(tmp_path)
    script = [sys.executable, str(ROOT / "benchmarks" / "time_to_verdict.py"), "--run", run_id,
              "--results", str(tmp_path)]
    bare = subprocess.run(script, capture_output=True, text=True, check=True).stdout
    assert "where the time went: n/a" in bare and "verdicts: n/a" in bare
    store.put_run_meta(run_id, "phases", SAMPLE)
    store.put_run_meta(run_id, "sequential", {
        "decided": 18, "total": 24,
        "counts": {"worse": 10, "better": 2, "equivalent": 6, "undecided": 6}})
    out = subprocess.run(script, capture_output=True, text=True, check=True).stdout
    assert "(run 08:32 + report 00:06)" in out
    assert "  environments      25.0 s    4.8%" in out and "100.0%" in out
    assert "66.5 s = 12.8% of the wall time, goal at most 5%: OVER" in out
    assert "verdicts: 18 of 24 decided (worse 10, better 2, equivalent 6, undecided 6)" in out


def test_the_cli_stores_the_reports_writing_time_beside_the_runs_phases(tmp_path: Path) -> None:
    from isotax.cli.common import store_report_time as _store_report_time
    from isotax.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r1", "p", "", 1, {})
    store.create_run("r2", "p", "", 1, {})
    store.put_run_meta("r1", "phases", {"wall_s": 10.0, "seconds": {"workload": 9.0}})
    _store_report_time(store, "r1", 1.23456)
    _store_report_time(store, "r2", 2.0)  # a run without phases (an older one): left as is
    assert store.run_meta("r1")["phases"] == {"wall_s": 10.0, "seconds": {"workload": 9.0},
                                              "report_s": 1.235}
    assert "phases" not in store.run_meta("r2")
