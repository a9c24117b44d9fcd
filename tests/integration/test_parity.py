"""Parity for real: a plan that asks for unequal resources refused before it measures
anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import requires_root_and

REFUSED = """
name = "unequal"
repetitions = 1
warmups = 0
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc-small"
kind = "runc"
vcpus = 1
[[workloads]]
name = "compress"
params = { corpus_mib = 1, threads = 1 }
"""


@pytest.mark.integration
@requires_root_and("runc", "debootstrap")
def test_unequal_plan_is_refused_before_measuring(tmp_path: Path) -> None:
    from isotax.run.leaks import find_leaks

    plan = tmp_path / "plan.toml"
    plan.write_text(REFUSED)
    p = subprocess.run([sys.executable, "-m", "isotax", "run", str(plan), "--results",
                        str(tmp_path / "r")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "runc-small may run on 1 CPU(s), native on 2" in p.stdout + p.stderr
    last = [ln for ln in p.stderr.splitlines() if ln.strip()][-1]
    assert last.startswith("isotax: refused:") and 'parity = "flag"' in last
    # the one line names the difference itself: a fleet's terminal shows only that line
    assert "runc-small may run on 1 CPU(s), native on 2" in last
    from isotax.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "r" / "isotax.db")
    (run,) = store.list_runs()
    assert run.status == "refused" and store.cells(run.id) == []
    store.close()
    assert not [x for x in find_leaks() if "runc-small" in x]
