"""One measuring run per host at a time, unless asked otherwise.

Two runs on one host measure each other: each one's workloads take the CPUs, caches and memory
bandwidth the other is timing. So `isotax run` takes the host's measuring lock (an flock on
/run/isotax/measuring.lock, dropped by the kernel when the run ends however it ends) and a
second run waits for it, saying which run it waits for. `isotax run --beside` does not wait
(tests of several hosts simulated on one machine need that): it measures beside whatever runs,
and every cell it or the other run takes while both measure is recorded (Overlap) and carries
a warning naming the other run in their reports.

Which runs measure now is read from the owners' ledgers (host.owners): a run names itself in
its own ledger, so `isotax runs` can show which runs are live and their PIDs.
"""

from __future__ import annotations

import contextlib
import fcntl
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from isotax.host import owners
from isotax.run.recovery import live_runs

MEASURING_LOCK = Path("/run/isotax/measuring.lock")
WAIT_POLL_S = 2.0


@contextlib.contextmanager
def measuring_turn(beside: bool, log: Callable[[str], None],
                   lock_path: Path = MEASURING_LOCK,
                   poll_s: float = WAIT_POLL_S) -> Iterator[None]:
    """Hold the host's measuring lock for the block, waiting for a run that holds it (and
    saying so, once per run waited for); with beside, go on at once, saying which runs measure
    already."""
    if beside:
        others = live_runs()
        if others:
            log(f"[yellow]measuring beside {_names(others)}: cells taken while both measure "
                "carry a warning naming the other run[/]")
        yield
        return
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    f: IO[str] = open(lock_path, "a")  # noqa: SIM115 - held for the block
    try:
        told: set[str] = set()
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holders = [lg for lg in live_runs() if not lg.beside]
                key = _names(holders) or "another isotax run"
                if key not in told:
                    told.add(key)
                    log(f"waiting for {key} to end: one run measures on a host at a time "
                        "(`isotax run --beside` measures beside it, with a warning on every "
                        "result taken while both run)")
                time.sleep(poll_s)
        yield
    finally:
        f.close()  # drops the lock


def _names(ledgers: list[owners.Ledger]) -> str:
    return ", ".join(f"run {lg.run_id} (PID {lg.pid})" for lg in ledgers)


class Overlap:
    """Which other runs measured while this run's cells ran: asked before and after each cell
    (a listing of a few ledger files), kept as {other run: {"pid", "cells": [cell ident]}} for
    the run's meta ("concurrent"), which the report turns into warnings."""

    def __init__(self, before: dict[str, dict[str, object]] | None = None) -> None:
        self.seen: dict[str, dict[str, object]] = dict(before or {})
        self._at_start: list[owners.Ledger] = []

    def start(self) -> None:
        self._at_start = live_runs()

    def end(self, ident: str) -> bool:
        """Record the cell against every run live at its start or end; True when there was
        one (the caller stores the meta)."""
        others = {lg.run_id: lg for lg in [*self._at_start, *live_runs()]}
        for run_id, lg in others.items():
            entry = self.seen.setdefault(run_id, {"pid": lg.pid, "cells": []})
            cells = entry["cells"]
            assert isinstance(cells, list)
            if ident not in cells:
                cells.append(ident)
        return bool(others)
