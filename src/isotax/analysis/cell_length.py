"""Cell length: how many runs of its workload one measured cell holds.

What the variance components of this host say (docs/statistics.md, "Where the variance comes
from"): one run's value varies by 15-20% from the next, and the pair series of adjacent cells
has no autocorrelation, so a pair's spread falls as 1/sqrt(runs in its cells) and the
precision bought per second of budget is the same at any cell length; each cell also has
costs of its own that buy nothing (the environment's resume and pause, the exec into it,
telemetry, the commit). Kalibera and Jones ("Rigorous benchmarking in reasonable time",
ISMM 2013) choose the repetitions at each level of an experiment from exactly these two
things: the variance at each level and the cost of a repetition at each level. With no
variance of its own at the cell level beyond the runs' (the adjacent pairs' spread equals
one run's), their optimum has as many runs per cell as the cell's fixed costs are worth
amortizing, bounded by what the plan allows; and the verdicts add two more reasons for
fewer, longer cells on short workloads: the plan's cap (max_repetitions counts cells, so a
point of 0.3-second cells would stop at its cap with most of its budget unspent), and the
anytime-valid interval's price for few pairs is paid per pair, not per second.

So a point whose first measured run, in an environment, takes less than the plan's
`[verdicts] cell_s` runs its workload ceil(cell_s / that time) times in each of its cells
there (at most `runs_per_cell`), and the cell's value is the mean of the runs. The count is
fixed for the run when the point's first measured cell in that environment has run, and
stored in run_meta[META_KEY] so that --resume, the report and later runs read it: a pair's
two halves may hold different counts (an emulated VM's run takes ten times a container's),
which leaves each ratio's pairs alike, as the interval needs. Stored spreads and A/A floors
are borrowed only from runs whose cells held the same counts (`same`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from isotax.model import Sample

# run_meta key: {"<environment>|<workload>|<params_key>": runs per cell}.
META_KEY = "cell_runs"
# The label of a sample that is the mean of several runs: how many.
RUNS_LABEL = "runs_in_cell"


def key(environment: str, workload: str, params_key: str) -> str:
    return f"{environment}|{workload}|{params_key}"


def runs_for(first_run_s: float, cell_s: float, most: int) -> int:
    """How many runs a cell holds when one run took first_run_s: enough to fill cell_s, at
    least 1, at most `most`."""
    if cell_s <= 0 or most <= 1 or not math.isfinite(first_run_s):
        return 1
    if first_run_s <= 0:
        return most
    return max(1, min(most, math.ceil(cell_s / first_run_s)))


def of(meta: Mapping[str, Any], environment: str, workload: str, params_key: str) -> int:
    """The runs per cell a run's meta says for a point of one environment (1: not recorded,
    as in runs made before cell length existed)."""
    runs = meta.get(META_KEY)
    if not isinstance(runs, Mapping):
        return 1
    got = runs.get(key(environment, workload, params_key), 1)
    return int(got) if isinstance(got, int | float) and got >= 1 else 1


def same(a: Mapping[str, Any], b: Mapping[str, Any], environments: Sequence[str],
         workload: str, params_key: str) -> bool:
    """Whether two runs' cells of this point held the same number of runs in each of
    `environments` (a ratio's two sides): only then are their spreads the same quantity."""
    return all(of(a, e, workload, params_key) == of(b, e, workload, params_key)
               for e in environments)


def mean_of_runs(runs: Sequence[Sequence[Sample]]) -> list[Sample]:
    """One cell's samples from the samples of its runs: per metric (and its occurrence in
    the run, where a workload reports one metric more than once), the mean of the runs'
    values, labelled with the count (RUNS_LABEL). A metric that not every run reported is
    left out: a mean over some runs is not the cell's value. The labels otherwise are the
    first run's (they describe a run: its tool, path, latency distribution, wall time), in
    its order, with its unit and direction."""
    if len(runs) == 1:
        return list(runs[0])
    values: dict[tuple[str, int], list[float]] = defaultdict(list)
    first: dict[tuple[str, int], Sample] = {}
    for samples in runs:
        seen: dict[str, int] = defaultdict(int)
        for s in samples:
            k = (s.metric, seen[s.metric])
            seen[s.metric] += 1
            values[k].append(float(s.value))
            first.setdefault(k, s)
    out = []
    for k, s in first.items():
        got = values[k]
        if len(got) == len(runs):
            out.append(Sample(s.metric, sum(got) / len(got), s.unit, s.higher_is_better,
                              {**s.labels, RUNS_LABEL: len(runs)}))
    return out


def words(runs: Mapping[str, int]) -> str:
    """What the report says of a run's cell length (its meta's runs per cell, RunMeta.cell_runs):
    "" when every cell held one run, else e.g. "compress ×2, linpack ×5-6 runs per cell (the
    cell's value is their mean)"."""
    by_workload: dict[str, set[int]] = defaultdict(set)
    for k, n in runs.items():
        if n > 1:
            by_workload[str(k).split("|")[1] if "|" in str(k) else str(k)].add(n)
    if not by_workload:
        return ""
    each = ", ".join(f"{w} ×{min(ns)}" + (f"-{max(ns)}" if max(ns) > min(ns) else "")
                     for w, ns in sorted(by_workload.items()))
    return (f"short points held several runs of their workload per cell: {each} "
            "(a cell's value is their mean)")
