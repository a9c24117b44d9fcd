"""Ctrl-C in the middle of a real run: the whole process group gets SIGINT (as a terminal
sends it), isotax tears everything down, keeps what it committed, and --resume finishes the
run without repeating a cell."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import committed_cells, requires_root_and

pytestmark = [
    pytest.mark.integration,
    requires_root_and("runc", "qemu-system-x86_64", "debootstrap"),
]

PLAN = """
name = "ctrlc"
seed = 2
repetitions = 3
warmups = 0
parity = "flag"  # the VM has 1 GiB, the host more: reported, not refused
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
network = "bridge"
[[environments]]
name = "qemu"
kind = "qemu"
network = "bridge"
vcpus = 2
memory_mib = 1024
[[workloads]]
name = "compress"
params = { corpus_mib = 1, threads = 1 }
"""


def test_ctrl_c_tears_down_and_resume_finishes(tmp_path: Path) -> None:
    from isotax.run.leaks import find_leaks

    before = set(find_leaks())
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    results = tmp_path / "results"
    db = results / "isotax.db"
    cmd = [sys.executable, "-m", "isotax", "run", "--results", str(results)]
    with (tmp_path / "first.log").open("w") as log:
        p = subprocess.Popen([*cmd, str(plan)], stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        deadline = time.monotonic() + 600
        while len(committed_cells(db)) < 3 and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert p.poll() is None, (tmp_path / "first.log").read_text()[-2000:]
        os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group
        rc = p.wait(timeout=120)
    out = (tmp_path / "first.log").read_text()
    assert rc == 130, out[-2000:]
    assert "--resume" in out
    assert set(find_leaks()) <= before, "Ctrl-C left resources behind"
    first = [(i, ident) for i, ident, _ in committed_cells(db)]
    assert 3 <= len(first) < 9
    con = sqlite3.connect(db)
    run_id, status = con.execute("SELECT id, status FROM runs").fetchone()
    con.close()
    assert status == "interrupted"

    done = subprocess.run([*cmd, "--resume", run_id], capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    after = [(i, ident) for i, ident, _ in committed_cells(db)]
    assert len(after) == 9 and len({ident for _, ident in after}) == 9
    assert after[: len(first)] == first  # committed cells kept, none repeated
    assert set(find_leaks()) <= before
