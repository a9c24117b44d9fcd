"""The host's processes by command line (/proc/PID/cmdline): who runs what, for the engines'
per-container processes and for the leak finders of every environment kind."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from isotax.parsers.procfs import parse_cmdline
from isotax.protocols import Leftover, Stage


def cmdlines(skip_self: bool = False) -> Iterator[tuple[int, list[str]]]:
    """(pid, argv) of every host process with a command line (kernel threads have none); this
    process left out with skip_self."""
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or (skip_self and int(name) == me):
            continue
        try:
            raw = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        args = parse_cmdline(raw)
        if args:
            yield int(name), args


def read_cmdline(pid: int) -> list[str]:
    """A process's argv ([] when it is gone or has none)."""
    try:
        return parse_cmdline(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return []


def pids_matching(program: str, needles: Sequence[str]) -> list[int]:
    """Host processes whose program is `program` (basename) and whose arguments contain every
    one of the needles as a whole argument."""
    out = []
    for pid, args in cmdlines():
        if os.path.basename(args[0]) == program and all(n in args[1:] for n in needles):
            out.append(pid)
    return out


def pids_matching_prefix(program: str, prefix: str) -> list[int]:
    """Host processes whose program is `program` (basename) and one of whose arguments
    contains `prefix`."""
    return [pid for pid, args in cmdlines()
            if os.path.basename(args[0]) == program and any(prefix in a for a in args[1:])]


def names_itx(args: Sequence[str]) -> bool:
    """Whether one of a command line's arguments names an isotax resource ("itx-...": a
    container id, a VM's socket, a machine name)."""
    return any("itx-" in a for a in args[1:])


def leftover_processes(match: Callable[[str, Sequence[str]], bool],
                       what: str = "process") -> list[Leftover]:
    """Leftovers for host processes (this one aside) for which match(program's basename, argv)
    holds: each killed (after thawing a frozen cgroup it sits in) when removed."""
    return [process_leftover(pid, args, what)
            for pid, args in cmdlines(skip_self=True) if match(os.path.basename(args[0]), args)]


def process_leftover(pid: int, args: Sequence[str], what: str = "process") -> Leftover:
    """A leftover process, known by its command line and its cgroups (a container's init
    carries the container's environment, not isotax's, but sits in the container's cgroups,
    whose names carry its owner's tag)."""
    line = " ".join(args)
    try:
        groups = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        groups = ""
    return Leftover(f"{what} {pid} {line[:120]}", [("kill", "-9", str(pid))],
                    stage=Stage.PROCESS, names=(line, groups), pid=pid,
                    removal=lambda: kill_and_reap(pid))


def kill_and_reap(pid: int, wait_s: float = 5.0) -> None:
    """SIGKILL a leftover process and wait until it is gone. A process in a frozen cgroup (a
    paused container's) does not die until its cgroup is thawed, so thaw that first."""
    thaw_process_cgroup(pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        if not Path(f"/proc/{pid}").exists() or zombie(pid):
            return
        time.sleep(0.05)
    raise OSError(f"process {pid} still there {wait_s:.0f} s after SIGKILL")


def zombie(pid: int) -> bool:
    """Gone, or a zombie: no longer running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:].startswith("Z")


def thaw_process_cgroup(pid: int) -> None:
    """Thaw the freezer cgroup (v1) or the cgroup (v2) a process sits in, where frozen."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "freezer" in controllers.split(","):
                thaw(Path("/sys/fs/cgroup/freezer") / path.lstrip("/"))
            elif controllers == "":
                thaw(Path("/sys/fs/cgroup") / path.lstrip("/"))


def thaw(cgroup: Path) -> None:
    """Thaw a cgroup (v1 freezer.state, v2 cgroup.freeze) where it is frozen; else nothing."""
    v1, v2 = cgroup / "freezer.state", cgroup / "cgroup.freeze"
    with contextlib.suppress(OSError):
        if v1.exists() and v1.read_text().strip() != "THAWED":
            v1.write_text("THAWED\n")
        elif v2.exists() and v2.read_text().strip() == "1":
            v2.write_text("0\n")
