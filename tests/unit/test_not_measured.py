"""A point that keeps every metric it can measure (issue 30, item 7): where one tool of a point
cannot run in an environment (sockperf's TCP server in gVisor), the cell passes with the other
tools' metrics, and the missing metric alone is n/a with its reason, in every report form."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from isotax.analysis.report_data import analyze
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import NOT_MEASURED, CellKey, CellStatus, Sample
from isotax.report import json_report, markdown, results_model
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.sqlite import SQLiteStore

PLAN = """name = "p"
repetitions = 2
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "gvisor"
kind = "gvisor"
[[workloads]]
name = "rr"
"""
WHY = "sockperf's TCP server cannot run in gVisor"
PARAMS = {"proto": "tcp", "seconds": 1, "placement": "same-cpu", "tail": True}


def _store(tmp_path: Path) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r", "p", PLAN, 1, {"hostname": "h", "cpus": 2})
    for env in ("native", "gvisor"):
        store.put_environment(EnvRecord("r", env, env, True, "",
                                        EnvironmentDescription.from_stored({}), {}, {}))
    for rep in (1, 2):
        store.commit_cell("r", CellKey("native", "rr", PARAMS, rep), "1",
                          CellOutcome(CellStatus.OK, "",
                                      [Sample("transactions_per_s", 70000.0 + rep, "trans/s"),
                                 Sample("latency_p99_9_us", 40.0 + rep, "µs", False)]), 0, 1)
        store.commit_cell("r", CellKey("gvisor", "rr", PARAMS, rep), "1",
                          CellOutcome(CellStatus.OK, "",
                                      [Sample("transactions_per_s", 9000.0 + rep, "trans/s", True,
                                        {NOT_MEASURED: {"latency_p99_9_us": WHY}})]), 0, 1)
    store.set_run_status("r", "complete", 2)
    return store


def test_the_missing_metric_alone_is_n_a_with_its_reason(tmp_path: Path) -> None:
    d = analyze(_store(tmp_path), "r")
    tail = next(r for r in d.rows if r.metric == "latency_p99_9_us")
    rate = next(r for r in d.rows if r.metric == "transactions_per_s")
    assert d.na_reason("gvisor", tail) == WHY
    assert d.na_reason("gvisor", rate) is None and (rate, "gvisor") in d.cells
    assert d.not_applicable == {}  # the point itself applies
    md = markdown.render(d)
    assert "| gvisor | rr (latency_p99_9_us only) |" in md and WHY in md
    doc = json_report.render(d)
    na = json.loads(doc)["not_applicable"]
    assert na == [{"environment": "gvisor", "workload": "rr", "params": tail.params_key,
                   "metric": "latency_p99_9_us", "reason": WHY}]
    jsonschema.Draft202012Validator(json.loads(results_model.SCHEMA_PATH.read_text())
                                    ).validate(json.loads(doc))
