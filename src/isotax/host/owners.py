"""Who made what: a ledger per isotax process that creates host resources, so that what a
*dead* isotax process left (killed with SIGKILL, or a host that rebooted mid-run) can be told
from what a *live* run owns, and removed without touching the latter (run/leaks.py).

A ledger is a file /run/isotax/owners/<pid>-<start>, where <start> is the process's start time
in clock ticks since boot (/proc/PID/stat field 22), so a reused PID never passes for its
predecessor. Its owner holds an exclusive flock on it for its whole life; the kernel drops the
lock when the process ends, however it ends, so "is its owner alive?" is one non-blocking lock
attempt. /run is a tmpfs: a reboot empties it together with the namespaces, links and rules
the ledgers would have named.

The ledger's first line is a JSON header (pid, the run it measures, its command line, since
when); every later line is one *mark*: a tag that the names of the owner's resources contain
(a container id's random part, a bridge's tag) or a path they live under (the run's workdir).
Every process isotax starts after claiming inherits ISOTAX_OWNER=<ledger name> in its
environment, so a process left behind (a VM, a sandbox's Sentry, a native server) names its
owner itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

OWNERS_DIR = Path("/run/isotax/owners")
ENV_VAR = "ISOTAX_OWNER"


@dataclass(frozen=True)
class Ledger:
    """One isotax process's record: who it is, whether it still lives, and its marks."""

    name: str  # <pid>-<start>: the file's name, and ISOTAX_OWNER's value in its children
    pid: int
    live: bool
    run_id: str = ""  # the run it measures ("" for a process that measures nothing)
    beside: bool = False  # a run started to measure beside another (isotax run --beside)
    argv: str = ""
    since: float = 0.0
    marks: tuple[str, ...] = field(default=(), repr=False)

    def owns(self, names: tuple[str, ...]) -> bool:
        """Whether any of a resource's names contains one of this ledger's marks."""
        return any(m in n for m in self.marks for n in names)


def _start_ticks(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat; the
    command name in field 2 may hold spaces and parentheses, so count from its end)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2:].split()[19]


class _Mine:
    """This process's ledger once claimed: the open file that holds the lock."""

    def __init__(self) -> None:
        self.file: IO[str] | None = None
        self.name = ""
        self.pid = 0
        self.tag = ""  # temp_prefix's, once drawn (in the process tag_pid)
        self.tag_pid = 0
        self.run_id = ""  # the run this process names itself by ("" for none)


_mine = _Mine()


def claim(run_id: str = "", beside: bool = False, directory: Path | None = None) -> str:
    """Make (once per process) and lock this process's ledger; a run names itself. Returns the
    ledger's name. Where /run/isotax cannot be written (an unprivileged user, who creates no
    host resources either), returns "" and records nothing."""
    d = directory or OWNERS_DIR
    if _mine.file is not None and _mine.pid == os.getpid():
        if run_id:
            _write_header(run_id, beside)
        return _mine.name
    pid = os.getpid()
    name = f"{pid}-{_start_ticks(pid)}"
    try:
        d.mkdir(parents=True, exist_ok=True)
        f = open(d / name, "a+")  # noqa: SIM115 - held open for the process's life
    except OSError:
        return ""
    fcntl.flock(f, fcntl.LOCK_EX)
    _mine.file, _mine.name, _mine.pid = f, name, pid
    _write_header(run_id, beside)
    os.environ[ENV_VAR] = name
    return name


def _write_header(run_id: str, beside: bool) -> None:
    """(Re)write the header line, keeping the marks already recorded."""
    f = _mine.file
    assert f is not None
    f.seek(0)
    lines = f.read().splitlines()[1:]
    _mine.run_id = run_id
    header = {"pid": _mine.pid, "run_id": run_id, "beside": beside,
              "argv": " ".join(sys.argv)[:300], "since": time.time()}
    f.seek(0)
    f.truncate()
    f.write(json.dumps(header) + "\n" + "".join(f"{m}\n" for m in lines))
    f.flush()


def mark(text: str) -> str:
    """Record that names containing `text` are this process's (claiming its ledger first if
    need be); returns text. Children forked by libraries write to the same open file."""
    if _mine.file is None:
        claim()
    if _mine.file is not None:
        _mine.file.write(text + "\n")
        _mine.file.flush()
    return text


def new_tag(nbytes: int = 3, prefix: str = "") -> str:
    """A random tag for a resource's name (prefix + hex), recorded as this process's. A tag of
    digits alone is drawn again: it could be read inside a PID or a port."""
    while True:
        tag = prefix + secrets.token_hex(nbytes)
        if not tag.isdigit():
            return mark(tag)


def temp_prefix(kind: str) -> str:
    """The prefix of a temporary file or folder of this process's ("itx-perf-<tag>-"): the tag
    is drawn and recorded once per process, so whatever a killed process left in /tmp is known
    as its, and a live one's is never taken for a leftover."""
    if _mine.tag_pid != os.getpid():
        _mine.tag, _mine.tag_pid = new_tag(3, "t"), os.getpid()
    return f"itx-{kind}-{_mine.tag}-"


def release() -> None:
    """At a clean end, once everything the process made is removed: drop the ledger."""
    if _mine.file is None or _mine.pid != os.getpid():
        return
    with contextlib.suppress(OSError):
        (Path(_mine.file.name)).unlink()
    _mine.file.close()
    _mine.file, _mine.name = None, ""
    os.environ.pop(ENV_VAR, None)


def my_run() -> str:
    """The run this process claimed its ledger for, "" for none."""
    return _mine.run_id if _mine.pid == os.getpid() else ""


def mine() -> str:
    """This process's ledger name, "" before it claims one."""
    return _mine.name if _mine.pid == os.getpid() else ""


def ledgers(directory: Path | None = None) -> list[Ledger]:
    """Every ledger on the host, each with whether its owner still lives."""
    d = directory or OWNERS_DIR
    out = []
    for path in sorted(d.glob("*-*")) if d.is_dir() else []:
        try:
            with open(path) as f:
                live = _held(f) or path.name == mine()
                lines = f.read().splitlines()
        except OSError:
            continue  # removed meanwhile: its owner ended cleanly
        try:
            header = json.loads(lines[0]) if lines else {}
        except ValueError:
            header = {}
        out.append(Ledger(path.name, pid_of(path.name), live, str(header.get("run_id", "")),
                          bool(header.get("beside", False)), str(header.get("argv", "")),
                          float(header.get("since", 0.0)), tuple(x for x in lines[1:] if x)))
    return out


def pid_of(name: str) -> int:
    """The PID in a ledger's name (<pid>-<start>); 0 where it has none."""
    head = name.split("-")[0]
    return int(head) if head.isdigit() else 0


def _held(f: IO[str]) -> bool:
    """Whether another open file holds the lock (its owner lives)."""
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(f, fcntl.LOCK_UN)
    return False


def forget(ledger: Ledger, directory: Path | None = None) -> None:
    """Remove a dead owner's ledger once nothing it names is left."""
    if ledger.live:
        return
    with contextlib.suppress(OSError):
        ((directory or OWNERS_DIR) / ledger.name).unlink()


def owner_of_process(pid: int) -> str | None:
    """The ledger name a process inherited (ISOTAX_OWNER), None where it has none."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for item in env.split(b"\0"):
        if item.startswith(ENV_VAR.encode() + b"="):
            return item.split(b"=", 1)[1].decode(errors="replace")
    return None
