"""Free disk space: how much a run's results need, whether a filesystem has it, and the one
line isotax gives when it has not (before a run or an image build) or when a disk filled
anyway (in the middle of a run).

`free_bytes` reads the filesystem (os.statvfs); everything else is a pure function of byte
counts, so the decisions and their words are tested without a full disk.

The figures, measured on the development machine (2026-11-24, Debian 12, 2 vCPUs):

- STORE_BYTES_PER_CELL: /var/lib/isotax/results/isotax.db held the two quick runs
  (20261124-081514-quick-7a7b and 20261124-102241-quick-1803), 915 committed cells in
  7,098,368 bytes (1733 pages of 4 KiB): 7.6 KiB per cell, everything counted (its samples,
  its telemetry summary and sampled series, which are 3.5 MiB of the 6.8, the indexes, and the
  runs' environment and metadata rows). Rounded up with half as much again for longer series:
  12 KiB.
- STORE_JOURNAL_BYTES: SQLite's write-ahead log grows to about 1000 pages (4 MiB, its
  automatic checkpoint) before it is written over from its start, and never shrinks while the
  store is open; its index (-shm) takes 32 KiB: 5 MiB.
- REPORT_BYTES: the quick run's four report files take 2.0 MiB (report.html 1.0 MiB,
  results.json 0.7 MiB, report.md 0.15 MiB, results.csv 0.13 MiB); each is written beside its
  place first and renamed: 3 MiB.
"""

from __future__ import annotations

import os
from pathlib import Path

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

STORE_BYTES_PER_CELL = 12 * KiB
STORE_JOURNAL_BYTES = 5 * MiB
REPORT_BYTES = 3 * MiB


def run_bytes(cells: int, report: bool = True) -> int:
    """What a run of `cells` cells still to commit needs under its results directory: the
    store's rows, its journal, and (unless report=False) the report."""
    return (max(0, cells) * STORE_BYTES_PER_CELL + STORE_JOURNAL_BYTES
            + (REPORT_BYTES if report else 0))


def free_bytes(path: Path) -> int:
    """Bytes free for use under path (`df`'s Avail), read at its nearest existing ancestor:
    a results directory need not exist yet."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    st = os.statvfs(p)
    return st.f_bavail * st.f_frsize


def human(n: int) -> str:
    """A byte count in words: 512 B, 584 KiB, 7.1 MiB, 4.6 GiB."""
    if n < KiB:
        return f"{n} B"
    for unit, size in (("GiB", GiB), ("MiB", MiB)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n / KiB:.0f} KiB"


def shortfall(free: int, needed: int) -> int:
    """Bytes to free before `needed` fits in `free`; 0 when it fits."""
    return max(0, needed - free)


def refusal(path: Path, free: int, needed: int, what: str, fix: str) -> str | None:
    """The one line that refuses to start `what` (nothing has been written yet), or None when
    `needed` bytes fit in `free`. `fix` is the alternative to freeing space ("or give
    --results DIR on a larger disk")."""
    short = shortfall(free, needed)
    if not short:
        return None
    return (f"not enough free space under {path} for {what}: {human(free)} free, about "
            f"{human(needed)} needed; free {human(short)} there {fix}".rstrip())


def filled(path: Path, free: int, needed: int, what: str, then: str) -> str:
    """The one line for a disk that filled while writing `what`: what it has, what the rest
    needs, and the command to run once space is freed (`then`). At least 1 MiB is asked for,
    since the disk did fill."""
    return (f"the disk under {path} is full ({what}): {human(free)} free, about "
            f"{human(needed)} needed; free {human(max(shortfall(free, needed), MiB))} "
            f"under {path}, then {then}")


def check(path: Path, needed: int, what: str, fix: str) -> str | None:
    """refusal() for the filesystem path is on, read now."""
    return refusal(path, free_bytes(path), needed, what, fix)
