"""The A/A canary's false-verdict rate on this host: N short runs of a small plan in which the
baseline (native) runs against its own A/A copy (aa = true: "native-aa") and nothing else, on a
few cheap workloads. Both sides are native, so every "worse" or "better" verdict of native-aa
against native is false. Prints, over all runs and headline ratios, how many ended worse or
better, with a 95% Clopper-Pearson interval, and how many ended equivalent or undecided.

Run as root:
    .venv/bin/python benchmarks/aa_canary.py [--runs 20] [--plan PATH] [--results DIR] [--json FILE]

Without --plan each run gets the built-in plan below (PLAN_TOML) with its own seed (1, 2, ...),
written to a temporary file. Results go to /var/lib/isotax/aa-canary by default, apart from the
user's results, so that these runs are not "the newest stored A/A run" of the host there.
--read-only counts the runs already in the results directory instead of running new ones.

Where a run's stored verdicts (run_meta["sequential"]["ratios"]) hold no ratio of the canary
(the design before issue 28 excluded the A/A copy from its verdicts), the canary's verdicts are
computed from the run's cells with isotax's own sequential.assess and the run's margins, and the
table says "recomputed".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from short_points import RR_AND_FIO

sys.path.insert(0, str(Path(__file__).resolve().parent))
from child import stop_child

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv" / "bin" / "python"
RESULTS = Path("/var/lib/isotax/aa-canary")
VERDICTS = ("worse", "better", "equivalent", "undecided")
PLAN_NAME = "aa-canary"

# Three cheap points, ~1-2 s a cell: 18 cells in the fixed rounds, then added rounds up to
# --cap pairs a point (default 12) within --deadline-s (default 90 s): at the defaults a run
# takes at most about 2 minutes.
PLAN_TOML = """\
name = "{name}"
description = "A/A canary: native against its own copy (native-aa); every worse or better is false"
seed = {seed}
repetitions = 3
warmups = 1
timeout_s = 120

{aa}
[verdicts]
margin = "auto"
max_repetitions = {cap}
deadline_s = {deadline_s}

[[environments]]
name = "native"
kind = "native"
{copy}
[[workloads]]
name = "compress"
params = {{ level = 2, threads = 0, corpus_mib = 4 }}

""" + RR_AND_FIO


# -- the pure parts (tests/unit/test_bench_scripts.py) ------------------------------------------

# --chased: native's copy as an ordinary environment, not the run's canary: judged and given
# added rounds the way every real ratio is (the canary stops at its floor's 3 pairs), so its
# false worse/better rate is the rate of the verdicts a user acts on. Margins then come from
# a stored A/A run of the host in --results (a canary run), else the minimum.
COPY = "native-copy"


def plan_text(seed: int, name: str = PLAN_NAME, chased: bool = False, cap: int = 12,
              deadline_s: float = 90) -> str:
    if chased:
        return PLAN_TOML.format(seed=seed, name=name, aa="", cap=cap, deadline_s=deadline_s,
                                copy=f'\n[[environments]]\nname = "{COPY}"\nkind = "native"\n')
    return PLAN_TOML.format(seed=seed, name=name, aa="aa = true\n", copy="", cap=cap,
                            deadline_s=deadline_s)


def has_aa_run(results: Path) -> bool:
    """Whether the store under results holds a complete run with an A/A canary: what a
    chased run takes its margins from (isotax.analysis.margins.stored_aa_floors); without
    one every margin is the minimum, ±2%, which an A/A ratio at this host's spreads rarely
    reaches in a run's time (none of 60 did on 2026-11-29, at a cap of 12)."""
    if not (results / "isotax.db").is_file():
        return False
    from isotax.plan import parse_plan
    from isotax.store.sqlite import open_store

    store = open_store(results, create=False)
    try:
        for run in store.list_runs():
            try:
                if run.status == "complete" and parse_plan(run.plan_toml).aa:
                    return True
            except Exception:  # a plan this code no longer takes
                continue
        return False
    finally:
        store.close()


def canary_verdicts(meta: Any, canary: str) -> list[str] | None:
    """The verdicts of the canary's ratios in run_meta["sequential"] (a verdict other than
    worse, better or equivalent counts as undecided); None where the meta holds no ratio of
    the canary at all."""
    if not isinstance(meta, Mapping) or not isinstance(meta.get("ratios"), list):
        return None
    out = [str(r.get("verdict")) if r.get("verdict") in VERDICTS else "undecided"
           for r in meta["ratios"] if isinstance(r, Mapping) and r.get("environment") == canary]
    return out or None


def tally(verdicts: Iterable[str]) -> dict[str, int]:
    counts = dict.fromkeys(VERDICTS, 0)
    for v in verdicts:
        counts[v if v in counts else "undecided"] += 1
    return counts


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval of a binomial proportion k/n."""
    if not 0 <= k <= n or n == 0:
        raise ValueError(f"{k} of {n} is no proportion")
    from scipy.stats import beta

    a = 1 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return low, high


@dataclass(frozen=True)
class RunResult:
    run_id: str | None
    status: str
    wall_s: float | None
    verdicts: tuple[str, ...]
    source: str  # "stored" | "recomputed" | "none"
    run_s: float | None = None  # the stored run's own span (wall_s includes a wait for another)


def report_lines(runs: list[RunResult], confidence: float = 0.95) -> list[str]:
    head = ("run", "run id", "wall", "stored", "worse", "better", "equiv", "undec", "verdicts")
    lines = [head]
    for i, r in enumerate(runs, 1):
        t = tally(r.verdicts)
        wall = "-" if r.wall_s is None else f"{r.wall_s:.0f}s"
        lines.append((str(i), r.run_id or "?", wall,
                      "-" if r.run_s is None else f"{r.run_s:.0f}s", str(t["worse"]),
                      str(t["better"]),
                      str(t["equivalent"]), str(t["undecided"]),
                      r.source + ("" if r.status == "complete" else f", {r.status}")))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
           for line in lines]
    total = tally(v for r in runs for v in r.verdicts)
    n = sum(total.values())
    false = total["worse"] + total["better"]
    out.append("")
    if n == 0:
        out.append("canary: no verdict of native-aa against native in any run")
        return out
    low, high = clopper_pearson(false, n, confidence)
    out.append(f"canary false verdicts (worse or better): {false} of {n} ratios = "
               f"{false / n:.1%}, {confidence:.0%} Clopper-Pearson [{low:.1%}, {high:.1%}] "
               f"over {len(runs)} run(s)")
    out.append(f"  worse {total['worse']}, better {total['better']}, equivalent "
               f"{total['equivalent']}, undecided {total['undecided']}")
    return out


def summary(runs: list[RunResult], confidence: float = 0.95) -> dict[str, Any]:
    total = tally(v for r in runs for v in r.verdicts)
    n = sum(total.values())
    false = total["worse"] + total["better"]
    ci = clopper_pearson(false, n, confidence) if n else (math.nan, math.nan)
    return {"runs": len(runs), "ratios": n, "false": false,
            "rate": false / n if n else None, "confidence": confidence,
            "interval": list(ci) if n else None, "counts": total}


# -- the runs --------------------------------------------------------------------------------

def recomputed_verdicts(store: Any, run_id: str) -> list[str]:
    """The canary's verdicts from the run's cells, as the run's own verdict rule would give
    them (its plan's baseline, margins, repetitions, cap and confidence)."""
    from isotax.analysis import margins as margin_rules
    from isotax.analysis import sequential
    from isotax.plan import parse_plan

    run = store.get_run(run_id)
    plan = parse_plan(run.plan_toml)
    cells = store.cells(run_id)
    aa = plan.aa_name
    margins = margin_rules.margins_for(store, run_id, plan.verdicts.margin, plan.baseline,
                                       aa if plan.aa else None, cells)
    cap = max(plan.repetitions, plan.verdicts.max_repetitions or 0)
    progress = sequential.assess(cells, plan.baseline, margins, plan.repetitions, cap,
                                 plan.verdicts.confidence)
    return [r.verdict.verdict.value for r in progress.ratios if r.environment == aa]


def read_run(results: Path, run_id: str, wall_s: float | None) -> RunResult:
    from isotax.plan import parse_plan
    from isotax.store.sqlite import open_store

    store = open_store(results, create=False)
    try:
        run = store.get_run(run_id)
        span = run.finished - run.created if run.finished else None
        try:
            baseline = parse_plan(run.plan_toml).baseline
        except Exception:  # a plan this code no longer takes: the default baseline
            baseline = "native"
        named = {e.name for e in store.environments(run_id)}
        stored = canary_verdicts(store.run_meta(run_id).get("sequential"),
                                 COPY if COPY in named else f"{baseline}-aa")
        if stored is not None:
            return RunResult(run_id, run.status, wall_s, tuple(stored), "stored", span)
        try:
            again = recomputed_verdicts(store, run_id)
        except Exception as e:  # an internal API that moved: say so, count nothing
            print(f"aa_canary: {run_id}: cannot recompute the canary's verdicts: "
                  f"{type(e).__name__}: {e}", file=sys.stderr)
            again = []
        return RunResult(run_id, run.status, wall_s, tuple(again),
                         "recomputed" if again else "none", span)
    finally:
        store.close()


def run_ids(results: Path) -> list[str]:
    if not (results / "isotax.db").is_file():
        return []
    from isotax.store.sqlite import open_store

    store = open_store(results, create=False)
    try:
        return [r.id for r in store.list_runs()]
    finally:
        store.close()


def one_run(plan: Path, results: Path, log: Path) -> tuple[str | None, float, int]:
    before = set(run_ids(results))
    env = {k: v for k, v in os.environ.items() if k not in ("ISOTAX_STORE", "ISOTAX_RESULTS")}
    env["NO_COLOR"] = "1"
    cmd = [str(PYTHON), "-m", "isotax", "run", str(plan), "--results", str(results)]
    t0 = time.monotonic()
    with log.open("w") as fh:
        child = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
        try:
            rc = child.wait()
        except BaseException:
            stop_child(child)
            raise
    wall = time.monotonic() - t0
    fresh = [r for r in run_ids(results) if r not in before]
    return (fresh[-1] if fresh else None), wall, rc


def _on_term(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20, help="A/A runs (default 20)")
    ap.add_argument("--plan", type=Path,
                    help="a plan TOML with aa = true (default: the built-in one, a seed per run)")
    ap.add_argument("--results", type=Path, default=RESULTS,
                    help=f"results directory (default {RESULTS})")
    ap.add_argument("--read-only", action="store_true",
                    help="count the runs already in --results, run nothing")
    ap.add_argument("--confidence", type=float, default=0.95,
                    help="of the interval (default 0.95)")
    ap.add_argument("--json", type=Path, help="also write the runs and summary as JSON here")
    ap.add_argument("--chased", action="store_true",
                    help=f"native's copy ({COPY}) as an ordinary environment, chased like every "
                         "real ratio, instead of the run's canary; when --results holds no run "
                         "with a canary, one is run first (not counted) for the margins")
    ap.add_argument("--cap", type=int, default=12,
                    help="the built-in plan's max_repetitions: pairs a ratio may reach "
                         "(default 12)")
    ap.add_argument("--first-seed", type=int, default=1,
                    help="the built-in plan's seed of the first run (default 1; give the next "
                         "one to add runs to a results directory)")
    ap.add_argument("--deadline-s", type=float, default=90,
                    help="the built-in plan's deadline for added rounds (default 90)")
    args = ap.parse_args()
    runs: list[RunResult] = []
    interrupted = False
    if args.read_only:
        runs = [read_run(args.results, r, None) for r in run_ids(args.results)]
    else:
        if os.geteuid() != 0:
            print("aa_canary: run as root (isotax run needs it)", file=sys.stderr)
            return 2
        if args.plan is not None and not args.plan.is_file():
            ap.error(f"--plan {args.plan}: no such file")
        signal.signal(signal.SIGTERM, _on_term)
        logs = args.results / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="isotax-aa-canary-") as tmp:
            try:
                if args.chased and args.plan is None and not has_aa_run(args.results):
                    plan = Path(tmp) / "aa-canary-margins.toml"
                    plan.write_text(plan_text(seed=0, cap=args.cap, deadline_s=args.deadline_s))
                    log = logs / f"{time.strftime('%Y%m%d-%H%M%S')}-margins.log"
                    print(f"A run with a canary first, for the margins (log {log}) ...",
                          flush=True)
                    one_run(plan, args.results, log)
                for i in range(1, args.runs + 1):
                    plan = args.plan
                    if plan is None:
                        plan = Path(tmp) / f"aa-canary-{i}.toml"
                        plan.write_text(plan_text(seed=args.first_seed + i - 1,
                                                  chased=args.chased, cap=args.cap,
                                                  deadline_s=args.deadline_s))
                    log = logs / f"{time.strftime('%Y%m%d-%H%M%S')}-{i}.log"
                    print(f"A/A run {i}/{args.runs} (log {log}) ...", flush=True)
                    run_id, wall, rc = one_run(plan, args.results, log)
                    if run_id is None:
                        print(f"aa_canary: run {i} made no run (exit {rc}); see {log}",
                              file=sys.stderr)
                        runs.append(RunResult(None, f"exit {rc}", wall, (), "none"))
                        continue
                    r = read_run(args.results, run_id, wall)
                    runs.append(r)
                    t = tally(r.verdicts)
                    print(f"  {run_id} {r.status} in {wall:.0f} s (run {r.run_s or 0:.0f} s): "
                          f"canary worse {t['worse']}, "
                          f"better {t['better']}, equivalent {t['equivalent']}, undecided "
                          f"{t['undecided']} ({r.source})", flush=True)
            except KeyboardInterrupt:
                interrupted = True
                print("\naa_canary: interrupted; the runs so far:", file=sys.stderr)
    print()
    for line in report_lines(runs, args.confidence):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({
            "plan": (None if args.read_only else str(args.plan) if args.plan
                     else plan_text(seed=0, chased=args.chased, cap=args.cap,
                                    deadline_s=args.deadline_s)
                     .replace("seed = 0", "seed = <run number>")),
            "results": str(args.results), "interrupted": interrupted,
            "runs": [{"run_id": r.run_id, "status": r.status, "wall_s": r.wall_s,
                      "run_s": r.run_s,
                      "verdicts": list(r.verdicts), "source": r.source} for r in runs],
            "summary": summary(runs, args.confidence)}, indent=2) + "\n")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
