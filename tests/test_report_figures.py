"""The studies' figures in the HTML report: latency CDFs (fio's histogram and sockperf's every
round trip, from real tool output), throughput vs latency for Redis and MySQL, and MySQL
throughput vs CPU utilisation, from a stored run; CDFs pooled per point and environment."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from isotax.analysis.report_data import ReportData, analyze
from isotax.model import CellKey, CellStatus, Sample
from isotax.parsers import distributions
from isotax.parsers.fio import fio_samples
from isotax.parsers.sockperf import parse_sockperf_full_log
from isotax.report import figures, html, json_report
from isotax.store.base import EnvRecord
from isotax.store.sqlite import SQLiteStore

DATA = Path(__file__).parent / "data"

PLAN = """
name = "figures"
repetitions = 3
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
[[workloads]]
name = "rr"
params = { proto = "udp" }
[[workloads]]
name = "fio"
params = { pattern = "randread" }
[[workloads]]
name = "redis"
params = { connections = [1, 10] }
[[workloads]]
name = "mysql"
params = { threads = [1, 8] }
"""

SLOWER = {"native": 1.0, "runc": 1.25}  # runc's latencies are 25% longer, its rates 20% lower


def _scaled_cdf(cdf: list[list[float]], k: float) -> list[list[float]]:
    return [[round(v * k, 4), f] for v, f in cdf]


def _samples(workload: str, params: Mapping[str, Any], k: float) -> list[Sample]:
    """One repetition's samples: real fio and sockperf output, slowed by k; Redis and MySQL
    points whose latency grows with concurrency (the knee the figures should show)."""
    if workload == "fio":
        real = fio_samples((DATA / "fio" / "randread-4k-qd16.json").read_text())
        out = []
        for s in real:
            labels = dict(s.labels)
            if "clat_cdf_us" in labels:
                labels["clat_cdf_us"] = _scaled_cdf(labels["clat_cdf_us"], k)
            value = s.value / k if s.higher_is_better else s.value * k
            out.append(Sample(s.metric, value, s.unit, s.higher_is_better, labels))
        return out
    if workload == "rr":
        rtts = parse_sockperf_full_log((DATA / "sockperf" / "full-log-udp.csv").read_text())
        cdf = _scaled_cdf(distributions.from_values(rtts), k)
        return [Sample("transactions_per_s", 12000 / k, "trans/s", True),
                Sample("latency_p99_9_us", distributions.quantile(cdf, 0.999), "µs", False,
                       {"rtt_cdf_us": cdf, "broken_cdf_us": [[2.0, 0.5], [1.0, 1.0]]})]
    if workload == "redis":
        c = int(params["connections"])
        out = []
        for op in ("set", "get"):
            out += [Sample(f"{op}_requests_per_s", 50000 * c ** 0.5 / k, "req/s", True),
                    Sample(f"{op}_latency_p50_ms", 0.1 * c * k, "ms", False),
                    Sample(f"{op}_latency_p99_ms", 0.3 * c * k, "ms", False)]
        return out
    t = int(params["threads"])
    return [Sample("transactions_per_s", 400 * t ** 0.6 / k, "tx/s", True),
            Sample("latency_mean_ms", 2.5 * t ** 0.4 * k, "ms", False),
            Sample("latency_p95_ms", 4.0 * t ** 0.5 * k, "ms", False),
            Sample("host_cpu_utilization", min(95.0, 30.0 * t ** 0.5 * k), "%", False)]


POINTS = [("rr", {"proto": "udp"}), ("fio", {"pattern": "randread"}),
          ("redis", {"connections": 1}), ("redis", {"connections": 10}),
          ("mysql", {"threads": 1}), ("mysql", {"threads": 8})]


def figure_store(tmp_path: Path, run_id: str = "f1", slower: Mapping[str, float] = SLOWER,
                 hostname: str = "h") -> tuple[SQLiteStore, str]:
    """A stored run with every point the studies' figures need, in native and runc."""
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run(run_id, "figures", PLAN, 1, {"hostname": hostname, "cpus": 2})
    for env in slower:
        store.put_environment(EnvRecord(run_id, env, env, True, "", {}, {}, {}))
    for rep in (1, 2, 3):
        for workload, params in POINTS:
            for env, k in slower.items():
                store.commit_cell(run_id, CellKey(env, workload, params, rep), "1",
                                  CellStatus.OK, "", 0, 1, _samples(workload, params, k))
    store.set_run_status(run_id, "complete", 2)
    return store, run_id


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
    store.create_run("r", "figures", PLAN, 1, {"cpus": 2})
    for env in ("native", "runc"):
        store.put_environment(EnvRecord("r", env, env, True, "", {}, {}, {}))
        store.commit_cell("r", CellKey(env, "mysql", {"threads": 1}, 1), "1", CellStatus.OK,
                          "", 0, 1, _samples("mysql", {"threads": 1}, 1.0))
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
                figures.mysql_cpu(da, db, ("before", "after"))):
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
    plan = PLAN.replace('params = { pattern = "randread" }',
                        'params = { pattern = ["read", "write"], numjobs = [1, 8] }')
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("g", "figures", plan, 1, {"cpus": 2})
    for env in ("native", "runc"):
        store.put_environment(EnvRecord("g", env, env, True, "", {}, {}, {}))
    for rep in (1, 2):
        for pattern in ("read", "write"):
            for jobs in (1, 8):
                for env, k in SLOWER.items():
                    value = (100.0 if pattern == "read" else 50.0) * jobs ** 0.5 / k
                    store.commit_cell("g", CellKey(env, "fio", {"pattern": pattern,
                                                                "numjobs": jobs}, rep),
                                      "1", CellStatus.OK, "", 0, 1,
                                      [Sample(f"{pattern}_bw", value + rep, "MB/s", True)])
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
    verdict = Verdict(next(iter(Limiter)), "undetermined", ())
    data.explained = {
        ("native", "rr", pk): Explained(CostSummary("GB", 3, 0.9, 0.1, 1.0, 0.0, None),
                                        verdict, 3),
        ("runc", "rr", pk): Explained(CostSummary("GB", 3, 0.05, 120.0, 120.05, 0.0, None),
                                      verdict, 3)}
    svg = figures.cost(data)
    assert "▼ clipped: in env 0.05" in svg and 'id="clipped-0"' in svg
    assert figures.CLIP_NOTE in svg and svg.count("clipped: ") == 1  # the totals fit
    # Nothing beyond the axes, nothing marked.
    data.explained = {k: Explained(CostSummary("GB", 3, 0.9, 0.1 + i, 1.0 + i, 0.0, None),
                                   verdict, 3) for i, k in enumerate(data.explained)}
    assert "clipped" not in figures.cost(data)
    assert "clipped" not in figures.mysql_cpu(data)


def test_an_interval_past_the_utilisation_axis_is_marked(tmp_path: Path) -> None:
    """MySQL's throughput against CPU utilisation is drawn on 0-100%: a deviation that
    reaches past 100% is marked at the edge with where it ends."""
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("u", "figures", PLAN, 1, {"cpus": 2})
    for env in ("native", "runc"):
        store.put_environment(EnvRecord("u", env, env, True, "", {}, {}, {}))
        for rep, util in enumerate((90.0, 99.0, 100.0), start=1):
            store.commit_cell("u", CellKey(env, "mysql", {"threads": 1}, rep), "1",
                              CellStatus.OK, "", 0, 1,
                              [Sample("transactions_per_s", 400.0 + rep, "tx/s", True),
                               Sample("host_cpu_utilization", util, "%", False)])
    svg = figures.mysql_cpu(analyze(store, "u"))
    assert svg.count("▶ clipped: to 102%") == 2 and figures.CLIP_NOTE in svg
    assert 'id="clipped-0"' in svg and 'id="clipped-1"' in svg
