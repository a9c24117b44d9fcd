"""The host's side of the fleet: a look at one run, as `isotax fleet probe` prints it (JSON)
for the run playbook, which asks before starting the run and then every poll interval.

The run is started detached (setsid) by a shell script, <work>/<run>.sh, that writes its PID
to <work>/<run>.pid, sends the run's output to <work>/<run>.log and its exit status to
<work>/<run>.rc. So the run is live while that shell lives (its command line names the run:
a PID the kernel gave to another process since never passes for it); the store says how far
it got and whether it is complete; the log's last words say why it ended or what it waits
for. `next` is what the playbook does with it: wait (live), done (complete in the store),
resume (in the store, not complete, nothing running it), start (not in the store) or error
(the store cannot be read: nothing is started on a guess). With a PostgreSQL store the host
never opens it: the controller reads the store and hands the run's status over.

One poll costs the host one short process (about 0.1 s of CPU): the default poll interval
(15 s) keeps that far below what a measurement notices.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

LOG_TAIL = 8192  # bytes of the log read for its last lines


@dataclass(frozen=True)
class Look:
    live: bool  # the shell running the run lives
    rc: int | None  # the run's exit status, once it ended
    status: str  # the run's status in the store; "" when it is not there
    cells: int  # cells committed
    waiting: str  # the run's "waiting for ..." line while it waits for its turn
    reason: str  # why the run ended without completing ("" while live or complete)
    error: str = ""  # the store could not be read (the run may still be fine)

    @property
    def next(self) -> str:
        if self.live:
            return "wait"
        if self.error:  # nothing is started on a guess: the run may be in the store
            return "error"
        if self.status == "complete":
            return "done"
        return "resume" if self.status else "start"

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "next": self.next})


def files(work: Path, run_id: str) -> tuple[Path, Path, Path]:
    """(pid, rc, log) files of run_id under work."""
    return work / f"{run_id}.pid", work / f"{run_id}.rc", work / f"{run_id}.log"


def _alive(pid_file: Path, run_id: str) -> bool:
    try:
        pid = int(pid_file.read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return False
    return state != "Z" and run_id.encode() in cmdline


def _last_lines(log: Path) -> list[str]:
    try:
        with log.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - LOG_TAIL))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [x.strip() for x in text.splitlines() if x.strip()]


def why_ended(rc: int | None, lines: list[str], status: str) -> str:
    """Why a run that is not live did not complete, in one line: its own last words (isotax's
    one-line errors start with "isotax: "), its exit status, its status in the store."""
    said = next((x for x in reversed(lines) if x.startswith("isotax: ")), "")
    if not said and rc != 130:  # an interrupted run's last words say how to resume it alone
        said = next((x for x in reversed(lines) if not x.startswith("progress: ")), "")
    if rc is None:
        head = "its isotax run ended without an exit status (killed, or the host rebooted)"
    elif rc == 130:
        head = "its isotax run was interrupted (exit 130)"
    else:
        head = f"isotax run exited {rc}"
    if status and status != "running":
        head += f", run {status}"
    return f"{head}: {said}" if said else head


def look(run_id: str, work: Path, in_store: Callable[[str], tuple[str, int]],
         known_status: str | None = None) -> Look:
    """The run's state on this host; in_store(run_id) -> (status or "", cells committed).
    With known_status (the controller read the store itself: PostgreSQL) the store is not
    opened here: that status decides what is next, and the reason leaves it out."""
    pid_file, rc_file, log = files(work, run_id)
    live = _alive(pid_file, run_id)
    rc = None
    with contextlib.suppress(OSError, ValueError):
        rc = int(rc_file.read_text().strip())
    error = ""
    if known_status is not None:
        status, cells = known_status, 0
    else:
        try:
            status, cells = in_store(run_id)
        except Exception as e:  # a store that cannot be reached now: said, not fatal
            status, cells = "", 0
            error = str(e).splitlines()[0] if str(e) else type(e).__name__
    lines = _last_lines(log)
    waiting = lines[-1] if live and lines and lines[-1].startswith("waiting for") else ""
    reason = "" if live or status == "complete" else \
        why_ended(rc, lines, status if known_status is None else "")
    if error and not live:
        reason = f"{reason}; the store could not be read: {error}"
    return Look(live, rc, status, cells, waiting, reason, error)
