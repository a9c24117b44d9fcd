"""The report draws a workload the way its own FigureHints say, read by name from the
registry; a stored run of a workload no longer registered (an older isotax's, a bundle from
elsewhere) renders with tables only, never a crash."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from isotax import protocols
from isotax.analysis.report_data import ReportData, analyze
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.protocols import FigureHints, Instance, LoadGen, Params, ParamSpec, Port
from isotax.report import csv_report, figures, html, json_report, lifecycle, markdown
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.sqlite import SQLiteStore
from isotax.workloads.base import BaseWorkload

PLAN = """
name = "retired"
repetitions = 2
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
[[workloads]]
name = "test-retired"
params = { clients = [1, 4] }
"""


def _stored(tmp_path: Path) -> ReportData:
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r1", "retired", PLAN, 1, {"hostname": "h", "cpus": 2})
    for env in ("native", "runc"):
        store.put_environment(EnvRecord("r1", env, env, True, "",
                                        EnvironmentDescription.from_stored({}), {}, {}))
    for rep in (1, 2):
        for clients in (1, 4):
            for env, k in (("native", 1.0), ("runc", 0.8)):
                curve = [{"instances": 1, "total_mib": 10.0 * k}]
                key = CellKey(env, "test-retired", {"clients": clients}, rep)
                store.commit_cell("r1", key, "1", CellOutcome(CellStatus.OK, "", [
                                      Sample("ops_per_s", 100.0 * clients * k + rep, "ops/s",
                                             True, {"curve": curve}),
                                      Sample("start_ms", 5.0 / k + rep, "ms", False),
                                      Sample("ready_ms", 9.0 / k + rep, "ms", False)]), 0, 1)
    store.set_run_status("r1", "complete", 2)
    return analyze(store, "r1")


class Retired(BaseWorkload):
    """What "test-retired" would say of itself, were it registered."""

    name: ClassVar[str] = "test-retired"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "test only"
    params: ClassVar[Sequence[ParamSpec]] = (ParamSpec("clients", int, 1, "clients"),)
    tools: ClassVar[Mapping[str, Sequence[str]]] = {}
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[Mapping[str, Port]] = {}
    packages: ClassVar[Sequence[str]] = ()
    figures: ClassVar[FigureHints] = FigureHints(bars=True, concurrency=("clients",),
                                                 phases=("start", "ready"), curve="curve")

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        raise AssertionError("never run: the store has its results")


def test_an_unregistered_workload_renders_with_tables_only(tmp_path: Path) -> None:
    assert "test-retired" not in protocols.workloads()
    d = _stored(tmp_path)
    assert d.workloads() == ["test-retired"]
    md = markdown.render(d)
    assert "test-retired" in md and "ops_per_s" in md
    page = html.render(d)
    assert "test-retired" in page
    json_report.render(d)
    csv_report.render(d)
    # Nothing drawn beyond what every workload gets.
    assert figures.bars(d) == ""
    assert figures.sweep_knobs(d) == []
    assert figures.phase_workloads(d) == [] and lifecycle.startup_blocks(d) == []
    assert d.density_curves == {}


def test_the_registered_hints_choose_the_figures(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(protocols.WORKLOADS, Retired.name, Retired)
    d = _stored(tmp_path)
    assert "ops_per_s" in figures.bars(d)
    assert figures.sweep_knobs(d) == [("test-retired", "clients")]
    assert "test-retired: throughput vs clients" in figures.concurrency(d, "test-retired",
                                                                        "clients")
    # Its phases: a table of each, and the milestones among them (PHASES) as bars.
    assert figures.phase_workloads(d) == ["test-retired"]
    blocks = lifecycle.startup_blocks(d)
    assert blocks and "ready" in markdown.render(d)
    assert "ready" in figures.startup(d, "test-retired")
    assert set(d.density_curves) == {"native", "runc"}
