"""The CPU an environment's own host processes use during a run: /proc/PID/stat parsing on
real lines, the per-program difference, and real gVisor / runc instances, where the Sentry
must be charged for a busy loop run inside the sandbox."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support import started

from isotax.image.artifacts import ImageArtifacts
from isotax.telemetry import envcpu

DATA = Path(__file__).parent / "data" / "proc"

BUSY = ["sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"]


def test_parse_real_stat_lines() -> None:
    init = envcpu.parse_proc_stat_cpu((DATA / "stat-process_api.txt").read_text())
    assert (init.utime, init.stime, init.cutime, init.cstime) == (2422, 7656, 1339841, 477761)
    # its own time only: what it reaped (cutime, cstime) is its children's
    assert init.starttime == 24 and init.own == 2422 + 7656
    # a command name with spaces and parentheses: fields are counted after the last ')'
    odd = envcpu.parse_proc_stat_cpu((DATA / "stat-paren-comm.txt").read_text())
    assert odd.own == 0 and odd.starttime == 952206
    with pytest.raises(ValueError, match="not a /proc/PID/stat line"):
        envcpu.parse_proc_stat_cpu("1 (x) S 0 0")


def test_delta_by_program() -> None:
    before = {(10, 5): ("runsc-sandbox", 100), (11, 6): ("runsc-gofer", 20),
              (12, 7): ("sh", 3)}
    after = {(10, 5): ("runsc-sandbox", 350), (11, 6): ("runsc-gofer", 25),
             (13, 9): ("sh", 40),  # started in between: all of it counts
             (12, 99): ("sh", 1)}  # PID 12 reused by a new process: not compared with the old
    got = envcpu.delta_by_program(before, after, ticks_per_s=100)
    assert got == {"runsc-sandbox": 2.5, "sh": 0.41, "runsc-gofer": 0.05}
    assert list(got) == ["runsc-sandbox", "sh", "runsc-gofer"]  # largest first


@pytest.mark.integration
def test_gvisor_sentry_is_charged_for_work_inside(image: ImageArtifacts, tmp_path: Path) -> None:
    with started("test-envcpu-gv", "gvisor", "host", image, tmp_path) as inst:
        before = envcpu.snapshot(inst)
        assert any(name == "runsc-sandbox" for name, _ in before.values()), before
        done = inst.exec(BUSY, 120)
        assert done.returncode == 0, done.stderr
        got = envcpu.delta_by_program(before, envcpu.snapshot(inst))
    # every process has a name: the Sentry's stubs (systrap) are not left as runsc's "exe"
    assert "exe" not in got and {"runsc-sandbox", "runsc-gofer"} <= set(got), got
    # the loop ran in the sandbox: the Sentry and the stubs that run its application threads
    sandbox = got["runsc-sandbox"] + got.get("runsc-stub", 0)
    assert sandbox > 0.3 * done.wall_s, (got, done.wall_s)


@pytest.mark.integration
def test_runc_charges_its_processes_not_what_they_reaped(image: ImageArtifacts,
                                                         tmp_path: Path) -> None:
    with started("test-envcpu-runc", "runc", "host", image, tmp_path) as inst:
        before = envcpu.snapshot(inst)
        assert {name for name, _ in before.values()} == {"itx-ready"}
        # a server left running inside (as redis-server is) belongs to the container; it ends
        # in between here, reaped by the container's PID 1, and so it is not counted
        inst.exec(["sh", "-c", "sh -c 'while :; do :; done' >/dev/null 2>&1 & "
                   "echo $! > /tmp/itx-busy.pid"], 30).check()
        time.sleep(0.5)
        running = envcpu.delta_by_program(before, envcpu.snapshot(inst))
        inst.exec(["sh", "-c", "p=$(cat /tmp/itx-busy.pid); kill $p; "
                   "while kill -0 $p 2>/dev/null; do sleep 0.05; done"], 120).check()
        ended = envcpu.delta_by_program(before, envcpu.snapshot(inst))
    assert running.get("sh", 0) > 0.2, running  # alive in the container: charged to it
    assert "sh" not in ended and ended["itx-ready"] < 0.1, ended  # not to its reaper
