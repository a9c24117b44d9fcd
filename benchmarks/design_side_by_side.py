"""Today's design against the new one, side by side: runs the isotax code of an old commit
(default af67514, the design before issue 28) and the working tree's code alternately on this
machine (old, new, old, new, ...), `--times` runs each, every run with its own code's plan
(default: the built-in quick plan, so each keeps its own deadline), and counts what each run
decided, read from its own store with its own code: the headline ratios decided, the decided
container ratios (environments whose kind's plugin declares the isolation "container" in
isotax.protocols), and the A/A canary's verdicts ("<baseline>-aa"; absent in the old design),
of which any "worse" or "better" is false.

Run as root:
    .venv/bin/python benchmarks/design_side_by_side.py [--times 3] [--old af67514] [--plan quick]
        [--budget-s 600] [--old-results DIR] [--new-results DIR] [--json FILE] [--fresh]

The old code runs from a detached git worktree (/var/tmp/isotax-sbs-old-<pid>, removed at the end,
also on Ctrl-C) with this checkout's virtualenv and PYTHONPATH=<worktree>/src. Its results go to
/var/lib/isotax/sbs-old; the new design's to /var/lib/isotax/results, where this host's history
accumulates as a user's would. Each run's output goes to a log file (--logs). The table's "wall"
is the command's, from start to exit (a wait for another isotax run on this host included);
"stored" is the run's own span as its store records it. --budget-s is the
wall time each run is meant to take (the quick plan's 10 minutes): a run over it by more than
10% is marked in the table, and one still running at twice it is stopped (SIGTERM: isotax
keeps what it measured and marks the run interrupted).

--fresh empties each design's results directory before each of its runs (moving it aside to
<dir>.<date-time>, where its runs can still be read), so every run is a first run on this
host (no stored history to borrow from, no stored A/A margins): as on a new machine. It
refuses the default results directory, which holds this host's history; give both
--old-results and --new-results under /var/lib/isotax/sbs-*. Without --fresh the same
directories afterwards give the "with history" side: each run borrows from the runs before it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from child import stop_child

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv" / "bin" / "python"
OLD_RESULTS = Path("/var/lib/isotax/sbs-old")
NEW_RESULTS = Path("/var/lib/isotax/results")
DECIDED = ("worse", "better", "equivalent")
VERDICTS = (*DECIDED, "undecided")
CONTAINER = "container"
# Not /var/tmp/itx-*: isotax takes every such directory for a leftover scratch directory of its
# own and removes it (isotax.run.leaks.leaked_scratch) when it starts a run or `doctor --fix`.
WORKTREE_PREFIX = "/var/tmp/isotax-sbs-old-"
FRESH_PREFIX = "/var/lib/isotax/sbs-"  # --fresh empties only directories named so
OVER_BUDGET = 1.10  # a run this much over --budget-s is marked
STOP_AT = 2.0  # ... and interrupted at this multiple of it

# Run with each design's own code (PYTHONPATH), so that a store is read by the code that wrote
# it: argv = results dir, run id ("" for the run ids only). Prints one JSON object.
READER = r"""
import json, sys, tomllib
from pathlib import Path
from isotax import protocols
from isotax.store.sqlite import open_store
results, run_id = Path(sys.argv[1]), sys.argv[2]
if not (results / "isotax.db").is_file():
    print(json.dumps({"runs": []}))
    sys.exit(0)
store = open_store(results, create=False)
out = {"runs": [r.id for r in store.list_runs()]}
if run_id:
    run = store.get_run(run_id)
    try:
        baseline = tomllib.loads(run.plan_toml).get("baseline", "native")
    except Exception:
        baseline = "native"
    iso = {k: getattr(getattr(c, "isolation", None), "value", None)
           for k, c in protocols.environments().items()}
    out.update(run_id=run.id, status=run.status, plan=run.plan_name, baseline=baseline,
               run_s=(run.finished - run.created) if run.finished else None,
               environments={e.name: e.kind for e in store.environments(run.id)},
               isolation=iso, sequential=store.run_meta(run.id).get("sequential"))
store.close()
print(json.dumps(out, default=str))
"""


# -- the pure parts (tests/unit/test_bench_scripts.py) ------------------------------------------

def container_environments(env_kinds: Mapping[str, str],
                           isolation_by_kind: Mapping[str, str | None]) -> set[str]:
    """The environments (name -> kind) whose kind's plugin declares the isolation
    "container"; a kind the mapping does not know is no container."""
    return {name for name, kind in env_kinds.items()
            if isolation_by_kind.get(kind) == CONTAINER}


def canary_name(baseline: str) -> str:
    """The A/A copy of the baseline, as the plan names it (aa = true)."""
    return f"{baseline}-aa"


@dataclass(frozen=True)
class Counts:
    """One run's headline ratios: all of them but the canary's, the containers' among them,
    and the canary's own, by verdict."""

    decided: int = 0
    total: int = 0
    container_decided: int = 0
    container_total: int = 0
    canary: Mapping[str, int] = field(default_factory=dict)  # verdict -> ratios
    found: bool = False  # whether the run stored its verdicts at all

    @property
    def canary_total(self) -> int:
        return sum(self.canary.values())

    @property
    def canary_false(self) -> int:
        """The canary's worse and better verdicts: false, since both sides are the baseline."""
        return self.canary.get("worse", 0) + self.canary.get("better", 0)


def _ratio_dicts(meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    ratios = meta.get("ratios")
    return [r for r in ratios if isinstance(r, Mapping)] if isinstance(ratios, list) else []


def count_verdicts(meta: Any, containers: Iterable[str], canary: str | None) -> Counts:
    """Counts from run_meta["sequential"] (its "ratios": dicts with environment and verdict).
    The canary's ratios (environment `canary`) are counted apart, not among the decided;
    a verdict other than worse, better or equivalent is undecided."""
    if not isinstance(meta, Mapping):
        return Counts()
    containers = set(containers)
    decided = total = c_decided = c_total = 0
    canary_counts: dict[str, int] = {}
    for r in _ratio_dicts(meta):
        verdict = r.get("verdict")
        verdict = verdict if verdict in VERDICTS else "undecided"
        env = r.get("environment")
        if canary is not None and env == canary:
            canary_counts[verdict] = canary_counts.get(verdict, 0) + 1
            continue
        total += 1
        decided += verdict in DECIDED
        if env in containers:
            c_total += 1
            c_decided += verdict in DECIDED
    return Counts(decided, total, c_decided, c_total, canary_counts, True)


@dataclass(frozen=True)
class RunRow:
    number: int
    design: str  # "old" | "new"
    run_id: str | None
    wall_s: float
    rc: int
    status: str
    counts: Counts
    note: str = ""
    run_s: float | None = None  # the stored run's own span, without a wait for another run


def fraction(a: int, b: int) -> str:
    return f"{a}/{b}"


def clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 60}:{s % 60:02d}"


def table(rows: Sequence[RunRow], budget_s: float | None) -> str:
    head = ("run", "design", "run id", "wall", "stored", "decided", "container", "canary w+b",
            "status")
    lines = [head]
    for r in rows:
        c = r.counts
        wall = clock(r.wall_s)
        if budget_s and r.wall_s > OVER_BUDGET * budget_s:
            wall += "!"
        canary = fraction(c.canary_false, c.canary_total) if c.canary_total else "-"
        status = r.status + (f" rc={r.rc}" if r.rc else "") + (f" ({r.note})" if r.note else "")
        lines.append((str(r.number), r.design, r.run_id or "?", wall,
                      "-" if r.run_s is None else clock(r.run_s),
                      fraction(c.decided, c.total) if c.found else "n/a",
                      fraction(c.container_decided, c.container_total) if c.found else "n/a",
                      canary, status))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = ["  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
           for line in lines]
    return "\n".join(out)


def summary(rows: Sequence[RunRow]) -> dict[str, Any]:
    """Per design: the mean decided container ratios (of the runs that stored verdicts), their
    total, the canary's worse+better over its verdicts; and the new/old ratio of the means."""
    out: dict[str, Any] = {}
    for design in ("old", "new"):
        mine = [r for r in rows if r.design == design and r.counts.found]
        decided = [r.counts.container_decided for r in mine]
        out[design] = {
            "runs": len(mine),
            "container_decided": decided,
            "container_total": [r.counts.container_total for r in mine],
            "mean_container_decided": sum(decided) / len(decided) if decided else None,
            "mean_decided": (sum(r.counts.decided for r in mine) / len(mine)) if mine else None,
            "canary_false": sum(r.counts.canary_false for r in mine),
            "canary_total": sum(r.counts.canary_total for r in mine),
        }
    old, new = out["old"]["mean_container_decided"], out["new"]["mean_container_decided"]
    out["new_over_old"] = (new / old if old else (None if not new else float("inf"))) \
        if old is not None and new is not None else None
    return out


def summary_lines(s: Mapping[str, Any], labels: Mapping[str, str]) -> list[str]:
    out = []
    for design in ("old", "new"):
        d = s[design]
        if not d["runs"]:
            out.append(f"{design} ({labels[design]}): no run stored its verdicts")
            continue
        each = ", ".join(f"{a}/{b}" for a, b in zip(d["container_decided"],
                                                    d["container_total"], strict=True))
        canary = (f"; canary worse+better {d['canary_false']} of {d['canary_total']}"
                  if d["canary_total"] else "; no canary")
        out.append(f"{design} ({labels[design]}): mean decided container ratios "
                   f"{d['mean_container_decided']:.2f} ({each}); mean decided in all "
                   f"{d['mean_decided']:.2f}{canary}")
    ratio = s["new_over_old"]
    out.append("new/old decided container ratios: " +
               ("n/a" if ratio is None else "inf (old decided none)" if ratio == float("inf")
                else f"{ratio:.2f}") + " (issue 28 asks at least 2, and no canary worse/better)")
    return out


def run_id_from_output(text: str) -> str | None:
    """`isotax run` prints "run <id> plan <name> results <dir>" when it starts."""
    found = re.findall(r"^run (\S+) plan \S+", text, flags=re.MULTILINE)
    return found[-1] if found else None


# -- the runs --------------------------------------------------------------------------------

def _on_term(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def design_env(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ISOTAX_STORE", "ISOTAX_RESULTS")}
    env["PYTHONPATH"] = str(src)
    env["COLUMNS"] = "160"
    env.pop("FORCE_COLOR", None)
    env["NO_COLOR"] = "1"
    return env


def read_store(src: Path, results: Path, run_id: str = "") -> dict[str, Any]:
    p = subprocess.run([str(PYTHON), "-c", READER, str(results), run_id], env=design_env(src),
                       capture_output=True, text=True, check=False)
    if p.returncode:
        raise RuntimeError(f"reading {results} with {src} failed: {p.stderr.strip()[-500:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def check_code(src: Path) -> None:
    """The design's isotax is imported from src, and `python -m isotax` runs."""
    p = subprocess.run([str(PYTHON), "-c", "import isotax; print(isotax.__file__)"],
                       env=design_env(src), capture_output=True, text=True, check=False)
    where = p.stdout.strip()
    if p.returncode or not Path(where).resolve().is_relative_to(src.resolve()):
        raise SystemExit(f"design_side_by_side: isotax from {src} imports {where or p.stderr}")
    p = subprocess.run([str(PYTHON), "-m", "isotax", "--help"], env=design_env(src),
                       capture_output=True, text=True, check=False)
    if p.returncode:
        raise SystemExit(f"design_side_by_side: `python -m isotax --help` with {src} exited "
                         f"{p.returncode}: {p.stderr.strip()[-300:]}")


def wait_child(child: subprocess.Popen[bytes], stop_after_s: float | None) -> tuple[int, str]:
    """Wait for an `isotax run`; past stop_after_s, SIGTERM ends it through its teardown (as
    Ctrl-C does: it keeps what it measured and marks the run interrupted). On Ctrl-C or
    SIGTERM here, the child gets SIGTERM too unless it ends by itself within 10 s (a Ctrl-C
    at the terminal reaches it directly), and this waits for its teardown."""
    t0, note = time.monotonic(), ""
    try:
        while True:
            try:
                return child.wait(timeout=2), note
            except subprocess.TimeoutExpired:
                if stop_after_s and not note and time.monotonic() - t0 > stop_after_s:
                    child.send_signal(signal.SIGTERM)
                    note = f"stopped at {clock(stop_after_s)}"
    except BaseException:
        stop_child(child)
        raise


def run_isotax(src: Path, plan: str, results: Path, log: Path,
               stop_after_s: float | None) -> tuple[int, float, str]:
    """`python -m isotax run PLAN --results DIR` with the design's code, its output into log:
    (exit status, wall seconds, note)."""
    cmd = [str(PYTHON), "-m", "isotax", "run", plan, "--results", str(results)]
    with log.open("w") as fh:
        fh.write(f"$ PYTHONPATH={src} {' '.join(cmd)}\n")
        fh.flush()
        t0 = time.monotonic()
        child = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=design_env(src),
                                 cwd=str(src.parent))
        rc, note = wait_child(child, stop_after_s)
        return rc, time.monotonic() - t0, note


def add_worktree(commit: str, path: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(path), commit],
                   check=True, capture_output=True, text=True)


def remove_worktree(path: Path) -> None:
    subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
                   check=False, capture_output=True)
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "-C", str(REPO), "worktree", "prune"], check=False,
                   capture_output=True)


def new_label() -> str:
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "src"],
                           capture_output=True, text=True, check=False).stdout.strip()
    return f"working tree {head or '?'}{' + changes' if dirty else ''}"


def empty_results(results: Path) -> None:
    """A fresh store: the results directory moved aside (to <dir>.<date-time>, kept for
    reading the earlier runs again) and made anew, empty."""
    if not str(results.resolve()).startswith(FRESH_PREFIX):
        raise SystemExit(f"design_side_by_side: --fresh empties only {FRESH_PREFIX}*, "
                         f"not {results}")
    if results.exists() and any(results.iterdir()):
        results.rename(results.with_name(f"{results.name}.{time.strftime('%Y%m%d-%H%M%S')}"))
    shutil.rmtree(results, ignore_errors=True)
    results.mkdir(parents=True, exist_ok=True)


def one_run(number: int, design: str, src: Path, plan: str, results: Path, logs: Path,
            budget_s: float | None, rows: list[RunRow], fresh: bool = False) -> None:
    """One run of a design, its row appended to rows (also when Ctrl-C ends it); fresh: on an
    emptied store."""
    if fresh:
        empty_results(results)
    before = set(read_store(src, results)["runs"])
    log = logs / f"run{number}-{design}.log"
    print(f"run {number}: {design} design, `isotax run {plan}` (log {log}) ...", flush=True)
    t0 = time.monotonic()
    try:
        rc, wall, note = run_isotax(src, plan, results, log,
                                    budget_s * STOP_AT if budget_s else None)
    except KeyboardInterrupt:
        rows.append(read_row(number, design, src, results, log, before,
                             time.monotonic() - t0, -2, "interrupted here"))
        raise
    rows.append(read_row(number, design, src, results, log, before, wall, rc, note))
    c = rows[-1].counts
    print(f"run {number}: {design} {rows[-1].run_id} {rows[-1].status} in {clock(wall)}: "
          f"{c.decided}/{c.total} decided, containers {c.container_decided}/"
          f"{c.container_total}, canary worse+better {c.canary_false}/{c.canary_total}",
          flush=True)


def read_row(number: int, design: str, src: Path, results: Path, log: Path, before: set[str],
             wall: float, rc: int, note: str) -> RunRow:
    """The run a command made (the newest run not in `before`), counted."""
    after = read_store(src, results)["runs"]
    fresh = [r for r in after if r not in before]
    run_id = fresh[-1] if fresh else run_id_from_output(log.read_text(errors="replace"))
    if run_id is None or run_id not in after:
        return RunRow(number, design, None, wall, rc, "no run", Counts(), note)
    info = read_store(src, results, run_id)
    env_kinds = info.get("environments") or {}
    counts = count_verdicts(info.get("sequential"),
                            container_environments(env_kinds, info.get("isolation") or {}),
                            canary_name(info.get("baseline") or "native"))
    run_s = info.get("run_s")
    return RunRow(number, design, run_id, wall, rc, str(info.get("status")), counts, note,
                  float(run_s) if isinstance(run_s, int | float) else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--times", type=int, default=3, help="runs of each design (default 3)")
    ap.add_argument("--old", default="af67514", help="the old design's commit (default af67514)")
    ap.add_argument("--new", default=None,
                    help="the new design's commit, run from its own worktree as the old one is "
                         "(default: this working tree; a commit keeps edits made here during "
                         "the hour-long comparison out of it)")
    ap.add_argument("--plan", default="quick",
                    help="a built-in plan name, run with each design's own (default quick), or "
                         "a TOML file that both codes accept")
    ap.add_argument("--budget-s", type=float, default=600,
                    help="the wall time each run is meant to take (default 600; 0: no limit)")
    ap.add_argument("--old-results", type=Path, default=OLD_RESULTS,
                    help=f"the old design's results directory (default {OLD_RESULTS})")
    ap.add_argument("--new-results", type=Path, default=NEW_RESULTS,
                    help=f"the new design's results directory (default {NEW_RESULTS})")
    ap.add_argument("--logs", type=Path,
                    help="directory for each run's output (default /var/lib/isotax/sbs-logs/"
                         "<date-time>)")
    ap.add_argument("--json", type=Path, help="also write the rows and summary as JSON here")
    ap.add_argument("--fresh", action="store_true",
                    help=f"empty each design's results directory before each of its runs "
                         f"(both must be {FRESH_PREFIX}*): every run a first run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("design_side_by_side: run as root (isotax run needs it)", file=sys.stderr)
        return 2
    if args.times < 1:
        ap.error("--times must be at least 1")
    plan = args.plan
    if Path(plan).suffix == ".toml" or Path(plan).is_file():
        if not Path(plan).is_file():
            ap.error(f"--plan {plan}: no such file")
        plan = str(Path(plan).resolve())
    logs = args.logs or Path("/var/lib/isotax/sbs-logs") / time.strftime("%Y%m%d-%H%M%S")
    logs.mkdir(parents=True, exist_ok=True)
    budget = args.budget_s or None

    signal.signal(signal.SIGTERM, _on_term)
    worktree = Path(f"{WORKTREE_PREFIX}{os.getpid()}")
    new_tree = Path(f"{WORKTREE_PREFIX}{os.getpid()}-new")
    rows: list[RunRow] = []
    labels = {"old": args.old, "new": args.new or new_label()}
    interrupted = False
    try:
        add_worktree(args.old, worktree)
        if args.new:
            add_worktree(args.new, new_tree)
        srcs = {"old": worktree / "src", "new": (new_tree if args.new else REPO) / "src"}
        results = {"old": args.old_results, "new": args.new_results}
        for design in ("old", "new"):
            check_code(srcs[design])
            if args.fresh and not str(results[design].resolve()).startswith(FRESH_PREFIX):
                ap.error(f"--fresh: the {design} design's results must be under "
                         f"{FRESH_PREFIX}* (it empties them), not {results[design]}")
        print(f"old: {args.old} from {worktree}, results {results['old']}\n"
              f"new: {labels['new']}, results {results['new']}\n"
              f"plan {plan}, {args.times} runs each, alternating; logs in {logs}", flush=True)
        number = 0
        for _ in range(args.times):
            for design in ("old", "new"):
                number += 1
                one_run(number, design, srcs[design], plan, results[design], logs, budget,
                        rows, args.fresh)
    except KeyboardInterrupt:
        interrupted = True
        print("\ndesign_side_by_side: interrupted; the runs so far:", file=sys.stderr)
    finally:
        remove_worktree(worktree)
        if args.new:
            remove_worktree(new_tree)

    s = summary(rows)
    print()
    print(table(rows, budget))
    print()
    for line in summary_lines(s, labels):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({
            "old": args.old, "new": labels["new"], "plan": plan, "times": args.times,
            "fresh": args.fresh,
            "budget_s": budget, "interrupted": interrupted,
            "runs": [{**asdict(r), "counts": {**asdict(r.counts),
                                              "canary_false": r.counts.canary_false,
                                              "canary_total": r.counts.canary_total}}
                     for r in rows],
            "summary": s}, indent=2, default=str) + "\n")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
