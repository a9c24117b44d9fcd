"""variance_components' "interleave" phase: finer interleaving within a cell, and a host-load
probe as a covariate (issue 28, items 2 and 3).

A unit is one pair of cells of K runs each (the runner's cell length: K runs per cell, their
mean the cell's value). Units alternate, in balanced random blocks, between two designs of the
same cost in runs:
  blocked     the runner's way: K runs in one environment, then K in the other (which
              environment goes first drawn per unit);
  alternated  one run each, K times over (native, env, native, env, ...): the finest
              interleaving, at the price of a pause and a resume around every run.
Per design: the spread of the unit's log(mean env / mean native) (sd of the mean logs), and
that spread times sqrt(seconds a unit takes), the spread of one second of budget: the design
with the lower one decides more per minute.

Before every run a probe times a fixed loop of arithmetic in this process, on the host, outside
every environment (so no environment can move it): the host's load at that moment. The unit's
covariate is mean log probe before the env's runs minus mean log probe before native's. CUPED
(Deng, Xu, Kohavi and Walker, WSDM 2013) regresses the pair on such a covariate and keeps the
residual: it narrows the interval by 1 - r^2 of the variance, r the correlation of pair and
covariate. The row gives r with its Fisher interval: near 0, a probe buys nothing.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from variance_parts import (
    Bench,
    Component,
    Run,
    balanced_blocks,
    fisher_interval,
    per_second_row,
    sd_row,
)

PHASE = "interleave"
DESIGNS = ("blocked", "alternated")
PROBE_LOOP = 200_000  # iterations: a few milliseconds of one core


def probe_s(loop: int = PROBE_LOOP) -> float:
    """Seconds a fixed loop of integer arithmetic takes in this process now."""
    t0 = time.perf_counter()
    x = 0
    for i in range(loop):
        x += i * i
    return time.perf_counter() - t0


def sequence(design: str, first: str, second: str, k: int) -> list[str]:
    """The order of a unit's 2k runs."""
    if design == "blocked":
        return [first] * k + [second] * k
    return [first, second] * k


def run_interleave(b: Bench, rng: random.Random, envs: tuple[str, str], k: int,
                   go: Callable[[], bool]) -> None:
    point = b.params()
    designs = balanced_blocks(list(DESIGNS), 10_000, rng)
    unit = 0
    while go():
        design = designs[unit]
        first, second = envs if rng.random() < 0.5 else envs[::-1]
        for i, name in enumerate(sequence(design, first, second, k)):
            probe = probe_s()
            b.measure(PHASE, name, point, unit=unit, design=design, index=i, probe=probe)
        unit += 1


def units(runs: Sequence[Run], native: str, other: str, design: str
          ) -> list[tuple[float, float, float]]:
    """Per complete unit of a design: (pair log ratio of the means, covariate, seconds)."""
    by: dict[int, list[Run]] = {}
    for r in runs:
        if r.phase == PHASE and r.tags.get("design") == design:
            by.setdefault(r.tags["unit"], []).append(r)
    out = []
    for rs in by.values():
        nat = [r for r in rs if r.env == native]
        env = [r for r in rs if r.env == other]
        if not nat or len(nat) != len(env) or len(rs) != 2 * len(nat):
            continue  # a failed run: the unit is incomplete
        d = math.log(statistics.fmean(r.value for r in env)
                     / statistics.fmean(r.value for r in nat))
        x = (statistics.fmean(math.log(r.tags["probe"]) for r in env)
             - statistics.fmean(math.log(r.tags["probe"]) for r in nat))
        secs = max(r.t_end for r in rs) - min(r.t_start for r in rs)
        out.append((d, x, secs))
    return out


def correlation(xs: Sequence[float], ys: Sequence[float]) -> float:
    if len(xs) < 3:
        return math.nan
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((a - mx) * (c - my) for a, c in zip(xs, ys, strict=True))
    sxx = sum((a - mx) ** 2 for a in xs)
    syy = sum((c - my) ** 2 for c in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else math.nan


def analyse_interleave(runs: Sequence[Run], native: str, other: str, k: int
                       ) -> list[Component]:
    g = f"within a cell of {k} runs"
    rows: list[Component] = []
    residuals: list[tuple[float, float]] = []
    for design in DESIGNS:
        u = units(runs, native, other, design)
        d = [x[0] for x in u]
        secs = statistics.fmean(x[2] for x in u) if u else math.nan
        row = sd_row(g, f"{design}: pair sd", d, f"{secs:.1f} s a unit of {2 * k} runs")
        rows.append(row)
        rows.append(per_second_row(g, f"{design}: pair sd x sqrt(s a unit)", row, secs))
        if len(d) >= 2:  # each design's own mean out, so both designs' units pool
            md, mx = statistics.fmean(d), statistics.fmean(x[1] for x in u)
            residuals += [(x[0] - md, x[1] - mx) for x in u]
    rows += kalibera_jones(runs, native, other, k)
    r = correlation([c for _, c in residuals], [p for p, _ in residuals])
    lo, hi = fisher_interval(r, len(residuals)) if r == r else (math.nan, math.nan)
    rows.append(Component("covariate (CUPED)", "host-load probe vs pair: correlation", "r",
                          len(residuals), r, lo, hi,
                          f"variance a regression on it removes: r^2 = {r * r:.1%}"
                          if r == r else "too few units"))
    return rows


def kalibera_jones(runs: Sequence[Run], native: str, other: str, k: int) -> list[Component]:
    """Kalibera and Jones's choice of runs per cell from the blocked units: per environment
    the variance of log values within a cell (its k runs back to back, pooled), the variance
    between cells beyond it (of the cells' mean logs, minus the within part / k), the cost of
    a run (its seconds) and of a cell besides its runs (its first run's time before the
    workload starts); the optimal runs per cell is sqrt(cell cost x within / (run cost x between))
    (ISMM 2013, section 4): near 1 when the variance sits between cells."""
    out = []
    for env in (native, other):
        cells: dict[int, list[Run]] = {}
        for r in runs:
            if r.phase == PHASE and r.tags.get("design") == "blocked" and r.env == env:
                cells.setdefault(r.tags["unit"], []).append(r)
        full = [c for c in cells.values() if len(c) == k]
        if len(full) < 3 or k < 2:
            continue
        logs = [[math.log(r.value) for r in c] for c in full]
        within = statistics.fmean(statistics.variance(x) for x in logs)
        between = max(0.0, statistics.variance([statistics.fmean(x) for x in logs]) - within / k)
        run_s = statistics.median(r.t_end - r.t_run for c in full for r in c)
        # What the cell pays once: its first run's time before the workload (the switch: the
        # other environment paused, this one resumed; telemetry started).
        cell_s = statistics.median(min(c, key=lambda r: r.tags["index"]).t_run
                                   - min(c, key=lambda r: r.tags["index"]).t_start
                                   for c in full)
        best = (math.sqrt(cell_s * within / (run_s * between)) if between > 0 and run_s > 0
                else math.inf)
        g = f"cell length (Kalibera-Jones), {env}"
        out.append(Component(g, "within a cell: sd of log values", "sd", len(full),
                             math.sqrt(within), note=f"{k} runs back to back, pooled"))
        out.append(Component(g, "between cells, beyond the runs': sd", "sd", len(full),
                             math.sqrt(between), note="of the cells' mean logs"))
        out.append(Component(g, "optimal runs per cell", "number", len(full), best,
                             note=f"a run {run_s:.2f} s, a cell's own cost {cell_s:.2f} s"))
    return out


def describe(k: int) -> dict[str, Any]:
    return {"runs_per_cell": k, "designs": list(DESIGNS), "probe_loop": PROBE_LOOP}
