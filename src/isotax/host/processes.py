"""The host's processes by command line (/proc/PID/cmdline): who runs what, for the engines'
per-container processes and for the leak finders of every environment kind."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from isotax.parsers.procfs import parse_cmdline


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


def leftover_processes(match: Callable[[str, Sequence[str]], bool]) -> list[str]:
    """Leak-finder lines for host processes (this one aside) for which match(program's
    basename, argv) holds: what each is and how to remove it."""
    return [f"process {pid} {' '.join(args)[:120]} (kill {pid})"
            for pid, args in cmdlines(skip_self=True) if match(os.path.basename(args[0]), args)]
