"""results.json as pydantic models: the one definition of the document, from which its JSON
Schema is generated (report/schema/results.schema.json, shipped with the package).

json_report.render builds its dict, then passes it through ResultsDocument (validate, dump),
so a key added to or dropped from the output without the model fails every test that renders
a report, and tests/unit/test_results_schema.py fails when the checked-in schema is not the
one these models generate. Regenerate it after changing a model:

    .venv/bin/python scripts/results_schema.py          (--check: only say whether it differs)

The schema's $id carries model.FORMAT_VERSION: a change of what the document means bumps it.
Parts whose keys belong to other modules and grow with them (the host fingerprint, an
environment's facts, the runner's "sequential" record) are open objects here, on purpose.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from isotax.analysis.limiter import Limiter
from isotax.analysis.verdicts import PRIOR_G, Verdict
from isotax.model import FORMAT_VERSION

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "results.schema.json"
SCHEMA_ID = f"urn:isotax:results:{FORMAT_VERSION}"

# [µs, cumulative fraction]: a list in the output (json has no tuples), of exactly two.
CdfPoint = Annotated[list[float], Field(min_length=2, max_length=2)]


def _this_version(v: int) -> int:
    if v != FORMAT_VERSION:
        raise ValueError(f"format_version {v} is not this isotax's {FORMAT_VERSION}")
    return v


class _Part(BaseModel):
    # forbid: a key the renderer writes and the model lacks is an error, not a silent extra
    # the schema does not describe. Attribute docstrings become the schema's descriptions.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Run(_Part):
    """The run's record in the store (its host and plan are top-level keys)."""

    id: str
    created: float
    """Unix time the run was created."""
    finished: float | None
    """Unix time it ended; null while running or interrupted."""
    status: str
    """running | complete | interrupted | failed"""
    plan_name: str
    seed: int
    format_version: int
    """The store format the run's rows were written in (model.FORMAT_VERSION then)."""


class Environment(_Part):
    name: str
    kind: str
    available: bool
    reason: str
    """Why it did not run; empty when it did."""
    emulated: bool
    """A VM under TCG software emulation: its ratios measure the emulator."""
    describe: dict[str, Any]
    """The environment's description for reading: its kind's words and the runner's lines
    (network path, parity, identity, ...)."""
    facts: dict[str, Any]
    """Its typed facts (isotax.facts.Facts: kind, reach, isolation, runtime, memory limit or
    guest memory, vCPUs, emulation, accelerator, hugepages), with their version; read from
    the words of a run stored before they were typed."""
    tools: dict[str, str]
    """Package -> version inside the environment."""
    milestones: dict[str, float]
    """Start-up milestone -> seconds (e.g. ready)."""


class Result(_Part):
    """One environment x workload point x metric: the measured values and the ratio to the
    baseline. results.csv carries the same rows without `values`."""

    workload: str
    params: str
    """The point's parameters, "k=v,k=v" in key order (the long export has one column each)."""
    metric: str
    unit: str
    higher_is_better: bool
    environment: str
    emulated: bool
    n: int
    mean: float
    sd: float
    ci_low: float | None
    """95% t interval of the mean; null with fewer than 2 values."""
    ci_high: float | None
    ratio: float | None
    """mean / the baseline's mean; null for the baseline and where it has no value."""
    ratio_ci_low: float | None
    """95% bootstrap interval of the ratio; null without one."""
    ratio_ci_high: float | None
    delta_pct: float | None
    verdict: str | None
    """worse | better | equivalent | undecided | within noise | too few runs | baseline."""
    values: list[float]
    """The measured repetitions' values (warm-ups excluded), in repetition order."""


class ClaimRow(_Part):
    """One claim of the studies judged on this run, for one environment (or none: why); the
    report's "The studies on this host" (docs/studies.md)."""

    id: str
    study: str
    year: int | None
    url: str
    where: str  # the table or figure in the source
    finding: str
    source_figure: str
    source_ratio: float | None  # the source's own ratio, where it printed one
    relation: str
    environment: str
    baseline: str
    workload: str
    point: str
    metric: str
    unit: str
    absolute: bool  # on the metric's own value, not a ratio
    value: float | None  # this host's ratio (absolute: geometric mean of the values)
    low: float | None  # its 95% confidence sequence (None: unbounded, or not measured)
    high: float | None
    pairs: int
    outcome: str  # holds, does not hold, undecided, not measurable here
    why: str
    more_pairs: int | None  # undecided: the pairs in all that would decide it
    gate: bool
    conditions: str
    file: str  # the claims file and line


class LayerRatio(_Part):
    """What one setting that differs between two environments did to one metric."""

    axis: str
    before: str
    after: str
    before_environment: str
    after_environment: str
    workload: str
    params: str
    metric: str
    ratio: float
    ci_low: float | None  # the 95% confidence sequence on the ratio (None: unbounded)
    ci_high: float | None
    verdict: str  # worse, better, equivalent or undecided (stored before 2026-11-29: the
    # bootstrap interval's words)
    pairs: int | None = None  # rounds both environments ran
    margin: float | None = None  # the row's equivalence margin, a fraction


class Failure(_Part):
    environment: str
    workload: str
    params: str
    repetition: int
    warmup: bool
    reason: str


class EnvironmentCpu(_Part):
    """CPU seconds per run of an environment's own host processes at one point."""

    environment: str
    workload: str
    params: str
    n: int
    mean_s: float
    sd_s: float
    by_program_mean_s: dict[str, float]


class CostPerUnit(_Part):
    """CPU seconds per unit of work, means over the watched runs."""

    unit: str
    inside_cpu_s: float
    hidden_cpu_s: float
    total_cpu_s: float
    total_sd_cpu_s: float
    loadgen_cpu_s: float | None
    """Null for a workload without a load generator."""


class SuspectedLimiter(_Part):
    kind: Limiter
    words: str
    evidence: list[str]


class Explained(_Part):
    environment: str
    workload: str
    params: str
    watched_runs: int
    cost_per_unit: CostPerUnit | None
    limiter: SuspectedLimiter


class Outlier(_Part):
    """A value the modified z-score flags; kept in every result and figure."""

    environment: str
    workload: str
    params: str
    metric: str
    repetition: int
    value: float
    modified_z: float


class NoiseFloor(_Part):
    aa_environment: str | None
    workload: str
    params: str
    metric: str
    floor: float
    """The difference the A/A run showed between identical environments, a fraction."""


class NotApplicable(_Part):
    environment: str
    workload: str
    params: str
    reason: str
    metric: str | None = None
    """The one metric of the point that was not measured there; absent: the whole point."""


class VerdictRatio(_Part):
    """One headline ratio's sequential verdict."""

    environment: str
    workload: str
    params: str
    metric: str
    verdict: Verdict
    ratio: float | None
    low: float | None
    """95% confidence sequence on the ratio."""
    high: float | None
    margin: float
    """The equivalence margin, a fraction."""
    margin_source: str
    pairs: int
    projected_pairs: int | None
    reason: str
    """Why undecided; empty when decided."""
    sd: float | None = None
    """Standard deviation of the paired log ratios (None below 2 pairs)."""
    lag1: float | None = None
    """Lag-1 autocorrelation of the paired log ratios in round order (None below 4 pairs)."""
    borrowed_dof: float = 0.0
    """Degrees of freedom of spread borrowed from this host's stored runs (0: none)."""
    borrowed_ss: float = 0.0
    """Their centred sum of squares of log ratios."""
    borrowed_from: str = ""
    """Where the borrowed spread came from, in words."""
    borrowed_runs: list[str] = []
    """The stored runs of this host it came from, newest first (empty before isotax kept
    them, and where nothing was borrowed)."""
    prior_g: float = PRIOR_G
    """The width of the confidence sequence's mixture (chosen from this host's stored runs of
    the point; 10 without them)."""


class Verdicts(_Part):
    decided: int
    total: int
    counts: dict[str, int]
    """worse / better / equivalent / undecided -> how many."""
    method: str
    ratios: list[VerdictRatio]


class Warmup(_Part):
    """A warm-up's headline value against its point's measured runs."""

    environment: str
    workload: str
    params: str
    metric: str
    warmup: float
    mean: float
    sd: float
    n: int
    ratio: float
    differed: bool


class Phases(_Part):
    """Where the run's wall time went."""

    wall_s: float
    report_s: float | None
    seconds: dict[str, float]
    """Phase -> seconds."""
    workload_share: float
    overhead_share: float
    overhead_target: float


class LatencyCdf(_Part):
    """A latency CDF pooled over a point's repetitions."""

    environment: str
    workload: str
    params: str
    metric: str
    label: str
    runs: int
    cdf_us: list[CdfPoint]
    """[µs, cumulative fraction] pairs."""


class ResultsDocument(_Part):
    """isotax's results.json: one run's whole report, values included."""

    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, title="isotax results.json",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema",
                           "$id": SCHEMA_ID})

    format_version: Annotated[int, AfterValidator(_this_version),
                              Field(json_schema_extra={"const": FORMAT_VERSION})]
    """model.FORMAT_VERSION of the isotax that wrote the document."""
    run: Run
    host: dict[str, Any]
    """The host fingerprint the run recorded."""
    versions: dict[str, Any] | None
    """What isotax ran with, recorded beside the fingerprint (isotax.host.facts.versions): Python,
    every Python package of isotax's dependency closure, the host tools' first version lines;
    null for a run recorded before isotax kept them."""
    plan_toml: str
    """The exact plan the run used."""
    baseline: str
    environments: list[Environment]
    results: list[Result]
    layers: list[LayerRatio]
    failures: list[Failure]
    environment_cpu: list[EnvironmentCpu]
    explained: list[Explained]
    outliers: list[Outlier]
    noise_floor: list[NoiseFloor]
    not_applicable: list[NotApplicable]
    verdicts: Verdicts | None
    """Null for a run without headline verdicts."""
    sequential: dict[str, Any] | None
    """How the added rounds ended, as the runner recorded it (plan [verdicts]); null without."""
    warmups: list[Warmup]
    phases: Phases | None
    """Null for a run recorded before isotax measured its phases."""
    latency_cdfs: list[LatencyCdf]
    warnings: list[str]
    claims: list[ClaimRow] = []
    """The studies' claims judged on this run (the report's section); empty where none
    applies to its environments and points."""


def document(doc: dict[str, Any]) -> dict[str, Any]:
    """doc passed through the model: checked (a missing, extra or mistyped key raises
    pydantic.ValidationError) and dumped in the model's key order, numbers as the schema
    types them."""
    return ResultsDocument.model_validate(doc).model_dump()


def schema() -> dict[str, Any]:
    """The JSON Schema of results.json, as the models generate it ($schema and $id first,
    where a reader of the file looks for them)."""
    generated = ResultsDocument.model_json_schema(mode="serialization")
    head = {k: generated.pop(k) for k in ("$schema", "$id")}
    return {**head, **generated}


def schema_text() -> str:
    """The schema as checked in: indented, keys in generation order, UTF-8."""
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"
