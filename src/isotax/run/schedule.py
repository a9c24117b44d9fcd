"""A run's identity and its cells' order: a pure function of the plan and its seed."""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Sequence

from isotax.model import CellKey
from isotax.plan import Plan


def new_run_id(plan_name: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{plan_name}-{secrets.token_hex(2)}"


def schedule(plan: Plan, environments: Sequence[str]) -> list[CellKey]:
    """Every cell of the run in execution order; a pure function of the plan and its seed."""
    points = [
        (env, w.name, params)
        for env in environments
        for w in plan.workloads
        for params in w.combinations()
    ]
    # Warm-ups: per environment, the first point of each workload (a workload listed twice,
    # e.g. fio random and sequential, is warmed once: same tool, same files), or every point
    # (warmup_points = "point"); a warm-up warms the instance for all of its workload's points.
    first = {w.name: w.combinations()[0] for w in reversed(plan.workloads)}
    warm = points if plan.warmup_points == "point" else [
        (env, name, params) for env in environments for name, params in
        sorted(first.items(), key=lambda kv: [w.name for w in plan.workloads].index(kv[0]))]
    out: list[CellKey] = []
    for i in range(plan.warmups):
        order = list(warm)
        random.Random(f"{plan.seed}:warmup:{i}").shuffle(order)
        out += [CellKey(e, w, p, i + 1, warmup=True) for e, w, p in order]
    for rep in range(plan.repetitions):
        order = list(points)
        random.Random(f"{plan.seed}:round:{rep}").shuffle(order)
        out += [CellKey(e, w, p, rep + 1) for e, w, p in order]
    return out
