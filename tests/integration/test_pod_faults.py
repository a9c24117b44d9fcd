"""Pods when things go wrong, for real, on the local cluster:

- a pod killed mid-cell (its container's processes, SIGKILL by PID): that cell fails with the
  death as its reason, the pod is restarted (a new namespace) for the remaining cells, and the
  run completes;
- the API server unreachable mid-run (its port refused by an iptables rule): the run stops in
  one line naming it and the command that finishes the run, its committed cells kept, and
  `isotax run --resume` completes it once the API server answers again, the first attempt's
  namespaces removed;
- Ctrl-C: the run's namespaces are removed with everything else, and --resume finishes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from support import committed_cells, local_cluster, ran

from isotax import protocols
from isotax.host.kubernetes import cluster
from isotax.host.kubernetes import layout as L
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellStatus, Sample
from isotax.protocols import FigureHints, Instance, LoadGen, Params, ParamSpec, Port
from isotax.workloads.base import BaseWorkload

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kube() -> Iterator[None]:
    with local_cluster():
        yield


def _namespaces() -> list[str]:
    got = cluster.kubectl("get", "namespaces", "-o", "name", timeout=30).stdout.split()
    return [n.removeprefix("namespace/") for n in got
            if n.startswith(("namespace/itx-pod-", "namespace/itx-lg-"))]


# -- a pod killed mid-cell ----------------------------------------------------------------------

class PodKiller(BaseWorkload):
    """Prints 5 after a second's sleep; in the pod's `kill_at` call, its container's init
    (itx-ready) is killed with SIGKILL 0.3 s into the cell."""

    name: ClassVar[str] = "test-pod-kill"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "test only: the pod's container is killed during a cell"
    params: ClassVar[tuple[ParamSpec, ...]] = ()
    tools: ClassVar[dict[str, tuple[str, ...]]] = {}
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[dict[str, Port]] = {}
    packages: ClassVar[tuple[str, ...]] = ()
    figures: ClassVar[FigureHints] = FigureHints()
    kill_at = 2
    calls = 0
    killed: ClassVar[list[int]] = []

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        if inst.facts().kind == "pod":
            PodKiller.calls += 1
            if PodKiller.calls == PodKiller.kill_at:
                pid = _init_of(inst)
                PodKiller.killed.append(pid)
                threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()
        out = inst.exec(["sh", "-c", "sleep 1; echo 5"], 60).check()
        return [Sample("value", float(out.stdout), "units")]


def _init_of(inst: Instance) -> int:
    for pid in inst.host_pids():
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
        if argv0.endswith("itx-ready"):
            return pid
    raise AssertionError(f"no itx-ready among {inst.host_pids()}")


# native and one pod on the pod network, 3 repetitions of one workload.
PLAN_OF = """
name = "{name}"
seed = 2
repetitions = 3
warmups = 0
timeout_s = 120
parity = "flag"
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "pod"
kind = "pod"
network = "pod"
[[workloads]]
{workload}
"""
KILL_PLAN = PLAN_OF.format(name="itx-pod-kill", workload='name = "test-pod-kill"')


def test_a_pod_killed_mid_cell_fails_that_cell_and_is_restarted(
        kube: None, image: ImageArtifacts, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(protocols.WORKLOADS, PodKiller.name, PodKiller)
    PodKiller.calls, PodKiller.killed = 0, []
    with ran(KILL_PLAN, image, tmp_path) as (store, run_id):
        cells = sorted((c for c in store.cells(run_id) if c.key.environment == "pod"),
                       key=lambda c: c.key.repetition)
        (record,) = store.run_meta(run_id)["restarts"]
    assert [c.status for c in cells] == [CellStatus.OK, CellStatus.FAILED, CellStatus.OK], \
        [c.reason for c in cells]
    died = cells[1].reason
    assert died.startswith("environment died: pod itx-pod-") and "no process left" in died
    assert record["environment"] == "pod" and record["outcome"] == "restarted"
    assert _namespaces() == []  # the dead pod's namespace and the restarted one's


# -- the API server unreachable, and Ctrl-C: the CLI in its own process -----------------------

PLAN = PLAN_OF.format(name="itx-pod-faults",
                      workload='name = "compress"\nparams = { corpus_mib = 1, threads = 1 }')


def refuse_api() -> tuple[str, ...]:
    """The rule that refuses the API server: read once the cluster is up (its range)."""
    return ("INPUT", "-d", L.NODE_IP, "-p", "tcp", "--dport", str(L.APISERVER_PORT), "-j",
            "REJECT", "--reject-with", "tcp-reset", "-m", "comment", "--comment",
            "isotax test: the API server unreachable")


def _first_part(tmp_path: Path, until: int, then: object) -> tuple[int, str, str]:
    """`isotax run` of PLAN in its own process group until `until` cells are committed, then
    `then()`; (its exit status, its output, its run id)."""
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    db = tmp_path / "results" / "isotax.db"
    cmd = [sys.executable, "-m", "isotax", "run", "--results", str(tmp_path / "results"),
           "--no-report", str(plan)]
    with (tmp_path / "first.log").open("w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 300
        while len(committed_cells(db)) < until and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert p.poll() is None, (tmp_path / "first.log").read_text()[-2000:]
        then(p)  # type: ignore[operator]
        rc = p.wait(timeout=240)
    con = sqlite3.connect(db)
    (run_id,) = con.execute("SELECT id FROM runs").fetchone()
    con.close()
    return rc, (tmp_path / "first.log").read_text(), run_id


def _resume(tmp_path: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "isotax", "run", "--results",
                           str(tmp_path / "results"), "--no-report", "--resume", run_id],
                          capture_output=True, text=True, timeout=600)


def _api_answers(timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cluster.kubectl("get", "--raw", "/readyz", timeout=10).returncode == 0:
            return True
        time.sleep(0.5)
    return False


def test_the_api_server_unreachable_stops_the_run_and_resume_completes_it(
        kube: None, image: ImageArtifacts, tmp_path: Path) -> None:
    from isotax.host import command

    refused = False

    def refuse(p: subprocess.Popen[bytes]) -> None:
        nonlocal refused
        done = command.run(["iptables", "-w", "10", "-I", *refuse_api()], 30)
        assert done.returncode == 0, done.stderr
        refused = True

    try:
        rc, out, run_id = _first_part(tmp_path, 2, refuse)
    finally:
        if refused:
            command.run(["iptables", "-w", "10", "-D", *refuse_api()], 30)
    last = [ln for ln in out.splitlines() if ln.startswith("isotax: ")][-1]
    assert rc == 1, out[-2000:]
    assert "the Kubernetes API server" in last and "does not answer" in last, last
    assert f"isotax run --resume {run_id}" in last and "committed" in last, last
    db = tmp_path / "results" / "isotax.db"
    first = committed_cells(db)
    assert 2 <= len(first) < 6
    con = sqlite3.connect(db)
    (status,) = con.execute("SELECT status FROM runs").fetchone()
    con.close()
    assert status == "interrupted"
    assert _api_answers(), "the API server did not answer again after the rule went"
    done = _resume(tmp_path, run_id)
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    after = committed_cells(db)
    assert len(after) == 6 and all(s == "ok" for _, _, s in after[len(first):])
    assert after[: len(first)] == first  # committed cells kept, none repeated
    # The first attempt's namespaces (its API server gone, it could not delete them) were
    # removed by the resume's recovery; the resume's own at its end.
    assert _namespaces() == []


def test_ctrl_c_removes_the_runs_namespaces(kube: None, image: ImageArtifacts,
                                            tmp_path: Path) -> None:
    rc, out, run_id = _first_part(tmp_path, 2, lambda p: os.killpg(p.pid, signal.SIGINT))
    assert rc == 130, out[-2000:]
    assert _namespaces() == []
    done = _resume(tmp_path, run_id)
    assert done.returncode == 0, (done.stdout + done.stderr)[-2000:]
    assert len(committed_cells(tmp_path / "results" / "isotax.db")) == 6
    assert _namespaces() == []
