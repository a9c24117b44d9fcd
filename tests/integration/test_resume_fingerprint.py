"""A run is resumed only on the host it started on: its repetitions before and after are
compared with each other. A changed fingerprint refuses the resume (exit 2, one line naming
what changed and the fix) and leaves the store as it was; --force resumes and the report
says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import requires_root_and

from isotax.host.facts.fingerprint import fingerprint
from isotax.store.sqlite import SQLiteStore

pytestmark = [pytest.mark.integration, requires_root_and("debootstrap")]

PLAN = """
name = "fp"
repetitions = 1
warmups = 0
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "compress"
params = { corpus_mib = 1, threads = 1 }
"""


def test_changed_fingerprint_refuses_resume_unless_forced(tmp_path: Path) -> None:
    results = tmp_path / "results"
    store = SQLiteStore(results / "isotax.db")
    host = fingerprint()
    then = "never" if host.get("thp_enabled") != "never" else "always"
    store.create_run("r1", "fp", PLAN, 1, {**host, "thp_enabled": then})
    store.set_run_status("r1", "interrupted")
    store.close()
    cmd = [sys.executable, "-m", "isotax", "run", "--results", str(results), "--resume", "r1"]

    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2, refused.stderr
    line = refused.stderr.strip()
    assert "\n" not in line and "THP enabled" in line and "--force" in line
    store = SQLiteStore(results / "isotax.db")
    assert store.cells("r1") == [] and store.get_run("r1").status == "interrupted"
    store.close()

    forced = subprocess.run([*cmd, "--force"], capture_output=True, text=True, timeout=600)
    assert forced.returncode == 0, forced.stderr[-2000:]
    report = (results / "r1" / "report.md").read_text()
    assert "resumed with --force on a host that differed" in report
    assert f"THP enabled: {then} vs {host.get('thp_enabled')}" in report
