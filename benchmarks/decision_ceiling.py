"""What a plan can decide on this host, and what a longer budget would buy: the runner's own
stopping rule (isotax.analysis.sequential: assess and next_round, with the plan's fixed rounds,
cap, A/A canary and borrowing) driven on simulated pairs at each ratio's spread, true ratio,
margin and cell times as this host's stored block-paired runs of the plan measured them.

Per budget, --sims simulated runs. Every environment x point gets the plan's fixed rounds, then
rounds as next_round chooses them while the budget (seconds of cells) lasts. A ratio's pairs
are Gaussian at its stored spread (each stored run's pairs about their own mean) around its
stored mean (all the runs' pairs); what it borrows is 12 degrees of freedom at the same sigma,
as a stored run lends them; its margin is the one the newest stored run judged it with; a
cell takes its point's mean stored time. Counts the decided ratios of container environments
(their kind's plugin declares the isolation "container"), all decided ratios, and the
canary's worse/better.

A model, not a measurement (Gaussian pairs, no failures, no setup time): it says before an
hour of side-by-side runs (design_side_by_side.py) whether a change to the design or the
plan can reach a target at all on this host, and how long a budget a target would take.
On 2026-11-27 it gave the quick plan of 2 fixed rounds at 540 s 19.6 decided container ratios,
where the side-by-side measured 18.0 and 17.7 (docs/statistics.md). Usage, as root:

    .venv/bin/python benchmarks/decision_ceiling.py [--plan quick] [--runs 8]
        [--budgets 575,1200,3600] [--sims 20] [--results DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from isotax import protocols
from isotax.analysis import borrowing, sequential
from isotax.analysis.headline import Point, headline_values
from isotax.analysis.margins import Margin
from isotax.analysis.verdicts import Borrowed, Verdict, pair_by_round
from isotax.model import CellKey, CellStatus, Sample
from isotax.plan import Plan, load_plan
from isotax.store.base import CellRecord, Store

CONTAINER = "container"
LENT_DOF = 12  # what a stored run lends a ratio at most (borrowing.MAX_DOF)


@dataclass(frozen=True)
class Ratio:
    """One environment x point as the stored runs measured it."""

    environment: str
    workload: str
    params_key: str
    sd: float  # of its pair log ratios, about each run's own mean
    mean: float  # of all its pair log ratios
    margin: float
    pairs: int  # stored pairs behind sd and mean


@dataclass(frozen=True)
class HostData:
    """What the stored runs say: the ratios, cell seconds per point, params, metrics."""

    runs: list[str]
    ratios: list[Ratio]
    cell_s: dict[Point, float]
    params: dict[tuple[str, str], dict[str, Any]]
    metric: dict[tuple[str, str], str]
    higher: dict[tuple[str, str], bool]
    kinds: dict[str, str]


def block_runs(store: Store, plan_name: str, newest: int) -> list[str]:
    """The newest complete runs of the plan whose rounds ran in blocks, newest first."""
    runs = [r for r in store.list_runs() if r.plan_name == plan_name and r.status == "complete"
            and store.run_meta(r.id).get(borrowing.PAIRING) == borrowing.BLOCKS]
    runs.sort(key=lambda r: r.created, reverse=True)
    return [r.id for r in runs[:newest]]


def spread_and_mean(segments: Sequence[Sequence[float]]) -> tuple[float, float, int]:
    """(sd about each segment's own mean, mean of all, pairs) of a ratio's runs' pairs; sd is
    NaN without a segment of two pairs."""
    d = [x for seg in segments for x in seg]
    dof = sum(len(seg) - 1 for seg in segments if len(seg) >= 2)
    ss = sum((x - statistics.mean(seg)) ** 2 for seg in segments if len(seg) >= 2 for x in seg)
    return (math.sqrt(ss / dof) if dof else math.nan), statistics.mean(d), len(d)


def read_host(store: Store, runs: Sequence[str], baseline: str) -> HostData:
    segments: dict[Point, list[list[float]]] = defaultdict(list)
    took: dict[Point, list[float]] = defaultdict(list)
    params: dict[tuple[str, str], dict[str, Any]] = {}
    metric: dict[tuple[str, str], str] = {}
    higher: dict[tuple[str, str], bool] = {}
    kinds: dict[str, str] = {}
    for run_id in runs:
        cells = store.cells(run_id)
        for c in cells:
            if not c.key.warmup and c.status is CellStatus.OK:
                took[(c.key.environment, c.key.workload, c.key.params_key)].append(
                    c.ended - c.started)
                params[(c.key.workload, c.key.params_key)] = dict(c.key.params)
        values, m, h = headline_values(cells)
        metric.update(m)
        higher.update(h)
        kinds.update({e.name: e.kind for e in store.environments(run_id)})
        for (env, wl, pkey), by_rep in values.items():
            base = values.get((baseline, wl, pkey))
            if env != baseline and base:
                d = pair_by_round(by_rep, base)
                if d:
                    segments[(env, wl, pkey)].append(d)
    margins = {(r["environment"], r["workload"], r["params"]): float(r["margin"])
               for r in store.run_meta(runs[0]).get("sequential", {}).get("ratios", [])}
    ratios = []
    for point, segs in sorted(segments.items()):
        sd, mean, n = spread_and_mean(segs)
        if point in margins and not math.isnan(sd):
            env, wl, pkey = point
            ratios.append(Ratio(env, wl, pkey, sd, mean, margins[point], n))
    cell_s = {p: statistics.mean(t) for p, t in took.items()}
    return HostData(list(runs), ratios, cell_s, params, metric, higher, kinds)


@dataclass
class Outcome:
    container_decided: int
    decided: int
    canary_false: int
    cell_s: float


def simulate(rng: np.random.Generator, data: HostData, plan: Plan, budget_s: float,
             containers: set[str]) -> Outcome:
    """One run of the plan's stopping rule on simulated pairs (module docstring)."""
    base, canary = plan.baseline, (plan.aa_name if plan.aa else None)
    fixed = plan.repetitions
    cap = max(fixed, plan.verdicts.max_repetitions or 0)
    ids = itertools.count(1)
    by_point = {(r.environment, r.workload, r.params_key): r for r in data.ratios}
    # A stored run lends its spread and its mean (which chooses the mixture's width): the
    # stored pairs' mean, off the truth by its standard error.
    lent = {p: Borrowed(LENT_DOF, r.sd**2 * float(rng.chisquare(LENT_DOF)), "simulated",
                        float(rng.normal(r.mean, r.sd / math.sqrt(max(r.pairs, 1)))))
            for p, r in by_point.items()}
    margin = {p: Margin(r.margin, "stored") for p, r in by_point.items()}
    cells: list[CellRecord] = []
    spent = 0.0

    def cell(point: Point, rep: int) -> None:
        nonlocal spent
        env, wl, pkey = point
        r = by_point.get(point)
        value = 100.0 if r is None else 100.0 * math.exp(rng.normal(r.mean, r.sd))
        secs = data.cell_s.get(point, 1.0)
        spent += secs
        sample = Sample(data.metric[(wl, pkey)], value, "u", data.higher[(wl, pkey)])
        cells.append(CellRecord(next(ids), CellKey(env, wl, data.params[(wl, pkey)], rep), "1",
                                CellStatus.OK, "", 0.0, secs, (sample,)))

    points = sorted({(base, r.workload, r.params_key) for r in data.ratios} | set(by_point))
    for rep in range(1, fixed + 1):
        for point in points:
            cell(point, rep)

    def margins(row: tuple[str, str, str], environment: str = "") -> Margin:
        return margin.get((environment, row[0], row[1]), Margin(0.1, "default"))

    while True:
        p = sequential.assess(cells, base, margins, fixed, cap, borrowed=lent)
        decision = sequential.next_round(p, base, cap, budget_s - spent, canary)
        if decision.ended is not None or not decision.points:
            break
        for point in decision.points:
            cell(point, p.next_repetition)
    decided = [r for r in p.ratios if r.verdict.verdict.decided]
    return Outcome(
        sum(r.environment in containers for r in decided), len(decided),
        sum(r.environment == canary and r.verdict.verdict in (Verdict.WORSE, Verdict.BETTER)
            for r in p.ratios), spent)


def summary(outcomes: Sequence[Outcome]) -> dict[str, float]:
    c = [o.container_decided for o in outcomes]
    return {"container_decided_mean": statistics.mean(c), "container_decided_min": min(c),
            "container_decided_max": max(c),
            "decided_mean": statistics.mean(o.decided for o in outcomes),
            "canary_false_mean": statistics.mean(o.canary_false for o in outcomes),
            "cell_s_mean": statistics.mean(o.cell_s for o in outcomes)}


def container_names(kinds: Mapping[str, str]) -> set[str]:
    return {name for name, kind in kinds.items()
            if getattr(protocols.isolation_of(kind), "value", None) == CONTAINER}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--plan", default="quick", help="built-in plan name or plan file whose "
                    "rule is simulated; the stored runs are those of the same plan name")
    ap.add_argument("--data-plan", default=None,
                    help="take the stored runs of this plan name instead")
    ap.add_argument("--runs", type=int, default=8, help="newest stored block runs to read")
    ap.add_argument("--budgets", default="575,1200,3600",
                    help="seconds of cells per simulated run, comma-separated")
    ap.add_argument("--sims", type=int, default=20, help="simulated runs per budget")
    ap.add_argument("--results", default="/var/lib/isotax/results", help="results directory")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the result here too")
    args = ap.parse_args(argv)
    from isotax.store.sqlite import open_store

    plan, _ = load_plan(args.plan)
    store = open_store(Path(args.results), create=False)
    try:
        runs = block_runs(store, args.data_plan or plan.name, args.runs)
        if not runs:
            print(f"decision_ceiling: no complete block-paired run of plan "
                  f"{args.data_plan or plan.name!r} in {args.results}: run it first",
                  file=sys.stderr)
            return 2
        data = read_host(store, runs, plan.baseline)
    finally:
        store.close()
    containers = container_names(data.kinds)
    n_container = sum(r.environment in containers for r in data.ratios)
    print(f"plan {plan.name}: {plan.repetitions} fixed round(s), cap "
          f"{plan.verdicts.max_repetitions}; data: {len(runs)} stored runs, newest {runs[0]}; "
          f"{len(data.ratios)} ratios, {n_container} of container environments")
    rng = np.random.default_rng(args.seed)
    out: dict[str, Any] = {"plan": plan.name, "runs": runs,
                           "ratios": [asdict(r) for r in data.ratios], "budgets": {}}
    for budget in (float(b) for b in args.budgets.split(",")):
        outcomes = [simulate(rng, data, plan, budget, containers) for _ in range(args.sims)]
        s = summary(outcomes)
        out["budgets"][str(budget)] = s
        print(f"budget {budget:7.0f} s of cells: decided container ratios "
              f"{s['container_decided_mean']:.1f} of {n_container} "
              f"[{s['container_decided_min']}-{s['container_decided_max']}], all "
              f"{s['decided_mean']:.1f} of {len(data.ratios)}, canary worse/better "
              f"{s['canary_false_mean']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
