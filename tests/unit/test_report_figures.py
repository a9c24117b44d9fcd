"""The studies' figures in the HTML report: latency CDFs (fio's histogram and sockperf's every
round trip, from real tool output), throughput vs latency for Redis and MySQL, and MySQL
throughput vs CPU utilisation, from a stored run; CDFs pooled per point and environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import FIGURES_PLAN, SLOWER, figure_samples, figure_store

from isotax.analysis.report_data import ReportData, analyze
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.parsers import distributions
from isotax.report import figures, html, json_report, svg_figure
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.sqlite import SQLiteStore


@pytest.fixture
def data(tmp_path: Path) -> ReportData:
    store, run_id = figure_store(tmp_path)
    return analyze(store, run_id)


def test_cdfs_are_collected_pooled_and_checked(data: ReportData) -> None:
    keys = list(data.latency_cdfs)
    # In the plan's order; the label that is not a CDF (values descending) is left out.
    assert [(k[0], k[2], k[3]) for k in keys] == [("rr", "latency_p99_9_us", "rtt_cdf_us"),
                                                  ("fio", "read_clat_p50", "clat_cdf_us")]
    for key in keys:
        assert list(data.latency_cdfs[key]) == ["native", "runc"]
        assert data.cdf_runs[key] == {"native": 3, "runc": 3}
        native, runc = data.latency_cdfs[key]["native"], data.latency_cdfs[key]["runc"]
        assert distributions.valid(native) and distributions.valid(runc)
        # Three identical repetitions pool to the one CDF; runc's is native's, 25% later.
        for q in (0.5, 0.99, 0.999):
            assert distributions.quantile(runc, q) == pytest.approx(
                1.25 * distributions.quantile(native, q), rel=2e-3)


def test_every_figure_is_in_the_report(data: ReportData) -> None:
    page = html.render(data)
    for section in ("Throughput vs concurrency", "Throughput vs latency",
                    "Throughput vs CPU utilisation", "Latency distributions"):
        assert f">{section}</h3>" in page and f">{section}</a>" in page
    for title in ("redis: throughput vs connections", "mysql: throughput vs threads",
                  "redis SET: latency vs throughput", "redis GET: latency vs throughput",
                  "mysql OLTP read/write: latency vs throughput",
                  "mysql: throughput vs CPU utilisation",
                  "rr round trip: CDF", "fio read completion latency: CDF"):
        assert title in page, title
    assert page.count("tail: 1 - F") == 2
    assert page.count("<svg") == 9  # those 7, the summary and the bars


def test_figures_are_left_out_without_their_data(tmp_path: Path) -> None:
    """A run of one point per workload has no sweep, hence no curve; no CDF label, no CDF."""
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r", "figures", FIGURES_PLAN, 1, {"cpus": 2})
    for env in ("native", "runc"):
        store.put_environment(EnvRecord("r", env, env, True, "",
                                        EnvironmentDescription.from_stored({}), {}, {}))
        store.commit_cell("r", CellKey(env, "mysql", {"threads": 1}, 1), "1",
                          CellOutcome(CellStatus.OK, "",
                                      figure_samples("mysql", {"threads": 1}, 1.0)), 0, 1)
    d = analyze(store, "r")
    assert not d.latency_cdfs
    assert figures.throughput_latency(d, "mysql") == ""
    assert figures.concurrency(d, "mysql", "threads") == ""
    page = html.render(d)
    assert "Latency distributions" not in page and "Throughput vs latency" not in page
    # mysql vs CPU needs no sweep: one point per environment is still a comparison.
    assert "mysql: throughput vs CPU utilisation" in page


def test_overlay_draws_both_runs(tmp_path: Path) -> None:
    store_a, a = figure_store(tmp_path / "a", "a")
    store_b, b = figure_store(tmp_path / "b", "b", {"native": 1.0, "runc": 1.5})
    da, db = analyze(store_a, a), analyze(store_b, b)
    key = next(iter(da.latency_cdfs))
    svg = figures.latency_cdf(da, key, db, ("before", "after"))
    assert "runc [before]" in svg and "runc [after]" in svg
    for fig in (figures.concurrency(da, "redis", "connections", db, ("before", "after")),
                figures.throughput_latency(da, "mysql", db, ("before", "after")),
                figures.cpu_curve(da, "mysql", db, ("before", "after"))):
        assert "native [before]" in fig and "native [after]" in fig


def test_results_json_carries_the_cdfs(data: ReportData) -> None:
    doc = json.loads(json_report.render(data))
    rows = doc["latency_cdfs"]
    assert {(r["workload"], r["environment"], r["runs"]) for r in rows} == {
        (w, e, 3) for w in ("rr", "fio") for e in ("native", "runc")}
    for r in rows:
        assert distributions.valid(r["cdf_us"])


def test_sweeps_are_grouped_by_the_other_parameters(tmp_path: Path) -> None:
    """fio's numjobs swept for two patterns: one figure, a panel per pattern, each pattern's
    own headline metric; never one line through both patterns' points."""
    plan = FIGURES_PLAN.replace('params = { pattern = "randread" }',
                        'params = { pattern = ["read", "write"], numjobs = [1, 8] }')
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("g", "figures", plan, 1, {"cpus": 2})
    for env in ("native", "runc"):
        store.put_environment(EnvRecord("g", env, env, True, "",
                                        EnvironmentDescription.from_stored({}), {}, {}))
    for rep in (1, 2):
        for pattern in ("read", "write"):
            for jobs in (1, 8):
                for env, k in SLOWER.items():
                    value = (100.0 if pattern == "read" else 50.0) * jobs ** 0.5 / k
                    store.commit_cell("g", CellKey(env, "fio", {"pattern": pattern,
                                                                "numjobs": jobs}, rep), "1",
                                      CellOutcome(CellStatus.OK, "", [
                                          Sample(f"{pattern}_bw", value + rep, "MB/s", True)]),
                                      0, 1)
    d = analyze(store, "g")
    groups = figures.sweeps(d, "fio", "numjobs")
    assert [(g, [(x, m) for x, _, m in pts]) for g, pts in groups] == [
        ("pattern=read", [(1.0, "read_bw"), (8.0, "read_bw")]),
        ("pattern=write", [(1.0, "write_bw"), (8.0, "write_bw")])]
    assert figures.sweeps(d, "fio", "iodepth") == []  # not swept: no figure
    assert figures.sweep_knobs(d) == [("fio", "numjobs")]
    svg = figures.concurrency(d, "fio", "numjobs")
    assert "fio pattern=read: throughput vs numjobs" in svg
    assert "fio pattern=write: throughput vs numjobs" in svg


def test_bars_past_an_axis_are_marked_with_their_value(data: ReportData) -> None:
    """The CPU per unit of work on a log axis: an emulated VM's guest accounts a sliver of
    what QEMU burns, below the axis floor (a third of the smallest total); the bar is marked
    at the edge with its value, and the figure says what the mark means."""
    from isotax.analysis.cost import CostSummary
    from isotax.analysis.explain import Explained
    from isotax.analysis.limiter import Limiter, Verdict

    pk = next(r.params_key for r in data.rows if r.workload == "rr")
    verdict = Verdict(next(iter(Limiter)), "no clear limiter", ())
    data.explained = {
        ("native", "rr", pk): Explained(CostSummary("GB", 3, 0.9, 0.1, 1.0, 0.0, None),
                                        verdict, 3),
        ("runc", "rr", pk): Explained(CostSummary("GB", 3, 0.05, 120.0, 120.05, 0.0, None),
                                      verdict, 3)}
    svg = figures.cost(data)
    assert "▼ clipped: in env 0.05" in svg and 'id="clipped-0"' in svg
    assert svg_figure.CLIP_NOTE in svg and svg.count("clipped: ") == 1  # the totals fit
    # Nothing beyond the axes, nothing marked.
    data.explained = {k: Explained(CostSummary("GB", 3, 0.9, 0.1 + i, 1.0 + i, 0.0, None),
                                   verdict, 3) for i, k in enumerate(data.explained)}
    assert "clipped" not in figures.cost(data)
    assert "clipped" not in figures.cpu_curve(data, "mysql")


def test_an_interval_past_the_utilisation_axis_is_marked(tmp_path: Path) -> None:
    """MySQL's throughput against CPU utilisation is drawn on 0-100%: a deviation that
    reaches past 100% is marked at the edge with where it ends."""
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("u", "figures", FIGURES_PLAN, 1, {"cpus": 2})
    for env in ("native", "runc"):
        store.put_environment(EnvRecord("u", env, env, True, "",
                                        EnvironmentDescription.from_stored({}), {}, {}))
        for rep, util in enumerate((90.0, 99.0, 100.0), start=1):
            store.commit_cell("u", CellKey(env, "mysql", {"threads": 1}, rep), "1",
                              CellOutcome(CellStatus.OK, "",
                                          [Sample("transactions_per_s", 400.0 + rep, "tx/s", True),
                               Sample("host_cpu_utilization", util, "%", False)]), 0, 1)
    svg = figures.cpu_curve(analyze(store, "u"), "mysql")
    assert svg.count("▶ clipped: to 102%") == 2 and svg_figure.CLIP_NOTE in svg
    assert 'id="clipped-0"' in svg and 'id="clipped-1"' in svg
