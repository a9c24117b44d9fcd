"""Benchmark commands cannot rot (issue 30, item 6): each command that measures runs for real
at its smallest size, as a user would type it, and must exit 0 with its result line. (Every
command answering --help: tests/unit/test_bench_commands.py.) design_side_by_side runs two
designs' quick plans for 10 minutes each: its pure parts are tested in
tests/unit/test_bench_scripts.py, and its command is run by hand (docs/statistics.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import requires_root_and

pytestmark = [pytest.mark.integration, requires_root_and("runc", "debootstrap")]

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
TINY_AA = """
name = "tiny-aa"
repetitions = 2
warmups = 0
aa = true
[verdicts]
max_repetitions = 2
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "compress"
params = { corpus_mib = 1, threads = 1 }
"""


def _bench(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([sys.executable, str(BENCHMARKS / args[0]), *args[1:]], cwd=REPO,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def test_harness_overhead_at_its_smallest() -> None:
    p = _bench("harness_overhead.py", "--mib", "1", "--reps", "2")
    assert "ratio isotax/by hand:" in p.stdout


def test_aa_canary_time_to_verdict_and_host_spreads_at_their_smallest(tmp_path: Path) -> None:
    plan = tmp_path / "aa.toml"
    plan.write_text(TINY_AA)
    results = tmp_path / "results"
    p = _bench("aa_canary.py", "--runs", "1", "--plan", str(plan), "--results", str(results),
               "--json", str(tmp_path / "aa.json"))
    assert json.loads((tmp_path / "aa.json").read_text())["runs"], p.stdout
    p = _bench("time_to_verdict.py", str(plan), "--results", str(results))
    from isotax.store.sqlite import open_store

    store = open_store(results, create=False)
    runs = [r.id for r in store.list_runs()]
    store.close()
    assert len(runs) == 2, runs  # aa_canary's, and time_to_verdict's
    _bench("host_spreads.py", *runs, "--results", str(results))
    p = _bench("decision_ceiling.py", "--plan", str(plan), "--results", str(results),
               "--sims", "2", "--budgets", "30", "--json", str(tmp_path / "ceiling.json"))
    assert "budget      30 s of cells" in p.stdout, p.stdout
    assert json.loads((tmp_path / "ceiling.json").read_text())["ratios"], p.stdout


def test_variance_components_at_its_smallest(tmp_path: Path) -> None:
    _bench("variance_components.py", "--minutes", "0.3", "--phases", "back-to-back",
           "--param", "corpus_mib=1", "--json", str(tmp_path / "vc.json"))
    assert json.loads((tmp_path / "vc.json").read_text())["runs"]


def test_soak_at_its_smallest(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    p = subprocess.run([sys.executable, str(BENCHMARKS / "soak.py"), "--cells", "16",
                        "--every", "8", "--json", str(out)], cwd=REPO, capture_output=True,
                       text=True, timeout=900)
    doc = json.loads(out.read_text())
    try:
        # 16 cells are too few for its flatness verdicts (they start at cell 200): the
        # command itself must work, the run complete and every checkpoint be taken.
        assert doc["rc"] == 0 and doc["cells"] == 16, p.stdout[-3000:] + p.stderr[-3000:]
        # a checkpoint each time --every more cells are in, while the runner lives (the last
        # may fall after it ended)
        taken = [c["cells"] for c in doc["points"]]
        assert taken and 8 <= taken[0] <= 16 and taken == sorted(taken), doc["points"]
    finally:
        shutil.rmtree(doc["work"], ignore_errors=True)
