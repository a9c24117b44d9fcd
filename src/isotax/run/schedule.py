"""A run's identity and its cells' order: a pure function of the plan and its seed.

A measured round runs every workload point as one *block* (analysis.sequential.blocked_order):
all environments' cells of that point back to back, in a seeded random order within the
block, the blocks themselves in a seeded random order. The two halves of a pair (an
environment's cell and the baseline's of the same round) are then seconds apart instead of
minutes, so the host's slow load regimes (other tenants; docs/statistics.md, "Where the
variance comes from") fall on both halves and cancel in their ratio; the random order within
the block keeps any "who goes first" effect out of the mean.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Collection, Sequence

from isotax.analysis.sequential import blocked_order
from isotax.model import CellKey
from isotax.plan import Plan


def new_run_id(plan_name: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{plan_name}-{secrets.token_hex(2)}"


def schedule(plan: Plan, environments: Sequence[str],
             no_warmup: Collection[tuple[str, str]] = ()) -> list[CellKey]:
    """Every cell of the run in execution order; a pure function of the plan and its seed.
    `no_warmup`: (environment, workload)s not warmed up (analysis.warmups.unneeded)."""
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
    warm = [(e, w, p) for e, w, p in warm if (e, w) not in no_warmup]
    out: list[CellKey] = []
    for i in range(plan.warmups):
        order = list(warm)
        random.Random(f"{plan.seed}:warmup:{i}").shuffle(order)
        out += [CellKey(e, w, p, i + 1, warmup=True) for e, w, p in order]
    for rep in range(plan.repetitions):
        keys = [CellKey(e, w, p, rep + 1) for e, w, p in points]
        out += blocked_order(keys, lambda k: f"{k.workload}|{k.params_key}",
                             f"{plan.seed}:round:{rep}")
    return out
