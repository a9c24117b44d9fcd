"""`isotax claims FILE --budget` for real: it writes the plan the claims need on this host,
runs it in a child `isotax run`, keeps the user's claims with the run and judges them; the
run's report carries "The studies on this host" with them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import requires_root_and

CLAIMS = """version = 1
[source]
study = "an integration test"
[[claim]]
id = "runc-host-compress-near-native"
finding = "xz in runc on the host's network is within a third of native"
source_figure = "a wide margin, so that a few pairs decide it"
environment = { kind = "runc", network = "host" }
workload = "compress"
params = { corpus_mib = 4, threads = 1 }
relation = { equivalent_pct = 33 }
[[claim]]
id = "needs-kvm"
finding = "a VM claim"
source_figure = "-"
environment = { kind = "qemu" }
workload = "compress"
relation = { equivalent_pct = 5 }
requires = ["kvm"]
"""


@pytest.mark.integration
@requires_root_and("runc")
def test_claims_measure_what_they_need_and_judge_it(tmp_path: Path) -> None:
    from isotax.run.leaks import find_leaks

    before = set(find_leaks())
    mine = tmp_path / "mine.toml"
    mine.write_text(CLAIMS)
    results = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "isotax", "claims", str(mine), "--budget", "90s",
                        "--results", str(results), "--json"], capture_output=True, text=True,
                       timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    # The child run's output comes first; the verdicts' JSON is the last document.
    doc = json.loads(p.stdout[p.stdout.rindex('{\n  "run"'):])
    plan = (results / "claims-plan.toml").read_text()
    assert 'kind = "runc"' in plan and "corpus_mib = 4" in plan
    by_id = {c["id"]: c for c in doc["claims"]}
    near = by_id["runc-host-compress-near-native"]
    assert near["environment"] == "runc-host" and near["pairs"] >= 1, near
    assert near["outcome"] in ("holds", "undecided"), near  # xz in runc is not 1/3 slower
    kvm = by_id["needs-kvm"]
    if kvm["outcome"] == "not measurable here":  # the host has no KVM: not planned, and why
        assert 'kind = "qemu"' not in plan
    run_dir = results / doc["run"]
    report = (run_dir / "report.md").read_text()
    assert "## The studies on this host" in report and "runc-host-compress-near-native" in report
    assert (run_dir / "claims.csv").exists()
    assert set(find_leaks()) <= before
