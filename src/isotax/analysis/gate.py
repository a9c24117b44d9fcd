"""The CI gate (`isotax check RUN --bounds FILE`): a run's ratios to its baseline against
bounds written down in a small TOML file, failing a build only on decided evidence.

A bound selects ratios (environment, workload, optionally a point's params and a metric; the
point's headline metric by default) and limits them: min_ratio / max_ratio on the raw ratio
environment / baseline, max_tax_pct on the tax in the metric's own direction (a throughput
at most p% below the baseline, a latency at most p% above it), and no_worse_than = "RUN_A":
this run's tax no worse than RUN_A's beyond the verdict margin.

When a ratio violates a bound (docs/ci-gate.md says the same in words):
- A headline ratio is judged on its sequential verdict (isotax.analysis.verdicts): the ratio
  of geometric means of round-paired values and its 95% confidence sequence, the Verdicts
  section's "ratio [95% sequence]". That sequence is what decided the verdict and stays valid
  however many rounds the run added before stopping, which a fixed-n interval does not.
  Another metric (a bound with `metric`) is not chased by added rounds: the report's verdict
  on the rounds it has stands in (report_data.other_verdicts: its round pairs' confidence
  sequence against the row's margin, as the Results table words it).
- A violation needs both: a decided verdict that the environment differs from the baseline
  (worse or better), and the whole interval beyond the bound. "Equivalent" says the
  difference is within the margin, i.e. noise, so it never fails; neither does "undecided"
  (or "within noise", "too few runs"). Those, and a decided ratio whose interval reaches
  across the bound, are NOTE lines: not decided against the bound, not judged.
- no_worse_than: this run's tax over RUN_A's tax, (env / baseline) / (env_A / baseline_A),
  judged by the two runs' sequential verdicts (isotax.analysis.between_runs: each run's
  confidence sequence at 2.5%, their difference at 95%). It fails when that verdict is
  "worse" against the verdict margin: the larger of the two runs' margins for the point's
  headline (the bound's `margin` when it gives one; at least verdicts.MIN_MARGIN). A metric
  without a sequential verdict in both runs is a NOTE: not judged.
- A bound that matches no ratio of the run is a WARN line (a typo, most likely), never
  silence; so is a no_worse_than run that lacks the point.

Pure: parse_bounds reads text, evaluate takes analyzed runs (report_data.ReportData); the
command (cli/check.py) opens the store and prints.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from isotax.analysis.between_runs import tax_change
from isotax.analysis.claim_verdicts import ClaimVerdict, Outcome
from isotax.analysis.report_data import ReportData, Row
from isotax.analysis.sequential import RatioState
from isotax.analysis.verdicts import MIN_MARGIN, Verdict
from isotax.host.facts.fingerprint import fingerprint_differences
from isotax.model import RunStatus

ParamValue = str | bool | int | float
Kind = Literal["FAIL", "NOTE", "WARN"]
DECIDED_APART = ("worse", "better")  # the verdicts that say the environment differs


class BoundsError(Exception):
    """A bounds file that cannot be read: one line naming the place and the fix."""


class Bound(BaseModel):
    """One [[bound]] table. strict: a number written as "0.9" (a string) is an error, not
    quietly a number, so a bound means what its file says."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    environment: str = "*"
    workload: str = "*"
    params: dict[str, ParamValue] = Field(default_factory=dict)
    metric: str | None = None
    min_ratio: float | None = Field(None, gt=0)
    max_ratio: float | None = Field(None, gt=0)
    max_tax_pct: float | None = Field(None, ge=0)
    no_worse_than: str | None = Field(None, min_length=1)
    margin: float | None = Field(None, gt=0, lt=1)

    @model_validator(mode="after")
    def _sensible(self) -> Bound:
        if (self.min_ratio, self.max_ratio, self.max_tax_pct, self.no_worse_than) == \
                (None, None, None, None):
            raise ValueError("limits nothing; give min_ratio, max_ratio, max_tax_pct or "
                             "no_worse_than")
        if self.min_ratio is not None and self.max_ratio is not None and \
                self.min_ratio > self.max_ratio:
            raise ValueError(f"min_ratio {self.min_ratio:g} is above max_ratio "
                             f"{self.max_ratio:g}; swap them")
        if self.margin is not None and self.no_worse_than is None:
            raise ValueError("margin applies to no_worse_than only; remove it or add "
                             "no_worse_than")
        return self


class _File(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    bound: list[Bound] = Field(min_length=1)


@dataclass(frozen=True)
class Bounds:
    source: str  # the file as the user named it
    entries: tuple[tuple[Bound, str], ...]  # each bound and where it is ("bounds.toml:7")

    def references(self) -> list[tuple[str, str]]:
        """(no_worse_than run, the first bound naming it), each run once."""
        seen: dict[str, str] = {}
        for b, where in self.entries:
            if b.no_worse_than is not None:
                seen.setdefault(b.no_worse_than, where)
        return list(seen.items())


_HEADER = re.compile(r"^\s*\[\[\s*bound\s*\]\]")


def parse_bounds(text: str, source: str = "bounds") -> Bounds:
    """The bounds in text; BoundsError (one line) for bad TOML, an unknown key, a bad value."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BoundsError(f"{source}: not valid TOML ({e}); fix the syntax at that place"
                          ) from None
    # tomllib keeps no line numbers: the [[bound]] headers, in order, are the entries' lines
    # (a bound written inline, bound = [{...}], is named by its number instead).
    headers = [i for i, line in enumerate(text.splitlines(), 1) if _HEADER.match(line)]
    count = len(raw.get("bound", [])) if isinstance(raw.get("bound"), list) else 0

    def where(i: int) -> str:
        return f"{source}:{headers[i]}" if len(headers) == count else f"{source} bound {i + 1}"

    try:
        parsed = _File.model_validate(raw)
    except ValidationError as e:
        # An unknown key first: a misspelt key also leaves its bound without a limit, and the
        # spelling is the problem to name.
        errors = sorted(e.errors(), key=lambda x: x["type"] != "extra_forbidden")
        err = errors[0]
        loc = tuple(err["loc"])
        at = where(loc[1]) if len(loc) > 1 and loc[0] == "bound" and \
            isinstance(loc[1], int) and loc[1] < count else source
        key = ".".join(str(x) for x in loc[2:])
        if err["type"] == "extra_forbidden" and len(loc) == 1:
            msg = (f"{loc[0]} is not a bounds setting; write each bound as a [[bound]] table "
                   "(docs/ci-gate.md)")
        elif err["type"] == "extra_forbidden":
            msg = (f"{key} is not a bound setting (the settings: "
                   f"{', '.join(Bound.model_fields)}); remove it or check its spelling")
        elif loc == ("bound",) and err["type"] in ("missing", "too_short"):
            msg = "has no [[bound]] table; add one (docs/ci-gate.md)"
        elif err["type"] != "value_error" and (loc == ("bound",) or len(loc) == 2):
            msg = "bound: write each bound as a [[bound]] table (docs/ci-gate.md)"
        elif len(loc) > 3 and loc[2] == "params":
            msg = f"params.{loc[3]}: give a string, a number or true/false"
        else:
            detail = err["msg"].removeprefix("Value error, ")
            msg = f"{key}: {detail}" if key else detail
        # One value can fail several ways (each type of a union): count the places.
        places = len({tuple(x["loc"])[:4] for x in errors})
        more = f" (and {places - 1} more problem(s))" if places > 1 else ""
        raise BoundsError(f"{at}: {msg}{more}") from None
    return Bounds(source, tuple((b, where(i)) for i, b in enumerate(parsed.bound)))


@dataclass(frozen=True)
class Finding:
    """One line of the gate's output: a violation (FAIL), a ratio not judged (NOTE), or a
    bound or run that needs a look (WARN)."""

    kind: Kind
    text: str
    where: str = ""  # the bound's place in the file; "" for the run as a whole
    environment: str = ""
    workload: str = ""
    point: str = ""
    metric: str = ""
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    verdict: str = ""
    limit: str = ""  # the bound the ratio was held against, "min_ratio 0.9"

    def line(self) -> str:
        return f"{self.kind} {self.text}" + (f" ({self.where})" if self.where else "")


@dataclass
class GateResult:
    run_id: str
    source: str
    bounds: int
    findings: list[Finding] = field(default_factory=list)
    checked: int = 0  # (bound, ratio) pairs looked at

    def of(self, kind: Kind) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    @property
    def exit_status(self) -> int:
        return 1 if self.of("FAIL") else 0

    def lines(self) -> list[str]:
        """WARN and NOTE lines first, the violations last: next to the summary, where a CI
        log's reader looks first."""
        order = {"WARN": 0, "NOTE": 1, "FAIL": 2}
        return [f.line() for f in sorted(self.findings, key=lambda f: order[f.kind])]

    def summary(self) -> str:
        fails, notes, warns = (len(self.of(k)) for k in ("FAIL", "NOTE", "WARN"))
        head = (f"{fails} violation(s)" if fails else "within bounds")
        return (f"isotax check {self.run_id}: {head}; {self.checked} ratio check(s) against "
                f"{self.bounds} bound(s) of {self.source}, {notes} not judged (NOTE), "
                f"{warns} warning(s)")

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run_id, "bounds": self.source, "exit_status": self.exit_status,
                "checked": self.checked, "violations": len(self.of("FAIL")),
                "notes": len(self.of("NOTE")), "warnings": len(self.of("WARN")),
                "summary": self.summary(),
                "findings": [{k: _finite(v) for k, v in asdict(f).items()}
                             for f in self.findings]}


def _finite(x: Any) -> Any:
    return None if isinstance(x, float) and not math.isfinite(x) else x


@dataclass(frozen=True)
class _Evidence:
    """What a ratio is judged on: its value, interval and verdict."""

    ratio: float
    low: float  # NaN: no interval; 0 / inf: unbounded
    high: float
    verdict: str

    def interval(self) -> str:
        if math.isnan(self.low) or math.isnan(self.high):
            return "[no interval]"
        if self.low <= 0 or not math.isfinite(self.high):
            return "[unbounded]"
        return f"[{_num(self.low)}, {_num(self.high)}]"

    def words(self) -> str:
        return f"ratio {_num(self.ratio)} {self.interval()}"


def _num(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else str(x)


def _same(got: Any, want: ParamValue) -> bool:
    # 2 and 2.0 are one point; True is not 1 (bool is an int to Python, not to a plan).
    if isinstance(got, bool) != isinstance(want, bool):
        return False
    return bool(got == want) or str(got) == str(want)


def _limits(b: Bound, row: Row) -> list[tuple[str, float, str]]:
    """(label, ratio, side): the ratio must not lie wholly `side` of it."""
    out = []
    if b.min_ratio is not None:
        out.append((f"min_ratio {b.min_ratio:g}", b.min_ratio, "below"))
    if b.max_ratio is not None:
        out.append((f"max_ratio {b.max_ratio:g}", b.max_ratio, "above"))
    if b.max_tax_pct is not None:
        # The tax in the metric's own direction: a rate may fall p%, a time may grow p%.
        p = b.max_tax_pct
        if row.higher_is_better:
            out.append((f"max_tax_pct {p:g} (ratio {1 - p / 100:.3g})", 1 - p / 100, "below"))
        else:
            out.append((f"max_tax_pct {p:g} (ratio {1 + p / 100:.3g})", 1 + p / 100, "above"))
    return out


class _Run:
    """One analyzed run's lookups: its ratios by key and their sequential verdicts."""

    def __init__(self, data: ReportData) -> None:
        self.data = data
        self.states: dict[tuple[str, str, str, str], RatioState] = \
            data.sequential.by_key() if data.sequential else {}
        self.heads = {(r.workload, r.params_key): r.metric for r in data.headline_rows()}
        self.envs = [e for e in data.columns if e not in (data.baseline, data.aa_env)]

    def evidence(self, env: str, row: Row) -> _Evidence | None:
        st = self.states.get((env, row.workload, row.params_key, row.metric))
        if st is not None:
            v = st.verdict
            return _Evidence(v.ratio, v.low, v.high, v.verdict.value)
        # Another metric: the report's own verdict on its round pairs (report_data's
        # other_verdicts: the same confidence sequence, against the row's margin), so the gate
        # and the report word it alike.
        got = self.data.other_verdicts.get((row, env))
        return None if got is None else _Evidence(got.ratio, got.low, got.high,
                                                  got.verdict.value)

    def margin(self, env: str, row: Row) -> float | None:
        st = self.states.get((env, row.workload, row.params_key, row.metric))
        return st.verdict.margin if st is not None else None

    def point(self, row: Row) -> str:
        return self.data.sweep_label.get((row.workload, row.params_key)) or row.params_key


def evaluate(bounds: Bounds, data: ReportData,
             references: Mapping[str, ReportData] | None = None) -> GateResult:
    """Every bound against the run's ratios. references: each no_worse_than run, analyzed,
    by the name the bounds give it. A bound's `params` are matched against each point's
    parameters as the analysis kept them (ReportData.point_params)."""
    params = data.point_params
    run = _Run(data)
    refs = {k: _Run(v) for k, v in (references or {}).items()}
    out = GateResult(data.run.id, bounds.source, len(bounds.entries))
    if data.run.status != RunStatus.COMPLETE:
        out.findings.append(Finding(
            "WARN", f"run {data.run.id} is {data.run.status}: its missing cells are not "
                    f"judged; `isotax run --resume {data.run.id}` finishes it"))
    for name, ref in refs.items():
        diffs = fingerprint_differences(ref.data.run.host, data.run.host)
        if diffs:
            where = next((w for b, w in bounds.entries if b.no_worse_than == name), "")
            out.findings.append(Finding(
                "WARN", f"run {ref.data.run.id} (no_worse_than) was recorded on a host that "
                        f"differs ({'; '.join(diffs)}): the taxes compared include the host's "
                        "difference", where))
    for b, where in bounds.entries:
        matched = 0
        for env, row in _matches(b, run, params):
            matched += 1
            out.checked += 1
            out.findings += _judge(b, where, run, env, row)
            if b.no_worse_than is not None:
                out.findings += _judge_against(b, where, run, refs[b.no_worse_than], env, row)
        if not matched:
            out.findings.append(Finding("WARN", _unmatched(b, run, params), where))
    return out


def _matches(b: Bound, run: _Run, params: Mapping[tuple[str, str], Mapping[str, Any]]
             ) -> list[tuple[str, Row]]:
    d = run.data
    rows = [r for r in d.rows
            if b.workload in ("*", r.workload)
            and (r.metric == b.metric if b.metric is not None
                 else run.heads.get((r.workload, r.params_key)) == r.metric)
            and all(k in params.get((r.workload, r.params_key), {})
                    and _same(params[(r.workload, r.params_key)][k], v)
                    for k, v in b.params.items())]
    envs = [e for e in run.envs if b.environment in ("*", e)]
    return [(e, r) for e in envs for r in rows if (r, e) in d.cells]


def _unmatched(b: Bound, run: _Run, params: Mapping[tuple[str, str], Mapping[str, Any]]
               ) -> str:
    """Why a bound matched no ratio, naming what the run has instead."""
    d, rid = run.data, run.data.run.id
    if b.environment == d.baseline:
        why = f"{b.environment} is run {rid}'s baseline: it has no ratio to itself"
    elif b.environment != "*" and b.environment not in run.envs:
        why = (f"run {rid} has no environment {b.environment!r} with results (its "
               f"environments: {', '.join(run.envs) or 'none'})")
    elif b.workload != "*" and b.workload not in d.workloads():
        why = (f"run {rid} has no workload {b.workload!r} with results (its workloads: "
               f"{', '.join(d.workloads()) or 'none'})")
    elif b.metric is not None and b.metric not in {r.metric for r in d.rows
                                                   if b.workload in ("*", r.workload)}:
        names = sorted({r.metric for r in d.rows if b.workload in ("*", r.workload)})
        why = f"no metric {b.metric!r} there (the metrics: {', '.join(names)})"
    elif b.params:
        want = ",".join(f"{k}={v}" for k, v in b.params.items())
        keys = sorted(k for (w, k) in params if b.workload in ("*", w))
        why = f"no point with {want} (the points: {'; '.join(keys) or 'none'})"
    else:
        why = "nothing measured there in both the environment and the baseline"
    return f"bound matches nothing in run {rid}: {why}; check its names"


def _judge(b: Bound, where: str, run: _Run, env: str, row: Row) -> list[Finding]:
    limits = _limits(b, row)
    if not limits:
        return []
    point = run.point(row)
    head = " ".join(x for x in (env, row.workload, point, row.metric) if x)
    ev = run.evidence(env, row)

    def made(kind: Kind, text: str, limit: str = "") -> Finding:
        return Finding(kind, f"{head}: {text}", where, env, row.workload, point, row.metric,
                       ev.ratio if ev else None, ev.low if ev else None,
                       ev.high if ev else None, ev.verdict if ev else "", limit)

    if ev is None:
        return [made("NOTE", f"no ratio ({run.data.baseline}'s mean is zero): not judged")]
    has_interval = not (math.isnan(ev.low) or math.isnan(ev.high))
    out = []
    if ev.verdict in DECIDED_APART and has_interval:
        for label, limit, side in limits:
            beyond = ev.high < limit if side == "below" else ev.low > limit
            reaches = ev.low < limit if side == "below" else ev.high > limit
            if beyond:
                out.append(made("FAIL", f"{ev.words()} {side} {label}", label))
            elif reaches:
                out.append(made("NOTE", f"{ev.words()} {ev.verdict}, but the interval reaches "
                                        f"across {label}: not decided against the bound, not "
                                        "judged", label))
        return out
    inside = has_interval and all(ev.low >= limit if side == "below" else ev.high <= limit
                                  for _, limit, side in limits)
    if ev.verdict in ("equivalent", "within noise") and inside:
        return []  # decided within the bounds, or noise the bounds hold: nothing to say
    why = ("within noise: never fails" if ev.verdict in ("equivalent", "within noise")
           else "not decided, not judged")
    return [made("NOTE", f"{ev.words()} {ev.verdict}: {why}",
                 ", ".join(label for label, _, _ in limits))]


def _judge_against(b: Bound, where: str, run: _Run, ref: _Run, env: str, row: Row
                   ) -> list[Finding]:
    """This run's tax over the reference run's (isotax.analysis.between_runs), against the
    verdict margin."""
    a = ref.data
    point = run.point(row)
    head = " ".join(x for x in (env, row.workload, point, row.metric) if x)
    label = f"no_worse_than {b.no_worse_than}"
    key = (env, row.workload, row.params_key, row.metric)
    if a.cell(env, row.workload, row.params_key, row.metric) is None or \
            a.cell(a.baseline, row.workload, row.params_key, row.metric) is None:
        return [Finding("WARN", f"{head}: run {a.run.id} has no {env} and {a.baseline} "
                                "values for it: not judged against it", where, env,
                        row.workload, point, row.metric, limit=label)]
    mine, theirs = run.states.get(key), ref.states.get(key)
    what = f"tax vs run {a.run.id}'s"
    if mine is None or theirs is None:
        return [Finding("NOTE", f"{head}: {what}: no sequential verdict in both runs (a "
                                "metric other than the point's headline): not judged",
                        where, env, row.workload, point, row.metric, limit=label)]
    margins = [m for m in (run.margin(env, row), ref.margin(env, row)) if m is not None]
    margin = b.margin if b.margin is not None else max([MIN_MARGIN, *margins])
    t = tax_change(mine, theirs, margin)
    words = f"{what} {_num(t.ratio)} {t.interval()}"

    def made(kind: Kind, text: str) -> Finding:
        return Finding(kind, f"{head}: {text}", where, env, row.workload, point, row.metric,
                       t.ratio, t.low, t.high, t.verdict.value, label)

    if t.verdict is Verdict.WORSE:
        return [made("FAIL", f"{words} worse beyond the ±{margin:.1%} margin ({label})")]
    if t.verdict in (Verdict.BETTER, Verdict.EQUIVALENT):
        return []  # decidedly better than the reference run, or equivalent to it
    return [made("NOTE", f"{words} neither beyond nor within the ±{margin:.1%} margin "
                         f"({label}): {t.reason}; not decided, not judged")]


def claim_findings(verdicts: Sequence[ClaimVerdict]) -> list[Finding]:
    """A claims file's verdicts as the gate's lines (a bounds file is a claims file without
    provenance): a claim marked gate = true that does not hold fails; one that is undecided
    is a NOTE, not judged; a claim without gate, or one that holds, says nothing here."""
    out = []
    for v in verdicts:
        c = v.placed.claim
        if not c.gate or v.outcome in (Outcome.HOLDS, Outcome.NOT_HERE):
            continue
        kind: Kind = "FAIL" if v.outcome is Outcome.FAILS else "NOTE"
        head = " ".join(x for x in (v.environment, c.workload or "", v.point, v.metric) if x)
        text = f"claim {c.id}: {head}: {v.why}" + \
            ("" if kind == "FAIL" else "; not decided, not judged")
        out.append(Finding(kind, text, v.placed.where, v.environment, c.workload or "",
                           v.point, v.metric, v.value, v.low, v.high, v.outcome.value,
                           v.relation))
    return out


def format_lines(result: GateResult) -> Sequence[str]:
    """The text output: one line per finding, then the summary."""
    return [*result.lines(), result.summary()]
