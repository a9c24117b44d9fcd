"""An environment that dies mid-run: the runner's bookkeeping (run.restarts), the words for how
a process ended, the plan's `restarts` and the report's warning, without killing anything."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from support import RUNNER_PLAN

from isotax.analysis.report_data import ReportWarning, _died
from isotax.environments.base import exit_words, process_gone
from isotax.plan import PlanError, parse_plan
from isotax.run.restarts import NOT_NEEDED, Restarts, died_reason
from isotax.store.run_meta import RunMeta


def test_a_death_fails_its_cell_then_restarts_until_the_bound() -> None:
    r = Restarts(allowed=2)
    assert r.dead("vm") == "" and r.given_up("vm") == "" and not r.may_restart("vm")
    assert r.died("vm", "compress rep 1", "QEMU exited (killed by signal 9)", 1.0) \
        == "environment died: QEMU exited (killed by signal 9)"
    assert r.dead("vm") == "QEMU exited (killed by signal 9)"
    assert r.may_restart("vm")
    r.restarted("vm", 7.123)
    assert r.dead("vm") == "" and r.restarts_of("vm") == 1
    r.died("vm", "compress rep 2", "QEMU exited (killed by signal 9)", 2.0)
    assert r.may_restart("vm")
    r.restarted("vm", 6.0)
    r.died("vm", "compress rep 3", "QEMU exited with status 1", 3.0)
    assert not r.may_restart("vm")  # two restarts spent: given up from now on
    assert r.given_up("vm") == ("environment died 3 times (the plan allows 2 restarts); last: "
                                "QEMU exited with status 1")
    assert r.dead("vm") == ""  # given up is not "waiting for a restart"
    meta = r.meta()
    assert [m["outcome"] for m in meta] == ["restarted", "restarted", "given up: no restarts left"]
    assert meta[0] == {"environment": "vm", "cell": "compress rep 1",
                       "why": "QEMU exited (killed by signal 9)", "at": 1.0,
                       "outcome": "restarted", "restart_s": 7.12}


def test_no_restarts_allowed_gives_up_at_the_first_death() -> None:
    r = Restarts(allowed=0)
    r.died("gv", "", "the gVisor sandbox (runsc-sandbox, pid 9) exited", 1.0)
    assert not r.may_restart("gv")
    assert r.given_up("gv") == ("environment died once (the plan allows 0 restarts); last: the "
                                "gVisor sandbox (runsc-sandbox, pid 9) exited")


def test_a_failed_restart_gives_up_and_other_environments_are_untouched() -> None:
    r = Restarts(allowed=2)
    r.died("gv", "rr rep 1", "gone", 1.0)
    r.died("vm", "compress rep 1", "QEMU exited", 1.5)
    assert r.may_restart("gv")
    r.restart_failed("gv", "failed to start: RuntimeError: no")
    assert r.given_up("gv").startswith("environment died once and could not be restarted "
                                       "(failed to start: RuntimeError: no); last: gone")
    assert r.dead("vm") == "QEMU exited" and r.given_up("vm") == ""
    # vm's death waits for its next cell; without one, its record says it was not needed
    assert r.meta()[1]["outcome"] == NOT_NEEDED


def test_a_resumed_run_keeps_the_earlier_records() -> None:
    earlier = [{"environment": "vm", "why": "x", "outcome": "restarted"}]
    r = Restarts(allowed=2, earlier=earlier)
    r.died("vm", "", "y", 2.0)
    assert [m["why"] for m in r.meta()] == ["x", "y"]
    assert r.restarts_of("vm") == 0  # the bound counts this process's restarts


def test_exit_words_and_process_gone() -> None:
    assert exit_words(-9) == "killed by signal 9 (SIGKILL)"
    assert exit_words(1) == "exited with status 1"
    assert exit_words(-200) == "killed by signal 200"
    assert process_gone(os.getpid()) == ""
    p = subprocess.Popen(["sleep", "60"])
    assert process_gone(p.pid) == ""
    os.kill(p.pid, signal.SIGKILL)
    for _ in range(2000):  # not reaped yet: a zombie, gone all the same
        if process_gone(p.pid):
            break
        time.sleep(0.001)
    assert process_gone(p.pid) == "exited"
    p.wait()
    assert process_gone(p.pid) == "exited"
    assert died_reason("x") == "environment died: x"


def test_plan_restarts_defaults_to_two_and_is_bounded(echo_workload: type) -> None:
    assert parse_plan(RUNNER_PLAN).restarts == 2
    assert parse_plan("restarts = 0\n" + RUNNER_PLAN).restarts == 0
    with pytest.raises(PlanError, match="restarts"):
        parse_plan("restarts = -1\n" + RUNNER_PLAN)


def test_the_report_warns_once_per_environment_that_died() -> None:
    records = [
        {"environment": "qemu", "why": "QEMU exited (killed by signal 9)",
         "outcome": "restarted"},
        {"environment": "qemu", "why": "QEMU exited (killed by signal 9)",
         "outcome": "given up: no restarts left"},
        {"environment": "gvisor", "why": "sandbox gone", "outcome": "restarted"},
    ]
    qemu, gvisor = _died(RunMeta({"restarts": records}).restarts)
    assert qemu.kind is ReportWarning.DIED and qemu.subject == "qemu"
    assert qemu.startswith("qemu died 2 times during the run (last: QEMU exited (killed by "
                           "signal 9)); it was restarted once, then given up: no "
                           "restarts left: its remaining cells failed.")
    assert gvisor.startswith("gvisor died once during the run (last: sandbox gone); it was "
                             "restarted once. A cell of it that was running then failed")
    assert _died(RunMeta({}).restarts) == [] and _died([]) == []
    # A malformed record (an older isotax's, say) reads as none, not as a crash.
    assert RunMeta({"restarts": [{"environment": 3}]}).restarts == []
