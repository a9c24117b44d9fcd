"""kill -9 of the runner at the moments that leave the most behind (issue 29): while a
system-wide perf stat counts (and the /proc sampler runs) in a cell, while a workload's server
listens natively, and while an environment starts. After `isotax run --resume` (or `isotax
doctor --fix` where the run is not resumed) no process and no temporary file or folder of the
killed run is left. This test does not ask isotax what is left: it scans /proc (every
process's environment and command line) and the temporary folders itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support import owned_processes, requires_root_and, temp_entries

pytestmark = [pytest.mark.integration,
              requires_root_and("runc", "perf", "redis-server", "redis-benchmark")]

PLAN = """
name = "kill-moments"
seed = 4
repetitions = 2
warmups = 0
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
network = "bridge"
[[workloads]]
name = "redis"
params = { requests = 50000, connections = 2, keyspace = 1000 }
[[workloads]]
name = "compress"
params = { corpus_mib = 4, threads = 1 }
"""


def _owned_by(pid: int) -> list[str]:
    """Processes whose environment names the ledger of the process `pid` (<pid>-<start>)."""
    return owned_processes(f"{pid}-")


def _wait_for(what: Callable[[], bool], child: subprocess.Popen[bytes], log: Path,
              seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert child.poll() is None, f"the run ended first:\n{log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"never saw the moment:\n{log.read_text()[-2000:]}"
        time.sleep(0.01)


def _runner_has(pid: int, *words: str) -> Callable[[], bool]:
    """A process of the runner's (by its environment) whose command line has all `words`."""
    return lambda: any(all(w in line for w in words) for line in _owned_by(pid))


def _run_id(results: Path) -> str:
    import sqlite3

    con = sqlite3.connect(results / "isotax.db")
    try:
        return str(con.execute("SELECT id FROM runs ORDER BY created DESC").fetchone()[0])
    finally:
        con.close()


@pytest.mark.parametrize("moment", ["perf counting", "server listening", "environment start"])
def test_a_kill_at_each_moment_leaves_no_process_and_no_temporary_file(
        tmp_path: Path, moment: str) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    results = tmp_path / "results"
    temp_before = temp_entries()
    cmd = [sys.executable, "-m", "isotax", "run", "--results", str(results)]
    log = tmp_path / "run.log"
    with log.open("w") as out:
        p = subprocess.Popen([*cmd, str(plan)], stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)
        try:
            if moment == "perf counting":
                _wait_for(_runner_has(p.pid, "perf", "stat", "-a"), p, log)
            elif moment == "server listening":
                _wait_for(_runner_has(p.pid, "redis-server"), p, log)
                time.sleep(0.3)
            else:
                _wait_for(_runner_has(p.pid, "runc", "itx-"), p, log)
            os.kill(p.pid, signal.SIGKILL)
        finally:
            if p.poll() is None:
                p.wait(60)
    time.sleep(0.5)  # a helper told of its parent's death (pdeathsig) is gone by now
    if moment == "environment start":
        done = subprocess.run([sys.executable, "-m", "isotax", "doctor", "--fix"],
                              capture_output=True, text=True, timeout=600)
        # 1: something is left that no dead process owns (another session's, kept while this
        # one lives); what the killed run left is checked below, by looking.
        assert done.returncode in (0, 1), (done.stdout + done.stderr)[-3000:]
        assert "removed" in done.stdout, done.stdout[-3000:]
    else:
        done = subprocess.run([*cmd, "--resume", _run_id(results)], capture_output=True,
                              text=True, timeout=900)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert _owned_by(p.pid) == [], (done.stdout + done.stderr)[-3000:]
    left = sorted(temp_entries() - temp_before)
    assert left == [], (left, (done.stdout + done.stderr)[-3000:])
