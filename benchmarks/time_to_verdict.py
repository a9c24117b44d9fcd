"""Time to verdict: how long `isotax run PLAN` takes from the command to its report, where that
time went (run_meta["phases"], isotax.analysis.phases) against isotax's goal of at most 5%
outside the workloads, and how many verdicts the run decided (run_meta["sequential"]).

Run as root: .venv/bin/python benchmarks/time_to_verdict.py [PLAN] [--results DIR]
runs PLAN (default: the built-in quick plan) and times it; --run RUN_ID only reads a stored run
(no new run). Prints a short plain-text block to paste into the README.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_RESULTS = Path(os.environ.get("ISOTAX_RESULTS") or "/var/lib/isotax/results")
VERDICTS = ("worse", "better", "equivalent", "undecided")


def clock(seconds: float) -> str:
    s = round(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m:02d}:{s % 60:02d}"


def verdicts_line(meta: Any) -> str:
    """run_meta["sequential"]: {"decided", "total", "counts": {verdict: n}}; n/a without it."""
    if not isinstance(meta, Mapping):
        return "n/a"
    decided, total, counts = meta.get("decided"), meta.get("total"), meta.get("counts")
    if not isinstance(decided, int) or not isinstance(total, int):
        return "n/a"
    line = f"{decided} of {total} decided"
    if isinstance(counts, Mapping):
        line += " (" + ", ".join(f"{k} {counts.get(k, 0)}" for k in VERDICTS) + ")"
    return line


def describe(store: Any, run_id: str, command_s: float | None) -> str:
    from isotax.analysis.phases import OVERHEAD_TARGET, breakdown

    run = store.get_run(run_id)
    meta = store.run_meta(run.id)
    host = run.host
    out = [f"isotax {run.plan_name}: run {run.id} ({run.status}) on "
           f"{host.get('cpu_model', '?')}, {host.get('cpus', '?')} CPUs, kernel "
           f"{host.get('kernel', '?')}"]
    if command_s is not None:
        out.append(f"time to verdict: {clock(command_s)} (`isotax run` from start to exit, "
                   "report included)")
    elif run.finished is not None and run.finished >= run.created:
        out.append(f"time to verdict: {clock(run.finished - run.created)} (stored: from the "
                   "run's start to its end, report not included)")
    b = breakdown(meta.get("phases"))
    if b is None:
        out.append("where the time went: n/a (the run has no phases meta)")
    else:
        report = "" if b.report_s is None else f" + report {clock(b.report_s)}"
        out.append(f"where the time went (run {clock(b.wall_s)}{report}):")
        width = max(len(r.name) for r in b.rows)
        out += [f"  {r.name:<{width}} {r.seconds:9.1f} s {r.share:7.1%}" for r in b.rows]
        out.append(f"  {'total':<{width}} {b.total_s:9.1f} s {1:7.1%}")
        verdict = "within" if b.within() else "OVER"
        top = b.largest_overhead()
        worst = "" if b.within() or top is None else (
            f"; largest: {top.name} {top.seconds:.1f} s ({top.share:.1%})")
        out.append(f"outside the workloads: {b.overhead_s:.1f} s = {b.overhead_share:.1%} of "
                   f"the wall time, goal at most {OVERHEAD_TARGET:.0%}: {verdict}{worst}")
    out.append(f"verdicts: {verdicts_line(meta.get('sequential'))}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plan", nargs="?", default="quick",
                    help="plan name or path for `isotax run` (default: quick)")
    ap.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                    help="results directory, passed to `isotax run` (default: $ISOTAX_RESULTS, "
                         "else /var/lib/isotax/results)")
    ap.add_argument("--run", metavar="RUN_ID",
                    help="only read this stored run (no new run)")
    args = ap.parse_args()
    from isotax.store.base import StoreError
    from isotax.store.sqlite import open_store

    if args.run:
        try:
            store = open_store(args.results, create=False)
            print(describe(store, args.run, None))
        except StoreError as e:
            print(f"time_to_verdict: {e}", file=sys.stderr)
            return 2
        return 0

    before: set[str] = set()
    if (args.results / "isotax.db").is_file():
        before = {r.id for r in open_store(args.results, create=False).list_runs()}
    cmd = [sys.executable, "-m", "isotax", "run", args.plan, "--results", str(args.results)]
    t0 = time.monotonic()
    rc = subprocess.run(cmd, check=False).returncode  # its output goes to this terminal
    took = time.monotonic() - t0
    try:
        store = open_store(args.results, create=False)
    except StoreError as e:
        print(f"time_to_verdict: `isotax run` exited {rc} and left no store: {e}",
              file=sys.stderr)
        return rc or 2
    runs = store.list_runs()  # oldest first
    new = [r for r in runs if r.id not in before]
    if not new:
        print(f"time_to_verdict: `isotax run` exited {rc} and made no run", file=sys.stderr)
        return rc or 2
    print()
    if rc:
        print(f"(isotax run exited {rc})")
    print(describe(store, new[-1].id, took))
    return rc


if __name__ == "__main__":
    sys.exit(main())
