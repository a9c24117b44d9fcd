"""Runner mechanics that need no environment: the seeded, interleaved schedule, a forked
child that never runs the teardown, which workloads apply without a network, and a run
refused because an environment it needs is unavailable here."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from support import RUNNER_PLAN, EchoWorkload, GoneEnvironment

from isotax import protocols
from isotax.environments.native import Native
from isotax.facts import Facts, reach_of
from isotax.image.artifacts import ImageArtifacts
from isotax.plan import parse_plan
from isotax.protocols import (
    EnvSpec,
    Instance,
)
from isotax.run.applicability import why_not_applicable
from isotax.run.runner import Runner
from isotax.run.schedule import new_run_id, schedule
from isotax.store.sqlite import SQLiteStore


def test_schedule_is_seeded_interleaved_and_complete(echo_workload: type) -> None:
    plan = parse_plan(RUNNER_PLAN)
    cells = schedule(plan, ["native", "native2"])
    assert schedule(plan, ["native", "native2"]) == cells
    warm = [c for c in cells if c.warmup]
    # One warm-up per environment x workload, on the sweep's first point, before anything.
    assert len(warm) == 2 and cells[:2] == warm
    assert {(c.environment, c.params_key) for c in warm} == {("native", "value=1"),
                                                             ("native2", "value=1")}
    every = parse_plan(RUNNER_PLAN.replace("warmups = 1", 'warmups = 1\nwarmup_points = "point"'))
    assert len([c for c in schedule(every, ["native", "native2"]) if c.warmup]) == 4
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


def test_a_forked_child_never_runs_the_teardown(tmp_path: Path) -> None:
    """pyroute2 forks to make a namespace and SIGTERMs the child when done: that child must
    exit, not unwind through the runner's teardown (which removed the parent's netns)."""
    import os
    import signal
    import time

    from isotax.run.interrupts import interrupts_for_this_process_only

    marker = tmp_path / "teardown-ran-in"
    with interrupts_for_this_process_only():
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
    with pytest.raises(KeyboardInterrupt), interrupts_for_this_process_only():
        os.kill(os.getpid(), signal.SIGTERM)  # the run's own process still stops cleanly
        time.sleep(1)


class _NoNetwork:
    """Only what the applicability rules read of an instance."""

    address = ""

    def __init__(self, network: str) -> None:
        self.network = network

    def facts(self) -> Facts:
        return Facts("runc", reach_of(self.network))


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


def test_an_unavailable_environment_refuses_the_run_before_anything_starts(
        tmp_path: Path, echo_workload: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not optional: the run is refused in one line naming it, the reason and the fix, and
    nothing is started (native's start() would fail this test) or measured."""
    monkeypatch.setitem(protocols.ENVIRONMENTS, GoneEnvironment.kind, GoneEnvironment)

    def never(self: object, spec: EnvSpec) -> Instance:
        raise AssertionError("an environment was started for a refused run")

    monkeypatch.setattr(Native, "start", never)
    text = RUNNER_PLAN.replace('name = "native2"\nkind = "native"',
                               'name = "gone"\nkind = "test-gone"')
    plan = parse_plan(text)
    store = SQLiteStore(tmp_path / "isotax.db")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, text, plan.seed, {"hostname": "h"})
    said: list[str] = []
    runner = Runner(plan, text, store, ImageArtifacts("test", tmp_path / "image"), said.append)
    assert runner.run(run_id) == "refused"
    assert runner.refusal == (
        "refused: environment 'gone' (test-gone) cannot run here: unavailable: test-gone is not "
        "installed here (fix: install test-gone); fix that, or mark it optional = true in the "
        "plan to run without it")
    assert "\n" not in runner.refusal
    assert store.cells(run_id) == [] and store.get_run(run_id).status == "refused"
    gone = {e.name: e for e in store.environments(run_id)}["gone"]
    assert not gone.available and "not installed" in gone.reason
    assert not any("not run" in line for line in said)
    store.close()
