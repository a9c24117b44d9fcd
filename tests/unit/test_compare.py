"""isotax compare: run B against run A per environment, point and metric, with intervals;
refused (one line, exit 2) when the hosts' fingerprints differ, unless --force."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import figure_store

from isotax.analysis.compare import NotComparable, compare
from isotax.analysis.report_data import analyze
from isotax.model import CellKey, CellStatus, Sample
from isotax.report import compare_html
from isotax.store.base import CellOutcome
from isotax.store.bundle import export_bundle
from isotax.store.sqlite import SQLiteStore

PLAN = 'name = "c"\n[[environments]]\nname = "native"\nkind = "native"\n'
HOST = {"hostname": "h", "kernel": "6.1", "thp_enabled": "madvise", "cpu_model": "X"}
PARAMS = {"corpus_mib": 16, "level": 2, "seed": 1, "threads": 0}


def _store(tmp_path: Path, host_b: dict[str, str]) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("a", "c", PLAN, 1, HOST)
    store.create_run("b", "c", PLAN, 1, host_b)
    for run, base in (("a", 100.0), ("b", 80.0)):  # B is 20% slower
        for rep, jitter in enumerate((-1.0, 0.0, 1.0, 0.5, -0.5), start=1):
            store.commit_cell(run, CellKey("native", "compress", PARAMS, rep), "1",
                              CellOutcome(CellStatus.OK, "",
                                          [Sample("throughput", base + jitter, "MB/s"),
                               Sample("cpu_per_mb", 50 + jitter, "CPU-ms/MB", False)]), 0, 1)
    store.commit_cell("a", CellKey("native", "fio", {"bs": "4k"}, 1), "1",
                      CellOutcome(CellStatus.OK, "", [Sample("read_bw", 1.0, "MB/s")]), 0, 1)
    return store


def test_ratios_of_b_over_a(tmp_path: Path) -> None:
    store = _store(tmp_path, HOST)
    c = compare(store.get_run("a"), store.cells("a"), store.get_run("b"), store.cells("b"))
    lines = {x.metric: x for x in c.lines}
    thr = lines["throughput"]
    assert thr.ratio.ratio == pytest.approx(0.8)
    # Judged by a confidence sequence on each run (5 values, 1% spread): B is worse, and
    # the CPU per MB, the same in both, cannot yet be called equivalent within ±2%.
    assert thr.judged is not None and thr.judged.high < 1 and thr.ratio.verdict == "worse"
    assert thr.judged.words().startswith("worse by 20.")
    cpu = lines["cpu_per_mb"].judged
    assert cpu is not None and cpu.low < 1 < cpu.high and cpu.verdict.value == "undecided"
    wider = compare(store.get_run("a"), store.cells("a"), store.get_run("b"), store.cells("b"),
                    margin=0.10)
    assert {x.metric: x.ratio.verdict for x in wider.lines}["cpu_per_mb"] == "equivalent"
    assert c.only_a == ["native|fio|bs=4k"] and c.only_b == []
    assert c.host_differences == []


def test_different_hosts_are_refused_unless_forced(tmp_path: Path) -> None:
    store = _store(tmp_path, {**HOST, "thp_enabled": "always"})
    a, b = store.get_run("a"), store.get_run("b")
    with pytest.raises(NotComparable, match="THP enabled: madvise vs always"):
        compare(a, store.cells("a"), b, store.cells("b"))
    forced = compare(a, store.cells("a"), b, store.cells("b"), force=True)
    assert forced.host_differences == ["THP enabled: madvise vs always"]
    assert forced.lines


def test_cli_compare_a_run_with_a_bundle(tmp_path: Path) -> None:
    store = _store(tmp_path, {**HOST, "kernel": "6.2"})
    bundle = export_bundle(store, "b", tmp_path / "b.itx.tar.gz")
    store.close()
    cli = [sys.executable, "-m", "isotax", "compare", "a", str(bundle), "--results",
           str(tmp_path), "--out", str(tmp_path / "cmp")]
    refused = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "kernel: 6.1 vs 6.2" in refused.stderr and "--force" in refused.stderr
    assert not (tmp_path / "cmp").exists()
    done = subprocess.run([*cli, "--force"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "**The hosts differ**" in md and "0.800 [" in md and "worse" in md
    doc = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert doc["host_differences"] == ["kernel: 6.1 vs 6.2"] and len(doc["lines"]) == 2
    page = (tmp_path / "cmp" / "compare.html").read_text()
    assert "The hosts differ" in page and "kernel: 6.1 vs 6.2" in page
    assert done.stdout.strip().splitlines()[-1] == \
        f"HTML comparison: {tmp_path / 'cmp' / 'compare.html'}"


def test_html_comparison_overlays_the_figures(tmp_path: Path) -> None:
    """B's runc is 1.5x slower than native where A's was 1.25x: the page says runc got worse,
    shows the tax in both runs, overlays every figure, and escapes a hostile host name."""
    # Five repetitions a run: with three, each run's confidence sequence at 2.5% (the two
    # together at 5%) bounds nothing yet, and every line is undecided.
    store_a, a = figure_store(tmp_path / "a", "a", hostname="<b>x</b>", reps=5)
    store_b, b = figure_store(tmp_path / "b", "b", {"native": 1.0, "runc": 1.5},
                              hostname="<b>x</b>", reps=5)
    c = compare(store_a.get_run(a), store_a.cells(a), store_b.get_run(b), store_b.cells(b))
    page = compare_html.render(c, analyze(store_a, a), analyze(store_b, b))
    assert "<script" not in page and "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    for section in ("B / A, headline metrics", "The isolation tax in A and in B",
                    "The studies' figures, B over A", "Every metric"):
        assert f">{section}</h2>" in page
    # runc's headline throughput: 0.833 of A's, worse; native's identical, equivalent.
    assert '<div class="worse">0.833' in page and '<div class="noise">1.000' in page
    # Two concurrency, three throughput-latency panels in two figures, MySQL vs CPU, two
    # CDFs: each with both runs in its legend; plus the B / A and the tax figures.
    assert page.count("<svg") == 9 and page.count("runc [B]") >= 7
    assert page.count("tail: 1 - F") == 2
