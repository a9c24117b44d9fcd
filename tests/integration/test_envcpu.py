"""The CPU an environment's own host processes use, for real: gVisor and runc instances,
where the Sentry must be charged for a busy loop run inside the sandbox."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support import started

from isotax.image.artifacts import ImageArtifacts
from isotax.telemetry import envcpu

BUSY = ["sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"]


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
