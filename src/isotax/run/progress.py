"""Progress of a run for output that is not a terminal (a pipe, a file, a CI log).

rich's bar redraws one line in place: on a terminal that is what a person wants, but written to
a file it shows nothing until the run ends. `LineProgress` takes the bar's place there: the same
calls the runner makes on a rich Progress (add_task, update, advance, remove_task, console), and
out of them one full line at the start, every `every_s` seconds at a cell's end, when a phase
ends, and at the end:

    progress: cells 193/320, added 0 (0 of 300 s budget), 40/64 decided, 24 undecided, elapsed 6:02,
    ETA 2:10; now runc mysql
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

EVERY_S = 60.0  # seconds between progress lines; a cell in flight is never interrupted


def clock(seconds: float) -> str:
    """31:02, or 1:05:09 past an hour."""
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


@dataclass
class _Task:
    phase: str  # "fixed", or "round N" (an added round)
    total: int
    started: float
    done: int = 0
    description: str = ""


@dataclass
class ProgressState:
    """What the line says: fixed cells done of all, added cells done and their time, and
    how many headline ratios are decided."""

    started: float
    budget_s: float | None = None  # the plan's [verdicts] budget for added rounds, if any
    fixed_done: int = 0
    fixed_total: int = 0
    fixed_s: float = 0.0  # time spent on the fixed cells done so far
    added_done: int = 0
    added_s: float = 0.0  # time spent in finished added rounds
    verdicts: str = ""  # "40/64 decided, 24 undecided" once a round is in
    round_phase: str = ""  # the added round in flight, if any
    round_done: int = 0
    round_total: int = 0
    round_started: float = 0.0
    now_running: str = ""
    tasks: dict[int, _Task] = field(default_factory=dict)


def progress_line(st: ProgressState, now: float) -> str:
    """One line, full: cells done, added cells, verdicts so far, elapsed time and an estimate
    of what is left (from the fixed cells' own pace; added rounds are bounded by a budget)."""
    parts = [f"cells {st.fixed_done}/{st.fixed_total}"]
    spent = st.added_s + (now - st.round_started if st.round_phase else 0.0)
    if st.budget_s is not None:
        added = f"added {st.added_done} ({spent:.0f} of {st.budget_s:.0f} s budget"
    else:
        added = f"added {st.added_done} ({spent:.0f} s"
    if st.round_phase:
        added += f"; {st.round_phase}: {st.round_done}/{st.round_total}"
    parts.append(added + ")")
    if st.verdicts:
        parts.append(st.verdicts)
    parts.append(f"elapsed {clock(now - st.started)}")
    left = st.fixed_total - st.fixed_done
    if left > 0 and st.fixed_done > 0:
        eta = st.fixed_s / st.fixed_done * left
        parts.append(f"ETA {clock(eta)}" + (" + added rounds' budget" if st.budget_s else ""))
    elif st.budget_s is not None and spent < st.budget_s and left == 0:
        parts.append(f"ETA ≤ {clock(st.budget_s - spent)}")
    line = "progress: " + ", ".join(parts)
    return line + (f"; now {st.now_running}" if st.now_running else "")


class LineProgress:
    """The calls runner.Runner makes on rich's Progress, written as full lines."""

    def __init__(self, console: Console, budget_s: float | None = None,
                 every_s: float = EVERY_S, now: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self.every_s = every_s
        self._now = now
        self.state = ProgressState(started=now(), budget_s=budget_s)
        self._last = -float("inf")
        self._next_id = 0

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._say()

    def add_task(self, description: str, total: int = 0, phase: str = "fixed",
                 verdicts: str = "", **_: Any) -> int:
        now = self._now()
        if verdicts:
            self.state.verdicts = verdicts
        self._next_id += 1
        st = self.state
        st.tasks[self._next_id] = _Task(phase, int(total), now, description=description)
        if phase == "fixed":
            st.fixed_total += int(total)
        else:
            st.round_phase, st.round_done, st.round_total = phase, 0, int(total)
            st.round_started = now
        self._say()
        return self._next_id

    def update(self, task: int, description: str = "", verdicts: str = "", **_: Any) -> None:
        if description:
            self.state.now_running = description
        if verdicts:
            self.state.verdicts = verdicts

    def advance(self, task: int, advance: int = 1) -> None:
        now = self._now()
        st, t = self.state, self.state.tasks[task]
        t.done += advance
        if t.phase == "fixed":
            st.fixed_done += advance
            # The fixed cells' own pace: time since each fixed list began, once it has a cell.
            st.fixed_s = sum(now - x.started for x in st.tasks.values()
                             if x.phase == "fixed" and x.done)
        else:
            st.added_done += advance
            st.round_done += advance
        if t.done >= t.total or now - self._last >= self.every_s:
            if t.done >= t.total:
                st.now_running = ""
            self._say()

    def remove_task(self, task: int) -> None:
        t = self.state.tasks.pop(task)
        if t.phase != "fixed":
            st = self.state
            st.added_s += self._now() - t.started
            st.round_phase, st.round_done, st.round_total = "", 0, 0

    def _say(self) -> None:
        now = self._now()
        self._last = now
        self.console.print(progress_line(self.state, now), markup=False, highlight=False)
