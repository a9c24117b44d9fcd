"""What the terminal says about each host: the words per state, and the lines written when
the output is not a terminal (each change at once, a running host's cells once a minute)."""

from __future__ import annotations

import io

from rich.console import Console

from isotax.fleet.progress import FleetDisplay, HostView, summary_line, words
from isotax.fleet.state import HostState


def test_words() -> None:
    assert words(HostView("h", "pending")) == "pending"
    assert words(HostView("h", "installing")) == "installing"
    assert words(HostView("h", "waiting_machine", detail="h1")) == \
        "waiting for its machine (h1 runs there)"
    assert words(HostView("h", "waiting_turn", detail="run r1 (PID 7)")) == \
        "waiting for another run on the host: run r1 (PID 7)"
    assert words(HostView("h", "running", cells=3, planned=8)) == "running 3/8 cells"
    assert words(HostView("h", "running", cells=9, planned=8)) == "running 8/8 cells"
    assert words(HostView("h", "running", cells=3)) == "running, 3 cells"
    assert words(HostView("h", "exporting")) == "exporting its run"
    assert words(HostView("h", "complete")) == "done"
    assert words(HostView("h", "failed", detail="isotax run exited 2: isotax: no")) == \
        "failed: isotax run exited 2: isotax: no"
    assert words(HostView("h", "unreachable", detail="ssh: refused")) == \
        "unreachable: ssh: refused"


def test_summary_lines() -> None:
    assert summary_line(HostState("h1", "a", 22, "r1", "complete")) == "h1: complete, run r1"
    assert summary_line(HostState("h2", "a", 22, "r2", "unreachable", "ssh: x")) == \
        "h2: unreachable: ssh: x"
    assert summary_line(HostState("h3", "a", 22, "r3", "pending")) == "h3: pending"


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    clock = _Clock()
    console = Console(file=out, force_terminal=False, width=200)
    with FleetDisplay(console, ["h1", "h2"], planned=4, now=clock) as d:
        d.update("h1", "installing")
        d.update("h2", "installing")
        d.update("h1", "running", cells=0)
        d.update("h1", "running", cells=1)  # within the minute: not said
        clock.t = 61
        d.update("h1", "running", cells=2)
        d.update("h1", "running", cells=2)  # unchanged: not said
        d.update("h2", "unreachable", detail="ssh: connect to host [x] port 22: refused")
        d.update("h1", "complete")
        d.log("a line of its own")
    assert out.getvalue().splitlines() == [
        "h1: installing", "h2: installing", "h1: running 0/4 cells", "h1: running 2/4 cells",
        "h2: unreachable: ssh: connect to host [x] port 22: refused", "h1: done",
        "a line of its own"]


def test_the_table_on_a_terminal() -> None:
    clock = _Clock()
    d = FleetDisplay(Console(file=io.StringIO(), width=120), ["h1", "h2", "h3"], planned=8,
                     now=clock)
    d.update("h1", "installing")
    clock.t = 30
    d.update("h1", "running", cells=3)
    d.update("h2", "waiting_machine", detail="h1")
    clock.t = 95
    d.update("h3", "unreachable", detail="ssh: refused")
    clock.t = 100
    out = io.StringIO()
    Console(file=out, width=120).print(d._table())
    rows = [" ".join(x.split()) for x in out.getvalue().splitlines()]
    assert rows == ["host state in state total",
                    "h1 running 3/8 cells 1:10 1:40",
                    "h2 waiting for its machine (h1 runs there) 1:10 1:10",
                    "h3 unreachable: ssh: refused 0:00"]
