"""Runner mechanics on the real native environment with small test workloads: commit per cell,
failures stored without numbers, interruption and --resume without repeating cells."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import ClassVar

import pytest
from support import ran

from isotax.analysis.report_data import analyze
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellStatus, NotApplicable, Sample, SanityError
from isotax.plan import parse_plan
from isotax.protocols import Instance, LoadGen, Params, ParamSpec
from isotax.report import json_report, markdown
from isotax.run.applicability import why_not_applicable
from isotax.run.runner import Runner, new_run_id, schedule
from isotax.store.sqlite import SQLiteStore
from isotax.telemetry import envcpu
from isotax.workloads.base import register


class _Counter:
    calls = 0
    interrupt_at: int | None = None
    fail_at: int | None = None


@register
class EchoWorkload:
    """Runs a real command in the instance and reports its output as a number."""

    name: ClassVar[str] = "test-echo"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "test only"
    params: ClassVar[tuple[ParamSpec, ...]] = (ParamSpec("value", int, 7, "number to echo"),)
    tools: ClassVar[dict[str, tuple[str, ...]]] = {"sh": ("sh", "-c", "echo dash")}
    needs_loadgen: ClassVar[bool] = False

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        pass

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        _Counter.calls += 1
        if _Counter.interrupt_at == _Counter.calls:
            raise KeyboardInterrupt
        if _Counter.fail_at == _Counter.calls:
            raise SanityError("checksum mismatch")
        out = inst.exec(["sh", "-c", f"echo {params['value']}"], timeout=10).check()
        return [Sample("value", float(out.stdout), "units")]


PLAN = """
name = "t"
seed = 3
repetitions = 3
warmups = 1
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "native2"
kind = "native"
[[workloads]]
name = "test-echo"
params = { value = [1, 2] }
"""


@pytest.fixture
def setup(tmp_path: Path):
    _Counter.calls, _Counter.interrupt_at, _Counter.fail_at = 0, None, None
    plan = parse_plan(PLAN)
    store = SQLiteStore(tmp_path / "isotax.db")
    image = ImageArtifacts("test", tmp_path / "image")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, PLAN, plan.seed, {"hostname": "h"})
    yield plan, store, image, run_id
    store.close()


def test_schedule_is_seeded_interleaved_and_complete() -> None:
    plan = parse_plan(PLAN)
    cells = schedule(plan, ["native", "native2"])
    assert schedule(plan, ["native", "native2"]) == cells
    warm = [c for c in cells if c.warmup]
    assert len(warm) == 4 and cells[:4] == warm
    measured = [c for c in cells if not c.warmup]
    assert len(measured) == 12
    for rep in (1, 2, 3):  # each round runs every environment x parameter point once
        rnd = [c for c in measured if c.repetition == rep]
        assert Counter((c.environment, c.params_key) for c in rnd) == Counter(
            {(e, f"value={v}"): 1
             for e in ("native", "native2") for v in (1, 2)})
    orders = [[(c.environment, c.params_key) for c in measured if c.repetition == r]
              for r in (1, 2, 3)]
    assert len({tuple(o) for o in orders}) > 1  # shuffled, not the same order each round


def test_run_commits_every_cell(setup) -> None:
    plan, store, image, run_id = setup
    status = Runner(plan, PLAN, store, image, log=lambda m: None).run(run_id)
    assert status == "complete"
    cells = store.cells(run_id)
    assert len(cells) == 16 and all(c.status is CellStatus.OK for c in cells)
    assert {c.samples[0].value for c in cells} == {1.0, 2.0}
    # every run also carries what the environment's own host processes used: natively there
    # are none (this test's image has no itx-ready holder), so nothing
    cpu = [s for c in cells for s in c.samples if s.metric == envcpu.METRIC]
    assert len(cpu) == 16 and all(s.value == 0 and not s.labels["by_program"] for s in cpu)
    md = markdown.render(analyze(store, run_id))
    assert "## CPU of the environments' own host processes" in md
    assert envcpu.METRIC not in md.split("## Results")[1].split("###")[0]  # not in Table 1
    envs = {e.name: e for e in store.environments(run_id)}
    assert envs["native"].available and envs["native"].tools["sh"] == "dash"
    assert store.get_run(run_id).status == "complete"


def test_failed_sanity_is_stored_without_numbers(setup) -> None:
    plan, store, image, run_id = setup
    _Counter.fail_at = 6
    Runner(plan, PLAN, store, image, log=lambda m: None).run(run_id)
    failed = [c for c in store.cells(run_id) if c.status is CellStatus.FAILED]
    assert len(failed) == 1
    assert "checksum mismatch" in failed[0].reason and not failed[0].samples


def test_interrupt_then_resume_repeats_nothing(setup) -> None:
    plan, store, image, run_id = setup
    _Counter.interrupt_at = 7
    status = Runner(plan, PLAN, store, image, log=lambda m: None).run(run_id)
    assert status == "interrupted"
    first = store.cells(run_id)
    assert len(first) == 6 and store.get_run(run_id).status == "interrupted"
    _Counter.interrupt_at = None
    status = Runner(plan, PLAN, store, image, log=lambda m: None).run(run_id)
    assert status == "complete"
    after = store.cells(run_id)
    assert len(after) == 16
    idents = [(c.key.ident) for c in after]
    assert len(set(idents)) == 16
    assert [c.id for c in after[:6]] == [c.id for c in first]  # first part kept as it was
    assert _Counter.calls == 16 + 1  # the interrupted call, then exactly the missing ones


def test_a_forked_child_never_runs_the_teardown(tmp_path: Path) -> None:
    """pyroute2 forks to make a namespace and SIGTERMs the child when done: that child must
    exit, not unwind through the runner's teardown (which removed the parent's netns)."""
    import os
    import signal
    import time

    from isotax.run.runner import _interrupts_for_this_process_only

    marker = tmp_path / "teardown-ran-in"
    with _interrupts_for_this_process_only():
        pid = os.fork()
        if pid == 0:  # the child: wait for SIGTERM inside a try/finally like the runner's
            try:
                time.sleep(30)
            finally:
                marker.write_text(str(os.getpid()))
            os._exit(0)
        time.sleep(0.2)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 128 + signal.SIGTERM
    assert not marker.exists()
    with pytest.raises(KeyboardInterrupt), _interrupts_for_this_process_only():
        os.kill(os.getpid(), signal.SIGTERM)  # the run's own process still stops cleanly
        time.sleep(1)


@register
class SometimesWorkload:
    """value 2 does not apply to `native2`; it finds that out only when it runs there."""

    name: ClassVar[str] = "test-sometimes"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "test only"
    params: ClassVar[tuple[ParamSpec, ...]] = (ParamSpec("value", int, 7, "number to echo"),)
    tools: ClassVar[dict[str, tuple[str, ...]]] = {}
    needs_loadgen: ClassVar[bool] = False
    runs: ClassVar[Counter[tuple[str, int]]] = Counter()

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        pass

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        env = inst.spec.name  # type: ignore[attr-defined]
        SometimesWorkload.runs[(env, params["value"])] += 1
        if env == "native2" and params["value"] == 2:
            raise NotApplicable("the CPU refuses an instruction this build uses")
        out = inst.exec(["sh", "-c", f"echo {params['value']}"], timeout=10).check()
        return [Sample("value", float(out.stdout), "units")]


def test_not_applicable_is_stored_once_per_point_and_reported(tmp_path: Path) -> None:
    text = PLAN.replace('"test-echo"', '"test-sometimes"')
    SometimesWorkload.runs.clear()
    with ran(text, ImageArtifacts("t", tmp_path / "i"), tmp_path) as (store, run_id):
        cells = store.cells(run_id)
        d = analyze(store, run_id)
    na = [c for c in cells if c.status is CellStatus.NOT_APPLICABLE]
    # the warm-up and 3 repetitions of that one point, none with a number
    assert len(na) == 4 and not any(c.samples for c in na)
    assert {(c.key.environment, c.key.params["value"]) for c in na} == {("native2", 2)}
    assert all("refuses an instruction" in c.reason for c in na)
    # found out once: the other repetitions of the point did not run again
    assert SometimesWorkload.runs[("native2", 2)] == 1
    assert SometimesWorkload.runs[("native", 2)] == 4
    assert not d.failures and not any("failed" in w for w in d.warnings)
    md = markdown.render(d)
    assert "## Not applicable" in md and "refuses an instruction" in md
    assert "## Failures" not in md
    row = next(line for line in md.splitlines() if line.startswith("| test-sometimes | value=2"))
    assert row.rstrip(" |").endswith("n/a")
    doc = json_report.render(d)
    assert '"reason": "the CPU refuses an instruction this build uses"' in doc


class _NoNetwork:
    """Only what the applicability rules read of an instance."""

    address = ""

    def __init__(self, network: str) -> None:
        self.network = network

    def describe(self) -> dict[str, str]:
        return {"kind": "runc", "network": self.network}


def test_network_workloads_do_not_apply_without_a_network() -> None:
    from isotax.workloads.rr import RequestResponse
    from isotax.workloads.startup import Startup

    params = {"proto": "tcp", "seconds": 1, "placement": "free", "tail": False}
    why = why_not_applicable(RequestResponse(), _NoNetwork("none"), params)  # type: ignore[arg-type]
    assert why is not None and 'network = "none"' in why
    assert why_not_applicable(RequestResponse(), _NoNetwork("bridge"), params) is None  # type: ignore[arg-type]
    # startup needs a network only for its redis probe
    start = {"starts": 1, "ready_timeout_s": 5.0}
    assert why_not_applicable(Startup(), _NoNetwork("none"), {**start, "ready": "exec"}) is None  # type: ignore[arg-type]
    assert why_not_applicable(Startup(), _NoNetwork("none"), {**start, "ready": "redis"})  # type: ignore[arg-type]
    assert why_not_applicable(EchoWorkload(), _NoNetwork("none"), {"value": 1}) is None  # type: ignore[arg-type]
