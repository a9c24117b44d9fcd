"""Claims as data: what a study or a runtime's own pages say isolation costs, written once in
a TOML file so that a run on the user's host can judge it (isotax.analysis.claim_verdicts).

A claims file:

    version = 1
    [source]                      # the file's study; a claim may name its own
    study = "Felter et al. (IBM Research)"
    title = "An Updated Performance Comparison of Virtual Machines and Linux Containers"
    year = 2015
    url = "https://..."

    [[claim]]
    id = "felter-pxz-docker"
    where = "Table 1, PXZ"         # the table or figure
    finding = "Docker's PXZ throughput equals native"    # the source's finding, paraphrased
    source_figure = "native 76.2 MB/s, Docker 73.5 MB/s (-4%)"   # as the source printed it
    environment = { kind = "docker", network = "host" }   # plan settings, or a name
    workload = "compress"
    params = { level = 2 }        # a subset of the point's parameters
    metric = "throughput"         # the point's headline metric when left out
    relation = { equivalent_pct = 5 }

The relation is the claim's margin, one of: `equivalent_pct` (the ratio within ±x%),
`worse_by_at_least_pct` / `better_by_at_least_pct` (in the metric's own direction: a rate
lower, a time higher), `at_most_worse_pct` (a tax of at most y%), `within = [a, b]` (the raw
ratio environment / baseline), or an absolute bound on the metric's own value, `at_most` /
`at_least` (start-up times, footprints). A relative claim is a ratio to its `baseline` (the
run's baseline when left out; settings or a name, as `environment`), so it carries across
hardware; the file keeps the source's own figure beside it for the report.

`requires` names what the claim's ratio needs of the host to mean what it meant in the source
("kvm": a VM under hardware virtualisation, not TCG; "numa": more than one NUMA node), and
`conditions` says in words how the source's setup differs and what the ratio still means.
`gate = true` makes a claim that does not hold fail `isotax claims --gate` (CI).

Pure: parse_claims reads text; a bad file is one ClaimsError line naming the file, the claim
and the fix.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from isotax.analysis.attribution import settings

CLAIMS_VERSION = 1
ParamValue = str | bool | int | float
Requirement = Literal["kvm", "numa"]
_STRICT = ConfigDict(frozen=True, extra="forbid", strict=True)


class ClaimsError(Exception):
    """A claims file that cannot be read: one line naming the place and the fix."""


class Source(BaseModel):
    """Where a claim comes from."""

    model_config = _STRICT

    study: str = Field(min_length=1)
    title: str = ""
    year: int | None = Field(None, ge=1950, le=2100)
    url: str = ""


class Relation(BaseModel):
    """What the claim asserts, exactly one of these."""

    model_config = _STRICT

    equivalent_pct: float | None = Field(None, gt=0, lt=100)
    worse_by_at_least_pct: float | None = Field(None, gt=0)
    better_by_at_least_pct: float | None = Field(None, gt=0)
    at_most_worse_pct: float | None = Field(None, ge=0)
    within: list[float] | None = Field(None, min_length=2, max_length=2)
    at_most: float | None = Field(None, gt=0)
    at_least: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _one(self) -> Relation:
        given = [k for k, v in self.model_dump().items() if v is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one relation (got {', '.join(given) or 'none'}; "
                             f"the relations: {', '.join(Relation.model_fields)})")
        if self.within is not None and not 0 < self.within[0] < self.within[1]:
            raise ValueError(f"within = {list(self.within)}: give [low, high] with "
                             "0 < low < high")
        return self

    @property
    def absolute(self) -> bool:
        """On the metric's own value, not a ratio to a baseline."""
        return self.at_most is not None or self.at_least is not None

    def allowed(self, higher_is_better: bool) -> tuple[float, float]:
        """The log ratios (or, absolute, the log values) the claim allows: [low, high], with
        -inf / inf for an open side. A relation in the metric's direction reads it: a rate
        worse by 20% is a ratio at most 0.8, a time worse by 20% one at least 1.2."""
        if self.equivalent_pct is not None:
            m = math.log1p(self.equivalent_pct / 100)
            return (-m, m)
        if self.within is not None:
            return (math.log(self.within[0]), math.log(self.within[1]))
        if self.at_most is not None:
            return (-math.inf, math.log(self.at_most))
        if self.at_least is not None:
            return (math.log(self.at_least), math.inf)
        worse = self.worse_by_at_least_pct is not None or self.at_most_worse_pct is not None
        pct = next(v for v in (self.worse_by_at_least_pct, self.better_by_at_least_pct,
                               self.at_most_worse_pct) if v is not None)
        falls = higher_is_better == worse  # the claim's edge is below a ratio of 1
        if falls and pct >= 100:
            raise ClaimsError(f"{self.words(higher_is_better)}: a value cannot fall by "
                              "100% or more; give a smaller percentage or `within`")
        edge = math.log1p(-pct / 100) if falls else math.log1p(pct / 100)
        at_least_edge = self.at_most_worse_pct is not None
        # "at least y% worse" lies beyond the edge; "at most y% worse" on the near side.
        beyond = (-math.inf, edge) if falls else (edge, math.inf)
        near = (edge, math.inf) if falls else (-math.inf, edge)
        return near if at_least_edge else beyond

    def words(self, higher_is_better: bool | None = None) -> str:
        """The relation as the report says it: 'equivalent within ±5%'."""
        if self.within is not None:
            return f"ratio within [{self.within[0]:g}, {self.within[1]:g}]"
        field, value = next((k, v) for k, v in self if v is not None)  # exactly one (_one)
        return _RELATION_WORDS[field].format(value)


# A relation's words by its field (`within`, two numbers, is worded apart).
_RELATION_WORDS = {
    "equivalent_pct": "equivalent within ±{:g}%",
    "worse_by_at_least_pct": "worse by at least {:g}%",
    "better_by_at_least_pct": "better by at least {:g}%",
    "at_most_worse_pct": "at most {:g}% worse",
    "at_most": "at most {:g}",
    "at_least": "at least {:g}",
}


EnvSelector = str | dict[str, ParamValue | dict[str, ParamValue]]


def setting_word(v: Any) -> str:
    """A setting's value as the plan's words compare it (true, not True)."""
    return str(v).lower() if isinstance(v, bool) else str(v)


def same_setting(got: Any, want: Any) -> bool:
    """Whether a point's parameter is the claim's value: numbers by value (a plan's `rate = 0`
    is a claim's 0.0), anything else by its words."""
    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool)
    if number(got) and number(want):
        return float(got) == float(want)
    return setting_word(got) == setting_word(want)


def flat_settings(selector: Mapping[str, Any]) -> dict[str, str]:
    """An environment selector's settings as attribution.settings names them
    (options.platform, ...), each as setting_word gives it."""
    out = {}
    for k, v in selector.items():
        if isinstance(v, Mapping):
            out.update({f"{k}.{ok}": setting_word(ov) for ok, ov in v.items()})
        else:
            out[k] = setting_word(v)
    return out


def entry_fits(entry: Mapping[str, Any], selector: Mapping[str, Any]) -> bool:
    """Whether a plan's environment entry has every setting the selector asks for: the
    plan's settings as the layers name them, and any other scalar it sets (numa_node)."""
    got = {k: setting_word(v) for k, v in entry.items() if not isinstance(v, Mapping)}
    got.update({k: setting_word(v) for k, v in settings(entry).items()})
    return all(got.get(k) == v for k, v in flat_settings(selector).items())


class Claim(BaseModel):
    """One [[claim]] table."""

    model_config = _STRICT

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$", max_length=80)
    source: Source | None = None  # the file's [source] where left out
    where: str = ""  # the table or figure in the source
    finding: str = Field(min_length=1)
    source_figure: str = ""
    # The source's own ratio (the figure's environment over its baseline, in the metric's
    # units), where it printed one: the report sets it beside this host's.
    source_ratio: float | None = Field(None, gt=0)
    environment: EnvSelector | None = None
    baseline: EnvSelector | None = None
    workload: str | None = None
    params: dict[str, ParamValue] = Field(default_factory=dict)
    metric: str | None = None
    relation: Relation | None = None
    requires: list[Requirement] = Field(default_factory=list)
    conditions: str = ""
    # Why no run of isotax can measure it (a 44-core Java benchmark): judged "not measurable
    # here" with these words, whatever the run holds.
    not_measurable: str = ""
    gate: bool = False

    @model_validator(mode="after")
    def _complete(self) -> Claim:
        if self.not_measurable:
            return self
        missing = [k for k in ("environment", "workload", "relation")
                   if getattr(self, k) is None]
        if missing:
            raise ValueError(f"needs {', '.join(missing)} (or not_measurable = \"why\")")
        if self.relation is not None and self.relation.absolute and self.baseline is not None:
            raise ValueError("an absolute relation (at_most, at_least) has no baseline; "
                             "remove baseline or give a relative relation")
        return self


class _File(BaseModel):
    model_config = _STRICT

    version: int
    source: Source | None = None
    claim: list[Claim] = Field(min_length=1)


@dataclass(frozen=True)
class PlacedClaim:
    """A claim with its provenance resolved and its place in its file."""

    claim: Claim
    source: Source | None
    where: str  # "claims.toml:12"
    file: str

    @property
    def id(self) -> str:
        return self.claim.id


# A [[claim]] table's header line: how a file is told a claims file (isotax check), and
# where each claim stands in it.
CLAIM_HEADER = re.compile(r"^\s*\[\[\s*claim\s*\]\]", re.M)


def parse_claims(text: str, source: str = "claims") -> list[PlacedClaim]:
    """The claims in text; ClaimsError (one line) for bad TOML, a wrong version, an unknown
    key, a bad value or an id used twice."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ClaimsError(f"{source}: not valid TOML ({e}); fix the syntax at that place"
                          ) from None
    if raw.get("version") != CLAIMS_VERSION:
        raise ClaimsError(f"{source}: version = {raw.get('version')!r}; this isotax reads "
                          f"claims files of version {CLAIMS_VERSION} (write version = "
                          f"{CLAIMS_VERSION} at the top)")
    headers = [i for i, line in enumerate(text.splitlines(), 1) if CLAIM_HEADER.match(line)]
    claims = raw.get("claim")
    count = len(claims) if isinstance(claims, list) else 0

    def where(i: int) -> str:
        return f"{source}:{headers[i]}" if len(headers) == count else f"{source} claim {i + 1}"

    try:
        parsed = _File.model_validate(raw)
    except ValidationError as e:
        raise ClaimsError(_one_line(e, source, where, count)) from None
    out: list[PlacedClaim] = []
    seen: dict[str, str] = {}
    for i, c in enumerate(parsed.claim):
        if c.id in seen:
            raise ClaimsError(f"{where(i)}: id {c.id!r} is also the id of the claim at "
                              f"{seen[c.id]}; give each claim its own id")
        seen[c.id] = where(i)
        out.append(PlacedClaim(c, c.source or parsed.source, where(i), source))
    return out


def _one_line(e: ValidationError, source: str, where: Any, count: int) -> str:
    # An unknown key first: a misspelt key is the problem to name, not what it left unset.
    errors = sorted(e.errors(), key=lambda x: x["type"] != "extra_forbidden")
    err = errors[0]
    loc = tuple(err["loc"])
    in_claim = len(loc) > 1 and loc[0] == "claim" and isinstance(loc[1], int) and \
        loc[1] < count
    at = where(loc[1]) if in_claim else source
    key = ".".join(str(x) for x in (loc[2:] if in_claim else loc))
    # A union's every branch fails alike: name the key, not each branch's type.
    key = re.sub(r"\.(str|dict\[[^\]]*\]|function-after\[[^\]]*\])(\.|$)", r"\2", key)
    if err["type"] == "extra_forbidden":
        known = Claim.model_fields if in_claim else _File.model_fields
        return (f"{at}: {key} is not a claims setting (the settings: {', '.join(known)}); "
                "remove it or check its spelling")
    if loc == ("claim",):
        return f"{source}: has no [[claim]] table; add one (docs/studies.md)"
    detail = err["msg"].removeprefix("Value error, ")
    return f"{at}: {key + ': ' if key else ''}{detail}"


@functools.cache
def builtin_files() -> dict[str, str]:
    """The built-in claims files (isotax/claims/*.toml): name -> text, read once per process
    (the command line and every report format ask for them)."""
    return {f.name.removesuffix(".toml"): f.read_text(encoding="utf-8")
            for f in sorted(resources.files("isotax.claims").iterdir(), key=lambda f: f.name)
            if f.name.endswith(".toml")}


def builtin_source(name: str) -> str:
    """How a built-in file is named in verdicts and errors: "built-in felter2015"."""
    return f"built-in {name}"
