"""The fleet's closing advice: each unfinished host gets the command that gets it further
from where the user stands (issue 29: advice that works). A host that refused the plan needs
a new fleet (a resumed one runs the stored plan); a run that can go on needs --resume, with
--force where the host's own line says its host changed; --force is refused without
--resume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from isotax.cli.fleet import _closing
from isotax.fleet.orchestrate import refused_plan
from isotax.fleet.state import FleetState, HostState


def _state(tmp_path: Path, **hosts: HostState) -> FleetState:
    s = FleetState("fleet-x", "p", 'name = "p"\n', str(tmp_path / "inv.ini"), "",
                   str(tmp_path))
    s.hosts = dict(hosts)
    return s


def test_a_refusal_of_the_plan_is_told_apart_from_a_refusal_to_resume() -> None:
    assert refused_plan({"rc": 2}, "")  # refused before the run was stored (feasibility)
    assert refused_plan({"rc": 2}, "refused")  # parity or identity: the run is stored refused
    assert not refused_plan({"rc": 2}, "interrupted")  # the host changed: --resume --force
    assert not refused_plan({"rc": 1}, "")
    assert not refused_plan({"rc": 130}, "interrupted")
    assert not refused_plan(None, "")  # no look at all: unreachable


def test_the_closing_line_gives_each_host_the_command_that_gets_it_further(
        tmp_path: Path) -> None:
    inv = tmp_path / "inv.ini"
    done = HostState("h1", "a", 22, "r1", "complete")
    cut = HostState("h2", "b", 22, "r2", "unreachable", "ssh: Connection refused")
    changed = HostState("h3", "c", 22, "r3", "failed",
                        "isotax run exited 2: isotax: run r3 was recorded on a host that "
                        "differs now (THP enabled: never vs always): restore the host's "
                        "settings, or pass --force to mix them and have the report say so")
    refused = HostState("h4", "d", 22, "r4", "failed", "isotax run exited 2: isotax: refused: "
                        "the environments do not get equal resources (...)", refused=True)

    line = _closing(_state(tmp_path, h1=done, h2=cut), tmp_path, inv)
    assert line == (f"fleet fleet-x: 1 of 2 hosts complete; run the others again: isotax "
                    f"fleet run --resume fleet-x --results {tmp_path}")
    line = _closing(_state(tmp_path, h1=done, h3=changed), tmp_path, inv)
    assert "--resume fleet-x --results" in line and "with --force" in line
    line = _closing(_state(tmp_path, h1=done, h4=refused), tmp_path, inv)
    assert "--resume" not in line.split("; ", 1)[1].split(":", 1)[0]
    assert "h4 refused the plan: change it as its line says and start a new fleet " \
           f"(isotax fleet run PLAN --inventory {inv} --results {tmp_path})" in line
    assert "run the others again" not in line
    both = _closing(_state(tmp_path, h2=cut, h4=refused), tmp_path, inv)
    assert "run the others again: isotax fleet run --resume fleet-x" in both
    assert "h4 refused the plan" in both
    assert _closing(_state(tmp_path, h1=done), tmp_path, inv) == \
        "fleet fleet-x: 1 of 1 hosts complete"


def test_force_goes_only_with_resume(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "isotax", "fleet", "run", "quick", "-i",
                        str(tmp_path / "inv.ini"), "--force", "--results", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "--force goes with --resume FLEET" in p.stderr
