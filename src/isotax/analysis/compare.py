"""Two runs side by side: two hosts, two kernels, before and after a tuning. For every
environment x workload point x metric both runs measured, the ratio of run B's values to run
A's (of their geometric means), with a 95% interval and a verdict from the verdicts' own
machinery: a confidence sequence on each run's mean log value at 2.5% (isotax.analysis.
between_runs.judge; location-equivariant, so it needs no pairs), whose difference bounds
log(B / A) at 95% together. Like every confidence sequence it holds however many repetitions
each run chose to stop at (the runs' added rounds looked at their data), where a bootstrap
interval on the two sets of values would not, and it is judged against an equivalence margin
as a run's ratios are: worse or better beyond it, equivalent within it, else undecided. The
bootstrap ratio of means (`ratio`) stays for the figures and the means; its interval decides
nothing.

Runs whose host fingerprints differ (CPU model, SMT, governor, THP, kernel, ...) are not
compared unless forced: a difference would be the host's, not the change under study. Forced,
the comparison lists every difference first.

A run is never compared with itself (the same id on both sides: twice from the store, or the
run and its own bundle), forced or not: every B / A would be 1 by construction, which reads as
"nothing changed" when nothing was compared. It is a slip (the same id pasted twice), so it is
refused in one line naming the fix rather than written out as a comparison.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from isotax.analysis.between_runs import judge
from isotax.analysis.stats import Ratio, ratio
from isotax.analysis.verdicts import MIN_MARGIN, RatioVerdict
from isotax.host.facts.fingerprint import fingerprint_differences
from isotax.model import CellStatus
from isotax.store.base import CellRecord, RunRecord
from isotax.telemetry import envcpu


class NotComparable(Exception):
    """The runs' hosts differ, or both sides are the same run; the message is one line
    naming the problem and the fix."""


@dataclass(frozen=True)
class Line:
    environment: str
    workload: str
    params_key: str
    metric: str
    unit: str
    higher_is_better: bool
    mean_a: float
    mean_b: float
    n_a: int
    n_b: int
    ratio: Ratio  # B over A (bootstrap; its `decided` is the judged verdict's)
    judged: RatioVerdict | None = None  # None where a value is not positive (no log)


@dataclass
class Comparison:
    a: RunRecord
    b: RunRecord
    lines: list[Line] = field(default_factory=list)
    host_differences: list[str] = field(default_factory=list)
    only_a: list[str] = field(default_factory=list)  # points one run has and the other lacks
    only_b: list[str] = field(default_factory=list)


def _values(cells: Sequence[CellRecord]) -> dict[tuple[str, str, str, str],
                                                 tuple[list[float], str, bool]]:
    out: dict[tuple[str, str, str, str], tuple[list[float], str, bool]] = {}
    for c in cells:
        if c.key.warmup or c.status is not CellStatus.OK:
            continue
        for s in c.samples:
            if s.metric == envcpu.METRIC:
                continue
            key = (c.key.environment, c.key.workload, c.key.params_key, s.metric)
            out.setdefault(key, ([], s.unit, s.higher_is_better))[0].append(s.value)
    return out


def compare(a: RunRecord, cells_a: Sequence[CellRecord], b: RunRecord,
            cells_b: Sequence[CellRecord], force: bool = False,
            margin: float = MIN_MARGIN) -> Comparison:
    """Run B against run A. Raises NotComparable when both are the same run, or when the
    fingerprints differ and not force."""
    if a.id == b.id:
        raise NotComparable(
            f"both sides are the same run ({a.id}): every ratio would be 1 by construction; "
            "give two different runs (a bundle of a run is that same run)")
    diffs = fingerprint_differences(a.host, b.host)
    if diffs and not force:
        raise NotComparable(
            f"runs {a.id} and {b.id} were recorded on hosts that differ ({'; '.join(diffs)}): "
            "a difference would be the host's; compare runs of one host setup, or pass "
            "--force to compare anyway with the differences listed")
    out = Comparison(a, b, host_differences=diffs)
    va, vb = _values(cells_a), _values(cells_b)
    for key in va:
        if key not in vb:
            continue
        (xa, unit, hib), (xb, _, _) = va[key], vb[key]
        if not xa or sum(xa) == 0:
            continue
        env, wl, pk, metric = key
        v = judge(xa, xb, hib, margin)
        r = ratio(xb, xa, hib, seed=int(b.seed))
        out.lines.append(Line(env, wl, pk, metric, unit, hib, sum(xa) / len(xa),
                              sum(xb) / len(xb), len(xa), len(xb),
                              replace(r, decided=v.verdict.value if v else "undecided"), v))
    points_a = {k[:3] for k in va}
    points_b = {k[:3] for k in vb}
    out.only_a = sorted("|".join(p) for p in points_a - points_b)
    out.only_b = sorted("|".join(p) for p in points_b - points_a)
    return out


def by_environment(c: Comparison) -> Mapping[str, list[Line]]:
    grouped: dict[str, list[Line]] = defaultdict(list)
    for line in c.lines:
        grouped[line.environment].append(line)
    return grouped


def to_json(c: Comparison) -> dict[str, Any]:
    return {
        "a": c.a.id, "b": c.b.id, "host_differences": c.host_differences,
        "only_in_a": c.only_a, "only_in_b": c.only_b,
        "lines": [{"environment": x.environment, "workload": x.workload,
                   "params": x.params_key, "metric": x.metric, "unit": x.unit,
                   "mean_a": x.mean_a, "mean_b": x.mean_b, "n_a": x.n_a, "n_b": x.n_b,
                   "ratio": x.judged.ratio if x.judged else x.ratio.ratio,
                   "ci_low": x.judged.ends[0] if x.judged else None,
                   "ci_high": x.judged.ends[1] if x.judged else None,
                   "verdict": x.ratio.verdict,
                   "margin": x.judged.margin if x.judged else None} for x in c.lines],
    }
