"""Claims judged against a run (isotax.analysis.claims says what a claim is).

Every claim ends as one of four outcomes, from the run's own anytime-valid evidence, never by
eye:
- **holds**: the ratio's 95% confidence sequence lies wholly inside what the claim allows;
- **does not hold**: it lies wholly outside;
- **undecided**: it reaches across the claim's edge; the pairs that would decide it at the
  spread seen are named;
- **not measurable here**: the host cannot give the ratio its source's meaning (a VM under TCG
  where the claim is about KVM, one NUMA node where it is about placement), or the run could
  not start the environment, with the reason.

The evidence is the one the run's verdicts use (isotax.analysis.verdicts): for a headline
ratio to the run's baseline, the run's own sequential verdict (chased by the added rounds, a
stored spread borrowed where the run did); for another metric, or a ratio between two
environments ("gVisor against runc"), the confidence sequence on the round-paired log ratios,
as the layer attribution judges; for an absolute bound (a start-up time, a footprint), the same
sequence on the log of the environment's own values (its geometric mean). So a claim's verdict
and the report's word for the same ratio cannot disagree about the interval.

A claim whose settings match several environments of the run (kind runc on two networks) is
judged for each; a claim that matches none is undecided ("this run did not measure it").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from isotax.analysis.claims import (
    ClaimsError,
    EnvSelector,
    PlacedClaim,
    entry_fits,
    flat_settings,
    same_setting,
    setting_word,
)
from isotax.analysis.report_data import ReportData, Row
from isotax.analysis.verdicts import (
    ConfidenceSequence,
    confidence_sequence,
    pair_by_round,
    pairs_for_half_width,
)


class Outcome(StrEnum):
    HOLDS = "holds"
    FAILS = "does not hold"
    UNDECIDED = "undecided"
    NOT_HERE = "not measurable here"


@dataclass(frozen=True)
class ClaimVerdict:
    """One claim judged on one environment of the run (or on none: why)."""

    placed: PlacedClaim
    outcome: Outcome
    why: str  # the evidence in words, or why there is none
    environment: str = ""
    baseline: str = ""
    point: str = ""  # the point's sweep words, or its params
    metric: str = ""
    unit: str = ""
    value: float | None = None  # the ratio (or, absolute, the geometric mean of the values)
    low: float | None = None  # its 95% confidence sequence; None: unbounded on that side
    high: float | None = None
    pairs: int = 0
    relation: str = ""  # the relation in words
    more_pairs: int | None = None  # undecided: the pairs in all that would decide it

    @property
    def absolute(self) -> bool:
        r = self.placed.claim.relation
        return bool(r and r.absolute)

    def interval(self) -> str:
        if self.value is None:
            return ""
        lo = "0" if self.low is None else _num(self.low)
        hi = "∞" if self.high is None else _num(self.high)
        return f"{_num(self.value)} [{lo}, {hi}]"

    def to_json(self) -> dict[str, Any]:
        c, s = self.placed.claim, self.placed.source
        return {"id": c.id, "study": s.study if s else "", "year": s.year if s else None,
                "url": s.url if s else "", "where": c.where, "finding": c.finding,
                "source_figure": c.source_figure, "source_ratio": c.source_ratio,
                "relation": self.relation,
                "environment": self.environment, "baseline": self.baseline,
                "workload": c.workload or "", "point": self.point, "metric": self.metric,
                "unit": self.unit, "absolute": self.absolute, "value": self.value,
                "low": self.low, "high": self.high, "pairs": self.pairs,
                "outcome": self.outcome.value, "why": self.why,
                "more_pairs": self.more_pairs, "gate": c.gate, "conditions": c.conditions,
                "file": self.placed.where}


def _num(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def judge(claims: Sequence[PlacedClaim], data: ReportData, no_kvm: str = ""
          ) -> list[ClaimVerdict]:
    """Every claim against the run, in the claims' order; one verdict per environment a claim
    matches, one (undecided or not measurable here) where it matches none. no_kvm: why the
    run's host has no KVM ("" where it has, or is not known), so that a KVM claim whose VM the
    run left out is not measurable here rather than undecided."""
    if not no_kvm and data.meta.claims is not None:
        no_kvm = data.meta.claims.no_kvm  # as `isotax claims` found this run's host
    out: list[ClaimVerdict] = []
    for placed in claims:
        out += _judge_claim(placed, data, no_kvm)
    return out


def _judge_claim(placed: PlacedClaim, data: ReportData, no_kvm: str) -> list[ClaimVerdict]:
    c = placed.claim

    def none(outcome: Outcome, why: str, env: str = "") -> ClaimVerdict:
        return ClaimVerdict(placed, outcome, why, environment=env,
                            relation=c.relation.words() if c.relation else "")

    if c.not_measurable:
        return [none(Outcome.NOT_HERE, c.not_measurable)]
    assert c.environment is not None and c.workload is not None and c.relation is not None
    if "numa" in c.requires and int(data.run.host.get("numa_nodes") or 1) < 2:
        return [none(Outcome.NOT_HERE, "this host has one NUMA node: placement cannot matter "
                                       "here")]
    envs = _matching(c.environment, data)
    if not envs and "kvm" in c.requires and no_kvm:
        return [none(Outcome.NOT_HERE, f"requires KVM, and this host has none: {no_kvm}")]
    if not envs:
        return [none(Outcome.UNDECIDED, f"run {data.run.id} has no environment "
                                        f"{_selector_words(c.environment)}; `isotax claims` "
                                        "without --run measures it")]
    base = data.baseline
    if c.baseline is not None:
        bases = _matching(c.baseline, data, include_baseline=True)
        if not bases:
            return [none(Outcome.UNDECIDED, f"run {data.run.id} has no baseline environment "
                                            f"{_selector_words(c.baseline)}")]
        base = bases[0]
    out = []
    for env in envs:
        record = data.env(env)
        if record is not None and not record.available:
            out.append(none(Outcome.NOT_HERE, f"{env} cannot run here: {record.reason}", env))
            continue
        if "kvm" in c.requires and (data.emulated(env) or data.emulated(base)):
            why = (record.describe.facts.accelerator_reason if record else "") or "TCG"
            out.append(none(Outcome.NOT_HERE, f"{env} ran under software emulation (TCG), "
                                              f"not KVM: {why}", env))
            continue
        rows = _rows(c.workload, c.params, c.metric, data)
        if not rows:
            out.append(none(Outcome.UNDECIDED, f"run {data.run.id} has no {c.workload} point "
                                               f"with {_params_words(c.params)}"
                                               f"{' and metric ' + c.metric if c.metric else ''}",
                            env))
            continue
        for row in rows:
            out.append(_judge_row(placed, data, env, base, row))
    return out


def _judge_row(placed: PlacedClaim, data: ReportData, env: str, base: str, row: Row
               ) -> ClaimVerdict:
    c = placed.claim
    assert c.relation is not None
    # The point in few words: where the run swept, its sweep's; else the parameters the
    # claim asked for (the rest are the plan's sizes, in the report's Results).
    point = data.sweep_label.get((row.workload, row.params_key)) or ",".join(
        f"{k}={setting_word(v)}" for k, v in c.params.items())
    na = data.na_reason(env, row)
    rel = c.relation.words(row.higher_is_better)
    common: dict[str, Any] = {"environment": env, "point": point, "metric": row.metric,
                              "unit": row.unit, "relation": rel}
    if na:
        return ClaimVerdict(placed, Outcome.NOT_HERE, f"{row.workload} does not apply to "
                            f"{env} here: {na}", **common)
    try:
        allowed = c.relation.allowed(row.higher_is_better)
    except ClaimsError as e:
        raise ClaimsError(f"{placed.where}: {e}") from None
    if c.relation.absolute:
        vals = list(data.rounds.get((row, env), {}).values())
        cs = confidence_sequence([math.log(v) for v in vals if v > 0])
        what = f"{env}'s {row.metric}"
    else:
        common["baseline"] = base
        cs = _ratio_sequence(data, env, base, row)
        what = f"{env} / {base}"
    if cs.n == 0:
        return ClaimVerdict(placed, Outcome.UNDECIDED, f"no {what} was measured in run "
                            f"{data.run.id}", **common)
    value = math.exp(cs.mean)
    low = math.exp(cs.low) if math.isfinite(cs.low) else None
    high = math.exp(cs.high) if math.isfinite(cs.high) else None
    common.update(value=value, low=low, high=high, pairs=cs.n)
    lo, hi = allowed
    if lo <= cs.low and cs.high <= hi:
        return ClaimVerdict(placed, Outcome.HOLDS, f"{what} {_span(cs)}: inside {rel}",
                            **common)
    if cs.high < lo or cs.low > hi:
        return ClaimVerdict(placed, Outcome.FAILS, f"{what} {_span(cs)}: outside {rel}",
                            **common)
    more = _pairs_to_decide(cs, allowed)
    need = (f"about {more} pairs in all would decide it at this spread"
            f"{_cell_time(data, env, '' if c.relation.absolute else base, row, more - cs.n)}"
            if more is not None
            else "no number of pairs decides it at this spread (the value sits at the "
                 "claim's edge)")
    return ClaimVerdict(placed, Outcome.UNDECIDED, f"{what} {_span(cs)} reaches across "
                        f"{rel} after {cs.n} pair(s); {need}", more_pairs=more, **common)


def _cell_time(data: ReportData, env: str, base: str, row: Row, pairs: int) -> str:
    """' (about 12 min of cells more)': what `pairs` more rounds of the two environments'
    cells at this point took in this run (base "": the environment's alone, for an absolute
    bound); "" where the run did not time them."""
    if data.sequential is None or pairs <= 0:
        return ""
    cell = data.sequential.cell_s
    each = cell.get((env, row.workload, row.params_key), 0.0) + \
        (cell.get((base, row.workload, row.params_key), 0.0) if base else 0.0)
    if each <= 0:
        return ""
    minutes = pairs * each / 60
    return (f" (about {minutes:.0f} min of cells more)" if minutes >= 1 else
            f" (about {pairs * each:.0f} s of cells more)")


def _span(cs: ConfidenceSequence) -> str:
    if not (math.isfinite(cs.low) and math.isfinite(cs.high)):
        return f"{_num(math.exp(cs.mean))} [unbounded]"
    return f"{_num(math.exp(cs.mean))} [{_num(math.exp(cs.low))}, {_num(math.exp(cs.high))}]"


def _ratio_sequence(data: ReportData, env: str, base: str, row: Row) -> ConfidenceSequence:
    """The run's own sequence for a headline ratio to its baseline (chased, with what it
    borrowed); else the round pairs' sequence, as the layer attribution judges."""
    if base == data.baseline and data.sequential is not None:
        st = data.sequential.by_key().get((env, row.workload, row.params_key, row.metric))
        if st is not None:
            v = st.verdict
            return ConfidenceSequence(
                v.n, math.log(v.ratio) if v.ratio > 0 else math.nan, st.sd,
                math.log(v.low) if v.low > 0 else -math.inf,
                math.log(v.high) if math.isfinite(v.high) else math.inf)
    return confidence_sequence(pair_by_round(data.rounds.get((row, env), {}),
                                             data.rounds.get((row, base), {})))


def _pairs_to_decide(cs: ConfidenceSequence, allowed: tuple[float, float]) -> int | None:
    """The pairs whose sequence would clear the nearest edge of the allowed range, were the
    mean and spread to stay as they are; None where no number would (or no spread yet)."""
    edges = [e for e in allowed if math.isfinite(e)]
    gap = min((abs(cs.mean - e) for e in edges), default=math.inf)
    if not math.isfinite(cs.sd) or cs.sd <= 0 or gap <= 0 or not math.isfinite(gap):
        return None
    return pairs_for_half_width(cs.sd, math.expm1(gap), cap=10_000)


def _matching(selector: EnvSelector, data: ReportData, include_baseline: bool = False
              ) -> list[str]:
    """The run's environments the selector names (with results, or that could not start),
    in the plan's order; never the A/A canary, and the baseline only where asked."""
    ran = set(data.columns) | {e.name for e in data.environments if not e.available}
    skip = {data.plan.aa_name} | (set() if include_baseline else {data.baseline})
    out = []
    for entry in data.plan.environments:
        name = str(entry.get("name"))
        named = name == selector if isinstance(selector, str) else entry_fits(entry, selector)
        if named and name in ran and name not in skip:
            out.append(name)
    return out


def _rows(workload: str, params: Mapping[str, Any], metric: str | None, data: ReportData
          ) -> list[Row]:
    heads = {(r.workload, r.params_key): r.metric for r in data.headline_rows()}
    return [r for r in data.rows if r.workload == workload
            and (r.metric == metric if metric else heads.get((r.workload, r.params_key))
                 == r.metric)
            and all(same_setting(data.point_params.get((r.workload, r.params_key), {}).get(k),
                                 v) for k, v in params.items())]


def _selector_words(selector: EnvSelector) -> str:
    if isinstance(selector, str):
        return repr(selector)
    return "with " + ", ".join(f"{k} = {v}" for k, v in flat_settings(selector).items())


def _params_words(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in params.items()) or "any parameters"


def counts(verdicts: Sequence[ClaimVerdict]) -> dict[str, int]:
    """How many verdicts ended each way, every outcome named."""
    out = {o.value: 0 for o in Outcome}
    for v in verdicts:
        out[v.outcome.value] += 1
    return out


def gate_failures(verdicts: Sequence[ClaimVerdict]) -> list[ClaimVerdict]:
    """The claims marked gate = true that do not hold: what fails a CI job."""
    return [v for v in verdicts if v.placed.claim.gate and v.outcome is Outcome.FAILS]
