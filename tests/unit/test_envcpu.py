"""The CPU an environment's own host processes use during a run: /proc/PID/stat parsing on
real lines and the per-program difference."""

from __future__ import annotations

import pytest
from support import DATA

from isotax.parsers import procfs
from isotax.telemetry import envcpu


def test_parse_real_stat_lines() -> None:
    init = procfs.parse_pid_stat((DATA / "proc" / "stat-process_api.txt").read_text())
    assert (init.utime, init.stime, init.cutime, init.cstime) == (2422, 7656, 1339841, 477761)
    # its own time only: what it reaped (cutime, cstime) is its children's
    assert init.starttime == 24 and init.own == 2422 + 7656
    # a command name with spaces and parentheses: fields are counted after the last ')'
    odd = procfs.parse_pid_stat((DATA / "proc" / "stat-paren-comm.txt").read_text())
    assert odd.own == 0 and odd.starttime == 952206
    with pytest.raises(ValueError, match="not a /proc/PID/stat line"):
        procfs.parse_pid_stat("1 (x) S 0 0")


def test_delta_by_program() -> None:
    before = {(10, 5): ("runsc-sandbox", 100), (11, 6): ("runsc-gofer", 20),
              (12, 7): ("sh", 3)}
    after = {(10, 5): ("runsc-sandbox", 350), (11, 6): ("runsc-gofer", 25),
             (13, 9): ("sh", 40),  # started in between: all of it counts
             (12, 99): ("sh", 1)}  # PID 12 reused by a new process: not compared with the old
    got = envcpu.delta_by_program(before, after, ticks_per_s=100)
    assert got == {"runsc-sandbox": 2.5, "sh": 0.41, "runsc-gofer": 0.05}
    assert list(got) == ["runsc-sandbox", "sh", "runsc-gofer"]  # largest first
