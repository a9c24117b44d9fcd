"""What the terminal says about each host while the fleet runs.

On a terminal: one table, redrawn in place, a row per host (its state in words, its cells, how
long it has been in that state). Elsewhere (a pipe, a CI log): one line per host each time its
state changes, and its cell count at most once a minute while it runs, as `isotax run` does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from isotax.fleet.state import HostState

EVERY_S = 60.0  # seconds between a running host's lines when not on a terminal

# Phases a host goes through, for the display; the state file keeps the coarser status.
PHASES = ("pending", "connecting", "installing", "waiting_machine", "starting", "waiting_turn",
          "running", "exporting", "importing", "complete", "failed", "unreachable", "canceled")
FINAL = ("complete", "failed", "unreachable", "canceled")


@dataclass
class HostView:
    name: str
    phase: str = "pending"
    cells: int = 0  # committed
    planned: int = 0  # the plan's cells (0: unknown)
    detail: str = ""  # the reason, what it waits for
    since: float = field(default_factory=time.monotonic)  # in this phase
    first: float | None = None  # left "pending"
    ended: float | None = None  # reached a final phase


def clock(seconds: float) -> str:
    s = max(0, round(seconds))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def words(v: HostView) -> str:
    """The host's state in a few words."""
    if v.phase == "waiting_machine":
        return f"waiting for its machine ({v.detail} runs there)" if v.detail else \
            "waiting for its machine"
    if v.phase == "waiting_turn":
        return "waiting for another run on the host" + (f": {v.detail}" if v.detail else "")
    if v.phase == "running":
        if v.planned:
            return f"running {min(v.cells, v.planned)}/{v.planned} cells"
        return f"running, {v.cells} cells"
    if v.phase in ("failed", "unreachable"):
        return f"{v.phase}: {v.detail}" if v.detail else v.phase
    return {"pending": "pending", "connecting": "connecting", "installing": "installing",
            "starting": "starting its run", "exporting": "exporting its run",
            "importing": "importing its run", "complete": "done",
            "canceled": "canceled"}.get(v.phase, v.phase)


def summary_line(h: HostState) -> str:
    """A host's line in the summary at the end."""
    if h.status == "complete":
        return f"{h.name}: complete, run {h.run_id}"
    if h.status in ("failed", "unreachable"):
        return f"{h.name}: {h.status}: {h.reason}"
    extra = f" ({h.reason})" if h.reason else ""
    return f"{h.name}: {h.status}{extra}"


class FleetDisplay:
    """The hosts' progress: a live table on a terminal, lines elsewhere."""

    def __init__(self, console: Console, names: Sequence[str], planned: int,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self._now = now
        self.views = {n: HostView(n, planned=planned, since=now()) for n in names}
        self._said: dict[str, tuple[str, float]] = {}
        self._live: Live | None = None

    def __enter__(self) -> FleetDisplay:
        if self.console.is_terminal:
            self._live = Live(self._table(), console=self.console, refresh_per_second=2,
                              transient=False, get_renderable=self._table)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def log(self, message: str) -> None:
        """A line above the table (or among the lines)."""
        self.console.print(message, highlight=False)

    def update(self, name: str, phase: str | None = None, **fields: Any) -> None:
        v = self.views[name]
        if phase is not None and phase != v.phase:
            v.phase, v.since = phase, self._now()
            v.detail = ""
            v.first = v.since if v.first is None else v.first
            v.ended = v.since if phase in FINAL else None
        for k, val in fields.items():
            setattr(v, k, val)
        if self._live is None:
            self._say(v)

    def _say(self, v: HostView) -> None:
        text, now = words(v), self._now()
        last = self._said.get(v.name)
        if last is not None and last[0] == text:
            return
        # A running host's cells change often: a line a minute; every other change at once.
        if last is not None and v.phase == "running" and last[0].startswith("running") and \
                now - last[1] < EVERY_S:
            return
        self._said[v.name] = (text, now)
        self.console.print(f"{v.name}: {escape(text)}", highlight=False)

    def _table(self) -> Table:
        t = Table("host", "state", "in state", "total", box=None, pad_edge=False)
        now = self._now()
        for v in self.views.values():
            style = {"complete": "green", "failed": "red", "unreachable": "red"}.get(v.phase, "")
            total = "" if v.first is None else clock((v.ended or now) - v.first)
            t.add_row(v.name, f"[{style}]{escape(words(v))}[/]" if style else escape(words(v)),
                      "" if v.ended is not None else clock(now - v.since), total)
        return t
