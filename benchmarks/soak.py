"""Soak: a run of thousands of short cells, watched from outside (issue 29, item 3).

It writes a plan of native and runc (on a bridge) with four short points (compress at two
levels on 1 MiB, TCP_RR for one second, 4 KiB random reads for one second), as many repetitions
as --cells asks (default 2,000 cells: about 45 minutes here), runs `isotax run` on it into its
own results folder, and every --every cells (default 100) records, from /proc and the file
system, never by asking isotax:

  rss_mib        the runner's resident memory (VmRSS)
  fds            the runner's open files (/proc/PID/fd)
  store_bytes    the results database with its WAL, and bytes per committed cell
  wal_bytes      the WAL alone
  temp           files and folders in /tmp, /var/tmp and /run/isotax (each counted to depth 1)
  itx_temp       isotax-named (itx-*) entries of /tmp, /var/tmp and /dev/shm

Done means flat (the verdict lines at the end): the RSS grows less than 10% from cell 200 to
the end; the open files stay within 2 of their value at cell 200; no isotax-named temporary
entry outlives its cell (the run's own workdir, its instances' scratch and the cell in flight's:
a count that varies by at most 2 across checkpoints, and none left after the run); and the
bytes each cell adds to the store stay the same (the last third's per-cell bytes within 25% of
the first third's).

Run as root, with nothing else measuring (it takes isotax's measuring lock like any run):

    .venv/bin/python benchmarks/soak.py [--cells 2000] [--every 100] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from child import stop_child
from short_points import RR_AND_FIO

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv" / "bin" / "python"
POINTS = 4  # workload points in PLAN
ENVIRONMENTS = 2
PLAN = """
name = "soak"
description = "thousands of short cells: native and runc; compress, TCP_RR, random reads"
seed = 9
repetitions = {repetitions}
warmups = 0
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
network = "bridge"
[[workloads]]
name = "compress"
params = {{ corpus_mib = 1, threads = 1, level = [1, 2] }}
""" + RR_AND_FIO
TEMP_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/run/isotax"))
ITX_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))


@dataclass
class Checkpoint:
    cells: int
    seconds: float
    rss_mib: float
    fds: int
    store_bytes: int
    wal_bytes: int
    temp: int
    itx_temp: int


def committed(db: Path) -> int:
    """Cells committed so far (read-only: the run's store is never touched)."""
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return int(con.execute("SELECT COUNT(*) FROM cells").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def count_entries(dirs: tuple[Path, ...], pattern: str = "*") -> int:
    return sum(len(list(d.glob(pattern))) for d in dirs if d.is_dir())


def checkpoint(pid: int, db: Path, cells: int, t0: float) -> Checkpoint:
    wal = db.with_name(db.name + "-wal")
    size = db.stat().st_size if db.exists() else 0
    wal_bytes = wal.stat().st_size if wal.exists() else 0
    return Checkpoint(cells, round(time.monotonic() - t0, 1), round(rss_mib(pid), 1),
                      len(os.listdir(f"/proc/{pid}/fd")), size + wal_bytes, wal_bytes,
                      count_entries(TEMP_DIRS), count_entries(ITX_DIRS, "itx-*"))


def per_cell_bytes(a: Checkpoint, b: Checkpoint) -> float:
    """Bytes the store grew by per cell between two checkpoints (the WAL folded in)."""
    return (b.store_bytes - a.store_bytes) / max(1, b.cells - a.cells)


def verdicts(points: list[Checkpoint], itx_after: int, itx_before: int) -> list[str]:
    """The flatness checks, one line each, "ok" or "NOT FLAT" first. Pure."""
    out = []
    base = next((p for p in points if p.cells >= 200), None)
    last = points[-1] if points else None
    if base is None or last is None or last.cells <= base.cells:
        return ["NOT FLAT: too few cells to judge (give more --cells)"]
    growth = (last.rss_mib - base.rss_mib) / base.rss_mib
    out.append(f"{'ok' if growth < 0.10 else 'NOT FLAT'}: runner RSS {base.rss_mib:.1f} MiB at "
               f"cell {base.cells}, {last.rss_mib:.1f} MiB at cell {last.cells} "
               f"({growth:+.1%}; less than +10% wanted)")
    later = [p for p in points if p.cells >= base.cells]
    fds = [p.fds for p in later]
    out.append(f"{'ok' if max(fds) - base.fds <= 2 else 'NOT FLAT'}: open files "
               f"{min(fds)}-{max(fds)} from cell {base.cells} ({base.fds} there)")
    # The run's workdir and its instances' scratch, plus at most the cell in flight's own
    # (perf's FIFOs, a client's log): a count that climbs is a file that outlived its cell.
    itx = [p.itx_temp for p in later]
    steady = max(itx) - min(itx) <= 2 and itx_after <= itx_before
    out.append(f"{'ok' if steady else 'NOT FLAT'}: isotax-named temporary entries during the "
               f"run {min(itx)}-{max(itx)}, {itx_after} after it ({itx_before} before)")
    third = max(1, len(points) // 3)
    first = per_cell_bytes(points[0], points[third])
    end = per_cell_bytes(points[-1 - third], points[-1])
    same = first > 0 and abs(end - first) / first <= 0.25
    out.append(f"{'ok' if same else 'NOT FLAT'}: store bytes per cell {first:.0f} in the "
               f"first third, {end:.0f} in the last")
    return out


def table(points: list[Checkpoint]) -> str:
    head = ("| cells | minutes | runner RSS MiB | open files | store bytes | bytes/cell | "
            "WAL bytes | temp entries | itx-* temp |")
    rows = [head, "|" + "---|" * 9]
    prev = None
    for p in points:
        per = f"{per_cell_bytes(prev, p):.0f}" if prev is not None else ""
        rows.append(f"| {p.cells} | {p.seconds / 60:.1f} | {p.rss_mib:.1f} | {p.fds} | "
                    f"{p.store_bytes} | {per} | {p.wal_bytes} | {p.temp} | {p.itx_temp} |")
        prev = p
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=2000)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("soak: run as root (it starts containers)", file=sys.stderr)
        return 2
    if args.cells < 2 * POINTS * ENVIRONMENTS or args.every < 1:
        print(f"soak: give --cells of at least {2 * POINTS * ENVIRONMENTS} and --every >= 1",
              file=sys.stderr)
        return 2
    repetitions = math.ceil(args.cells / (POINTS * ENVIRONMENTS))
    work = Path(tempfile.mkdtemp(prefix="isotax-soak-", dir="/var/lib/isotax"))
    plan = work / "soak.toml"
    plan.write_text(PLAN.format(repetitions=repetitions))
    results = work / "results"
    db = results / "isotax.db"
    itx_before = count_entries(ITX_DIRS, "itx-*")
    log = (work / "run.log").open("w")
    t0 = time.monotonic()
    child = subprocess.Popen([str(PYTHON), "-m", "isotax", "run", str(plan), "--results",
                              str(results), "--no-report"], stdout=log, stderr=subprocess.STDOUT,
                             cwd=REPO)
    points: list[Checkpoint] = []
    nxt = args.every
    print(f"soak: {repetitions * POINTS * ENVIRONMENTS} cells, log {work / 'run.log'}",
          flush=True)
    try:
        while child.poll() is None:
            n = committed(db)
            if n >= nxt:
                try:
                    points.append(checkpoint(child.pid, db, n, t0))
                except OSError:
                    break  # the runner ended between two looks
                print(f"  {asdict(points[-1])}", flush=True)
                nxt = (n // args.every + 1) * args.every
            time.sleep(1.0)
    except KeyboardInterrupt:
        stop_child(child)
    finally:
        if child.poll() is None:
            stop_child(child)
        log.close()
    time.sleep(1.0)
    itx_after = count_entries(ITX_DIRS, "itx-*")
    lines = verdicts(points, itx_after, itx_before)
    print(f"\nsoak: {committed(db)} cells in {(time.monotonic() - t0) / 60:.1f} min, runner "
          f"exit {child.returncode}\n")
    print(table(points))
    print("\n" + "\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"cells": committed(db), "rc": child.returncode,
                                         "points": [asdict(p) for p in points],
                                         "verdicts": lines, "work": str(work)}, indent=1))
    return 0 if child.returncode == 0 and all(ln.startswith("ok") for ln in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
