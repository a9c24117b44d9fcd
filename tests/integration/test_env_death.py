"""An environment that dies mid-cell, for real: QEMU and the gVisor sandbox are killed
(SIGKILL, by PID) while one of their cells runs, in a small run of the real Runner beside the
native baseline. The cell it died in fails with the death as its reason, the environment is
restarted for its remaining cells (prepared again), the run completes, the restart is recorded
and reported, and nothing is left behind; past the plan's `restarts`, the remaining cells fail
with the reason without running, and the run still completes."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from support import why_not_root_and

from isotax import protocols
from isotax.analysis.report_data import ReportWarning, analyze
from isotax.environments.base import process_gone
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellStatus, Sample
from isotax.plan import parse_plan
from isotax.protocols import FigureHints, Instance, LoadGen, Params, ParamSpec, Port
from isotax.run.leaks import find_leaks
from isotax.run.runner import Runner
from isotax.run.schedule import new_run_id
from isotax.store.base import CellRecord
from isotax.store.sqlite import SQLiteStore
from isotax.workloads.base import BaseWorkload

pytestmark = pytest.mark.integration

MARK = "itx-death-prepared"  # what prepare() leaves in the instance's scratch for run()


class KillWorkload(BaseWorkload):
    """Prints, after a second's sleep, a value its prepare() left in the instance's scratch
    (so a restarted instance must be prepared again). In the calls listed in `kill_at` (counted
    in the `victim` environment), the victim's own host process (`program`) is killed with
    SIGKILL 0.3 s into the cell: the kill lands while the cell runs. In the baseline's calls
    listed in `kill_paused_at`, the victim's process is killed while the victim is paused."""

    name: ClassVar[str] = "test-death"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "test only: the environment dies during chosen cells"
    params: ClassVar[tuple[ParamSpec, ...]] = (ParamSpec("value", int, 7, "number to print"),)
    tools: ClassVar[dict[str, tuple[str, ...]]] = {}
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[dict[str, Port]] = {}
    packages: ClassVar[tuple[str, ...]] = ()
    figures: ClassVar[FigureHints] = FigureHints()
    victim = ""
    program = ""  # the victim's process to kill: its argv[0] ends so
    kill_at: ClassVar[set[int]] = set()
    kill_paused_at: ClassVar[set[int]] = set()
    calls = 0
    other_calls = 0
    victim_pid = 0  # the victim's process, as its last cell found it
    killed: ClassVar[list[int]] = []
    prepared: ClassVar[list[str]] = []

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        KillWorkload.prepared.append(inst.spec.name)  # type: ignore[attr-defined]
        inst.exec(["sh", "-c", f"echo {params['value']} > {inst.scratch}/{MARK}"], 60).check()

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        if inst.spec.name == KillWorkload.victim:  # type: ignore[attr-defined]
            KillWorkload.calls += 1
            pid = KillWorkload.victim_pid = _process_of(inst, KillWorkload.program)
            if KillWorkload.calls in KillWorkload.kill_at:
                KillWorkload.killed.append(pid)
                threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()
        else:
            KillWorkload.other_calls += 1
            pid = KillWorkload.victim_pid
            if KillWorkload.other_calls in KillWorkload.kill_paused_at and pid:
                KillWorkload.killed.append(pid)
                os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while not process_gone(pid) and time.monotonic() < deadline:
                    time.sleep(0.01)
        out = inst.exec(["sh", "-c", f"sleep 1; cat {inst.scratch}/{MARK}"], 60).check()
        return [Sample("value", float(out.stdout), "units")]


def _process_of(inst: Instance, program: str) -> int:
    """The instance's host process whose argv[0] ends with program (QEMU, runsc-sandbox)."""
    for pid in inst.host_pids():
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            continue
        if os.path.basename(argv0).startswith(program):
            return pid
    raise AssertionError(f"no {program} among {inst.host_pids()}")


@pytest.fixture
def killer(monkeypatch: pytest.MonkeyPatch) -> type[KillWorkload]:
    monkeypatch.setitem(protocols.WORKLOADS, KillWorkload.name, KillWorkload)
    KillWorkload.calls, KillWorkload.kill_at = 0, set()
    KillWorkload.other_calls, KillWorkload.kill_paused_at, KillWorkload.victim_pid = 0, set(), 0
    KillWorkload.killed, KillWorkload.prepared = [], []
    return KillWorkload


PLAN = """
name = "death"
seed = 2
repetitions = {reps}
warmups = 0
timeout_s = 120
parity = "flag"
{restarts}
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "{victim}"
kind = "{kind}"
network = "none"
{extra}
[[workloads]]
name = "test-death"
params = {{ value = 5 }}
"""


class _Tracing(Runner):
    """The Runner, noting the names every instance it starts (restarts included) would leave
    behind: other test sessions on this host make leftovers of their own meanwhile."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.names: list[str] = []
        start_one = self.envs.start_one

        def traced(*args: Any, **kw: Any) -> Instance | str:
            got = start_one(*args, **kw)
            if not isinstance(got, str):
                self.names += _names_of(got)
            return got

        self.envs.start_one = traced  # type: ignore[method-assign]


def _names_of(inst: Instance) -> list[str]:
    """Words a leftover of inst would carry: its workdir, container or machine name, its VM's
    tag (links, bridge), its CPU group, its host processes."""
    words = [str(inst.spec.workdir)]  # type: ignore[attr-defined]
    # A name counts where it is an isotax name: QemuInstance.machine is the machine type
    # ("pc"), which every QEMU process on the host carries.
    words += [v for a in ("cid", "machine", "name", "_tag")
              if isinstance(v := getattr(inst, a, None), str) and v
              and (a == "_tag" or v.startswith("itx"))]
    group = getattr(inst, "cpu_group", None)
    if group is not None:
        words.append(group.dir.name)
    return words + [f"process {p} " for p in inst.host_pids()]


@contextlib.contextmanager
def _run(text: str, image: ImageArtifacts, tmp_path: Path
         ) -> Iterator[tuple[SQLiteStore, str, list[str]]]:
    """text run by the real Runner: (store, run id, the run's log lines); the run must end
    "complete" and leave nothing of its own behind (its instances', restarts' included)."""
    before = set(find_leaks())
    plan = parse_plan(text)
    store = SQLiteStore(tmp_path / "isotax.db")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, text, plan.seed, {"hostname": "h"})
    lines: list[str] = []

    def log(m: str) -> None:
        lines.append(m)
        print(m)

    runner = _Tracing(plan, text, store, image, log=log)
    try:
        assert runner.run(run_id) == "complete"
        yield store, run_id, lines
    finally:
        store.close()
    ours = [str(runner.workdir), *runner.names]
    assert runner.names and [x for x in set(find_leaks()) - before
                             if any(w in x for w in ours)] == []


def _victim_cells(store: SQLiteStore, run_id: str, victim: str) -> list[CellRecord]:
    return sorted((c for c in store.cells(run_id) if c.key.environment == victim),
                  key=lambda c: c.key.repetition)


def _why_not_qemu() -> str | None:
    return why_not_root_and("qemu-system-x86_64", "qemu-img",
                            root_for="the VM's workdir, its disk and the workload image")


def _why_not_gvisor() -> str | None:
    why = why_not_root_and(root_for="runsc's sandboxes")
    if why is not None:
        return why
    avail = protocols.environments()["gvisor"]().available()
    return None if avail.ok else f"gvisor unavailable here: {avail}"


QEMU = dict(victim="qemu", kind="qemu", extra="vcpus = 1\nmemory_mib = 512")
GVISOR = dict(victim="gvisor", kind="gvisor", extra="")


@pytest.mark.parametrize("env", [QEMU, GVISOR], ids=["qemu", "gvisor"])
def test_killed_mid_cell_fails_that_cell_and_the_rest_run_on_a_restart(
        env: dict[str, str], killer: type[KillWorkload], image: ImageArtifacts,
        tmp_path: Path) -> None:
    why_not = _why_not_qemu() if env["kind"] == "qemu" else _why_not_gvisor()
    if why_not is not None:
        pytest.skip(why_not)
    victim = env["victim"]
    killer.victim, killer.kill_at = victim, {2}
    killer.program = "qemu-system" if env["kind"] == "qemu" else "runsc-sandbox"
    text = PLAN.format(reps=4, restarts="", **env)
    with _run(text, image, tmp_path) as (store, run_id, lines):
        cells = _victim_cells(store, run_id, victim)
        assert [c.status for c in cells] == [CellStatus.OK, CellStatus.FAILED, CellStatus.OK,
                                             CellStatus.OK], [c.reason for c in cells]
        died = cells[1].reason
        if env["kind"] == "qemu":
            assert died.startswith("environment died: QEMU killed by signal 9 (SIGKILL)"), died
        else:
            assert died.startswith(f"environment died: the gVisor sandbox (runsc-sandbox, pid "
                                   f"{killer.killed[0]}) exited"), died
        assert [c.samples[0].value for c in cells if c.status is CellStatus.OK] == [5.0] * 3
        # prepared once per instance: the first, then the restarted one
        assert killer.prepared.count(victim) == 2
        assert all(c.status is CellStatus.OK for c in store.cells(run_id)
                   if c.key.environment == "native")
        (record,) = store.run_meta(run_id)["restarts"]
        assert record["environment"] == victim and record["outcome"] == "restarted"
        assert record["why"] in died and record["restart_s"] > 0
        assert record["cell"] == "test-death value=5 rep 2"
        assert any(line.startswith(f"{victim}: restarted: ready in ") for line in lines)
        d = analyze(store, run_id)
        warned = [w for w in d.warnings if getattr(w, "kind", None) is ReportWarning.DIED]
        assert len(warned) == 1 and warned[0].startswith(f"{victim} died once during the run")
    # the killed process is gone, and the leak check above found nothing of either instance
    assert all(process_gone(p) for p in killer.killed)


@pytest.mark.parametrize("env", [QEMU, GVISOR], ids=["qemu", "gvisor"])
def test_killed_while_paused_it_is_restarted_before_its_next_cell(
        env: dict[str, str], killer: type[KillWorkload], image: ImageArtifacts,
        tmp_path: Path) -> None:
    """The issue's case: the victim's process killed between its cells (while it is paused and
    the baseline runs). No cell of it ran then, so none fails: its next cell finds it dead,
    restarts it first, and runs."""
    why_not = _why_not_qemu() if env["kind"] == "qemu" else _why_not_gvisor()
    if why_not is not None:
        pytest.skip(why_not)
    victim = env["victim"]
    killer.victim, killer.kill_paused_at = victim, {2}  # after the victim's rep 2 (seed 2)
    killer.program = "qemu-system" if env["kind"] == "qemu" else "runsc-sandbox"
    text = PLAN.format(reps=4, restarts="", **env)
    with _run(text, image, tmp_path) as (store, run_id, lines):
        assert len(killer.killed) == 1
        cells = _victim_cells(store, run_id, victim)
        assert [c.status for c in cells] == [CellStatus.OK] * 4, [c.reason for c in cells]
        (record,) = store.run_meta(run_id)["restarts"]
        assert record["cell"] == "" and record["outcome"] == "restarted", record
        assert any("(between its cells)" in line for line in lines)
        assert killer.prepared.count(victim) == 2
    assert all(process_gone(p) for p in killer.killed)


def test_past_its_restarts_an_environment_fails_its_remaining_cells(
        killer: type[KillWorkload], image: ImageArtifacts, tmp_path: Path) -> None:
    """The gVisor sandbox is killed in every cell; with restarts = 1 the first death restarts
    it, the second gives it up: its remaining cells fail with the reason, without running."""
    if (why_not := _why_not_gvisor()) is not None:
        pytest.skip(why_not)
    killer.victim, killer.program, killer.kill_at = "gvisor", "runsc-sandbox", {1, 2, 3, 4}
    text = PLAN.format(reps=4, restarts="restarts = 1", **GVISOR)
    with _run(text, image, tmp_path) as (store, run_id, _):
        cells = _victim_cells(store, run_id, "gvisor")
        assert [c.status for c in cells] == [CellStatus.FAILED] * 4
        assert all(c.reason.startswith("environment died: the gVisor sandbox") for c in cells[:2])
        for c in cells[2:]:
            assert c.reason.startswith("environment died twice (the plan allows 1 restart); "
                                       "last: the gVisor sandbox"), c.reason
            assert not c.samples
        assert killer.calls == 2  # the given-up cells did not run
        assert all(c.status is CellStatus.OK for c in store.cells(run_id)
                   if c.key.environment == "native")
        outcomes = [r["outcome"] for r in store.run_meta(run_id)["restarts"]]
        assert outcomes == ["restarted", "given up: no restarts left"]
        assert store.get_run(run_id).status == "complete"



NATIVE_PAIR = """
name = "death2"
seed = 2
repetitions = 3
warmups = 0
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "native2"
kind = "native"
[[workloads]]
name = "test-death"
params = { value = 5 }
"""


def test_a_resume_that_fails_fails_the_cell_about_to_run_and_a_failed_restart_gives_up(
        killer: type[KillWorkload], image: ImageArtifacts, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """native2's second resume raises (its instance says it is alive): the cell about to run
    fails with it, and the restart that follows fails too, so its last cell fails with both,
    without running; the baseline is untouched and the run completes."""
    if (why_not := why_not_root_and(root_for="the native environment's CPU group")) is not None:
        pytest.skip(why_not)
    from isotax.environments.native import Native, NativeInstance

    resumes: list[str] = []
    real_resume, real_start = NativeInstance.resume, Native.start

    def resume(self: NativeInstance) -> None:
        resumes.append(self.spec.name)
        if self.spec.name == "native2" and resumes.count("native2") == 2:
            raise RuntimeError("resume refused")
        real_resume(self)

    starts: list[str] = []

    def start(self: Native, spec: protocols.EnvSpec) -> Instance:
        starts.append(spec.name)
        if starts.count("native2") > 1:
            raise RuntimeError("no more native2 today")
        return real_start(self, spec)

    monkeypatch.setattr(NativeInstance, "resume", resume)
    monkeypatch.setattr(Native, "start", start)
    with _run(NATIVE_PAIR, image, tmp_path) as (store, run_id, _):
        cells = _victim_cells(store, run_id, "native2")
        assert [c.status for c in cells] == [CellStatus.OK] + [CellStatus.FAILED] * 2
        assert cells[1].reason == ("environment died: resume failed: RuntimeError: resume "
                                   "refused")
        assert cells[2].reason.startswith(
            "environment died once and could not be restarted (failed to start: RuntimeError: "
            "no more native2 today); last: resume failed"), cells[2].reason
        assert killer.prepared.count("native2") == 1  # the failed cells ran nothing
        assert all(c.status is CellStatus.OK for c in store.cells(run_id)
                   if c.key.environment == "native")
        (record,) = store.run_meta(run_id)["restarts"]
        assert record["outcome"].startswith("restart failed: failed to start: RuntimeError")
        assert record["cell"] == "test-death value=5 rep 2"
