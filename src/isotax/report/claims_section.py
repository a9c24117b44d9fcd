"""The report's section "The studies on this host": the built-in claims (and any claims file
the run was measured for, kept in its metadata) judged against the run
(isotax.analysis.claim_verdicts), one row per claim and environment: source, claim, the
source's figure, this host's value and interval, and the verdict in words and colour.

A run of a claims plan (`isotax claims`, the built-in plan studies) lists every claim, the
ones not measurable here with why; any other run lists the claims it has an environment and a
point for, and counts the rest in one line, so that a quick run's report is not a list of
claims it never set out to judge."""

from __future__ import annotations

from collections.abc import Sequence

from isotax.analysis.claim_verdicts import ClaimVerdict, Outcome, judge
from isotax.analysis.claims import (
    ClaimsError,
    PlacedClaim,
    builtin_files,
    builtin_source,
    parse_claims,
)
from isotax.analysis.report_data import ReportData
from isotax.report.claims_table import summary
from isotax.report.table import Block, Grid, Heading, Text

TITLE = "The studies on this host"
CLAIMS_PLANS = ("studies", "claims")  # the names claims_plan gives the plans it writes
OUTCOME_CLASS = {Outcome.HOLDS: "holds", Outcome.FAILS: "fails",
                 Outcome.UNDECIDED: "undecided", Outcome.NOT_HERE: "nothere"}


def _parsed(texts: dict[str, str], skip: set[str]) -> list[PlacedClaim]:
    """The claims of each file, a file that no longer parses left out (its text stays in
    the run's metadata), an id already taken left out."""
    out: list[PlacedClaim] = []
    for source, text in texts.items():
        try:
            placed = parse_claims(text, source)
        except ClaimsError:
            continue
        out += [p for p in placed if p.id not in skip]
        skip |= {p.id for p in placed}
    return out


def _stored(d: ReportData) -> dict[str, str]:
    return dict(d.meta.claims.files) if d.meta.claims is not None else {}


def _all_builtin(d: ReportData) -> bool:
    """A run of the built-in claims' plan: it lists every built-in claim."""
    return d.run.plan_name in CLAIMS_PLANS and not _stored(d)


def verdicts(d: ReportData) -> list[ClaimVerdict]:
    """The verdicts the section shows: every claim of the files the run was measured for
    (meta "claims"), and of the built-in ones all in a run of the built-in plan, else those
    the run has an environment and a point for."""
    own = _parsed(dict(_stored(d)), set())
    builtin = _parsed({builtin_source(n): t for n, t in builtin_files().items()},
                      {p.id for p in own})
    all_builtin = _all_builtin(d)
    try:
        mine = judge(own, d)
        theirs = judge(builtin, d)
    except ClaimsError:
        return []
    return [*mine, *(v for v in theirs if all_builtin or (v.environment and (
        v.value is not None or v.outcome is Outcome.NOT_HERE)))]


def row(v: ClaimVerdict) -> list[str]:
    c, s = v.placed.claim, v.placed.source
    source = ", ".join(x for x in (s.study if s else v.placed.file,
                                   str(s.year) if s and s.year else "", c.where) if x)
    env = f"{v.environment} vs {v.baseline}" if v.baseline else v.environment
    what = " ".join(x for x in (c.workload or "", v.point, v.metric) if x)
    return [c.id, source, c.finding, c.source_figure, v.relation, env or "-", what or "-",
            v.interval() or "-", v.outcome.value, v.why]


VERDICT_COLUMN = 8  # the cell the HTML report colours by its outcome
HEADER = ["claim", "source", "finding", "the source's figure", "claim's relation",
          "environment", "point and metric", "this host [95% CS]", "verdict", "why"]


def intro(d: ReportData, shown: Sequence[ClaimVerdict]) -> str:
    return (f"{summary(shown)}. Each claim of the reference studies and of the runtimes' "
            "own published figures, judged on this run with its own confidence sequences "
            "(docs/studies.md): **holds** when the 95% sequence lies wholly inside the "
            "claim's relation, **does not hold** when wholly outside, **undecided** when "
            "it reaches across; **not measurable here** names why. "
            + ("" if _all_builtin(d) else
               "Of the built-in claims, only those this run has an environment and a point "
               "for are listed; `isotax claims` measures the rest."))


def blocks(d: ReportData) -> list[Block]:
    """The section as shared blocks (the Markdown report)."""
    shown = verdicts(d)
    if not shown:
        return []
    return [Heading(2, TITLE), Text(intro(d, shown)),
            Grid(HEADER, [row(v) for v in shown])]
