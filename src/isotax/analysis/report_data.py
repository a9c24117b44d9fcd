"""From a stored run to what a report shows: summaries, ratios, failures and warnings.

The renderers in report/ only render this; all arithmetic happens here and in stats.py.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from isotax.analysis import ebh, sequential, verdicts
from isotax.analysis.attribution import Layer, single_layer_pairs
from isotax.analysis.explain import Explained, explain
from isotax.analysis.limiter import Limiter
from isotax.analysis.margins import Margin, RowKey, margins_for
from isotax.analysis.report_warnings import HIGH_CV, HIGH_LAG1, ReportWarning, Warned
from isotax.analysis.sequential import Progress, RatioState
from isotax.analysis.stats import Ratio, Summary, aa_noise_floor, outliers, ratio, summarize
from isotax.analysis.verdicts import MIN_MARGIN, PRIOR_G, Borrowed, RatioVerdict, Verdict
from isotax.analysis.warmups import WarmupCheck
from isotax.analysis.warmups import check as check_warmups
from isotax.host.facts.description import parity_problems
from isotax.model import NOT_MEASURED, CellKey, CellStatus, RunStatus
from isotax.parsers import distributions
from isotax.plan import PlanError, StoredPlan, parse_plan, read_stored_plan
from isotax.protocols import figure_hints, headline_metric
from isotax.store.base import CellRecord, EnvRecord, RunRecord, Store
from isotax.store.run_meta import ConcurrentRun, DeathMeta, ImageMeta, RunMeta
from isotax.telemetry import envcpu


@dataclass(frozen=True)
class Row:
    workload: str
    params_key: str
    metric: str
    unit: str
    higher_is_better: bool


@dataclass(frozen=True)
class Cell:
    values: tuple[float, ...]
    summary: Summary
    ratio: Ratio | None  # None for the baseline itself or when the baseline has no values


@dataclass(frozen=True)
class EnvCpu:
    """CPU-s per run of an environment's own host processes at one workload point."""

    summary: Summary
    by_program: dict[str, float]  # program -> mean CPU-s per run, largest first


CdfKey = tuple[str, str, str, str]  # (workload, params_key, metric, label)
CDF_SUFFIX = "_cdf_us"  # a sample label holding a latency CDF in µs (isotax.parsers.distributions)


@dataclass
class ReportData:
    run: RunRecord
    plan: StoredPlan  # the run's plan, typed, with the model's defaults (plan.read_stored_plan)
    baseline: str
    environments: list[EnvRecord]
    columns: list[str]  # environments with results, baseline first
    rows: list[Row]
    cells: dict[tuple[Row, str], Cell]
    failures: list[CellRecord]
    # Per workload: the parameters every point shares (shown once), and per parameters key
    # the ones that vary (the sweep axes, shown in each row).
    common_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    sweep_label: dict[tuple[str, str], str] = field(default_factory=dict)
    # (workload, params_key) -> the point's parameters, typed as stored: results.csv gives
    # each its own column (the params_key string packs them for grouping, not for reading).
    point_params: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # (environment, workload, params_key) -> the CPU the environment's own host processes
    # used per run (envcpu.METRIC), and per program name its mean per run.
    env_cpu: dict[tuple[str, str, str], EnvCpu] = field(default_factory=dict)
    # Values flagged by the modified z-score, kept in every figure: (row, environment,
    # repetition, value, z).
    outliers: list[tuple[Row, str, int, float, float]] = field(default_factory=list)
    # Per row, the noise floor the A/A run showed (plan `aa`): a fraction, e.g. 0.03.
    noise_floor: dict[Row, float] = field(default_factory=dict)
    aa_env: str | None = None
    # (environment, workload, params_key) -> why that point does not apply there ("n/a").
    not_applicable: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # (environment, workload, params_key, metric) -> why a passing point could not measure
    # that one metric there (model.NOT_MEASURED): the metric alone is n/a.
    not_measured: dict[tuple[str, str, str, str], str] = field(default_factory=dict)
    # Pairs of environments that differ in one setting, and per metric what that change did.
    layers: list[Layer] = field(default_factory=list)
    layer_ratios: dict[tuple[Layer, Row], RatioVerdict] = field(default_factory=dict)
    # Every ratio to the baseline that is not a headline, judged on its round pairs (the gate
    # reads these, so the gate and the report word a ratio alike); each row's values by round.
    other_verdicts: dict[tuple[Row, str], RatioVerdict] = field(default_factory=dict)
    rounds: dict[tuple[Row, str], dict[int, float]] = field(default_factory=dict)
    # Facts the runner decided during the run (store.run_meta), typed per key (.sequential).
    meta: RunMeta = field(default_factory=lambda: RunMeta({}))
    # Every headline ratio's verdict, from the stored cells (isotax.analysis.sequential).
    sequential: Progress | None = None
    # Verdicts that differ from the ones the run ended with ("runc rr ...: worse -> undecided").
    rejudged: list[str] = field(default_factory=list)
    # The worse/better verdicts e-BH keeps at 5% FDR across the run's ratios (analysis.ebh).
    ebh_kept: list[RatioState] = field(default_factory=list)
    # Per environment x warmed-up point: its warm-up against its measured values.
    warmups: list[WarmupCheck] = field(default_factory=list)
    # (environment, workload, params_key) -> CPU per unit of work and the suspected limiter,
    # from the telemetry stored with each measured repetition (isotax.analysis.explain).
    explained: dict[tuple[str, str, str], Explained] = field(default_factory=dict)
    unwatched: int = 0  # measured OK cells without telemetry (older runs)
    # environment -> the memory-vs-instances curve (instances, total MiB, ...) of the first
    # measured run of a workload that draws one (density: FigureHints.curve), for the figure.
    density_curves: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Latency CDFs the tools recorded (fio's histogram, sockperf's every round trip), pooled
    # over the repetitions: (workload, params_key, metric, label) -> environment -> CDF.
    latency_cdfs: dict[CdfKey, dict[str, distributions.Cdf]] = field(default_factory=dict)
    cdf_runs: dict[CdfKey, dict[str, int]] = field(default_factory=dict)

    def asked_ratios(self) -> list[RatioState]:
        """The headline ratios the run asks about: all but the A/A canary's (whose verdicts
        say whether the host behaved, not what an environment costs)."""
        seq = self.sequential
        return [] if seq is None else [r for r in seq.ratios
                                       if r.environment != self.plan.aa_name]

    def env(self, name: str) -> EnvRecord | None:
        return next((e for e in self.environments if e.name == name), None)

    def emulated(self, name: str) -> bool:
        e = self.env(name)
        return bool(e and e.describe.facts.emulated)

    def na_reason(self, env: str, row: Row) -> str | None:
        """Why row's point (or its metric alone) does not apply to env, or None."""
        return (self.not_applicable.get((env, row.workload, row.params_key))
                or self.not_measured.get((env, row.workload, row.params_key, row.metric)))

    def workloads(self) -> list[str]:
        """The run's workloads with results, in row order (the plan's)."""
        return list(dict.fromkeys(r.workload for r in self.rows))

    def headline_rows(self) -> list[Row]:
        """Each workload point's headline metric (the one its workload declares, else its
        first row), in row order."""
        metrics: dict[tuple[str, str], list[str]] = defaultdict(list)
        for r in self.rows:
            metrics[(r.workload, r.params_key)].append(r.metric)
        heads = {k: headline_metric(k[0], v) for k, v in metrics.items()}
        return [r for r in self.rows if heads[(r.workload, r.params_key)] == r.metric]

    def in_row_order(self, points: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """(workload, params_key) points, once each, in the order of the result rows."""
        order = {(r.workload, r.params_key): i for i, r in enumerate(self.rows)}
        return sorted(dict.fromkeys(points), key=lambda p: order.get(p, 1 << 30))

    def label(self, name: str) -> str:
        return f"{name} (emulated)" if self.emulated(name) else name

    def cell(self, env: str, workload: str, params_key: str, metric: str) -> Cell | None:
        """The cell of one metric of one point in one environment, if measured."""
        row = self._row_index.get((workload, params_key, metric))
        return self.cells.get((row, env)) if row is not None else None

    @functools.cached_property
    def _row_index(self) -> dict[tuple[str, str, str], Row]:
        # Built once: the figures look cells up by name for every environment and point.
        return {(r.workload, r.params_key, r.metric): r for r in self.rows}


def analyze(store: Store, run_id: str) -> ReportData:
    run = store.get_run(run_id)
    plan = read_stored_plan(run.plan_toml)
    baseline = plan.baseline
    envs = store.environments(run.id)
    records = store.cells(run.id)
    measured = [c for c in records if not c.key.warmup]
    values: dict[tuple[Row, str], list[float]] = defaultdict(list)
    reps: dict[tuple[Row, str], list[int]] = defaultdict(list)  # each value's repetition
    rows: list[Row] = []
    env_cpu: dict[tuple[str, str, str], list[tuple[float, Mapping[str, Any]]]] = \
        defaultdict(list)
    blas: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for c in measured:
        if c.status is not CellStatus.OK:
            continue
        for s in c.samples:
            if s.labels.get("blas_core"):
                blas[c.key.environment][str(s.labels["blas_core"])].add(c.key.workload)
            if s.metric == envcpu.METRIC:  # a cost of the environment, shown on its own
                env_cpu[(c.key.environment, c.key.workload, c.key.params_key)].append(
                    (s.value, s.labels.get("by_program", {})))
                continue
            row = Row(c.key.workload, c.key.params_key, s.metric, s.unit, s.higher_is_better)
            if row not in rows:
                rows.append(row)
            values[(row, c.key.environment)].append(s.value)
            reps[(row, c.key.environment)].append(c.key.repetition)
    # Rows follow the plan: its order of workloads, each one's points in sweep order
    # (threads 1, 2, 4, 16, not as text), then the order metrics first appeared.
    wl_order = list(plan.workload_names)
    points = _plan_points(run.plan_toml)
    rows.sort(key=lambda r: (wl_order.index(r.workload) if r.workload in wl_order else 1 << 30,
                             points.get((r.workload, r.params_key), 1 << 30)))
    common, sweep = _split_params(measured)
    common = dict(sorted(common.items(), key=lambda kv: wl_order.index(kv[0])
                         if kv[0] in wl_order else 1 << 30))
    order = [e.name for e in envs if e.available]
    columns = [baseline] + [n for n in order if n != baseline]
    cells: dict[tuple[Row, str], Cell] = {}
    for (row, env), vals in values.items():
        base_vals = values.get((row, baseline))
        r = None
        # A baseline of zero (e.g. no errors natively) has no ratio: the mean stands alone.
        if env != baseline and base_vals and any(base_vals):
            r = ratio(vals, base_vals, row.higher_is_better, seed=int(run.seed))
        cells[(row, env)] = Cell(tuple(vals), summarize(vals), r)
    failures = [c for c in records if c.status is CellStatus.FAILED]
    data = ReportData(run, plan, baseline, envs, columns, rows, cells, failures, common, sweep)
    data.point_params = {(c.key.workload, c.key.params_key): dict(c.key.params)
                         for c in measured}
    data.env_cpu = {k: _env_cpu(v) for k, v in env_cpu.items()}
    data.meta = RunMeta(store.run_meta(run.id))
    for c in measured:
        # A workload that draws a memory-vs-instances curve says which label carries it.
        label = figure_hints(c.key.workload).curve
        curve = next((s.labels.get(label) for s in c.samples
                      if label and s.labels.get(label)), None)
        if c.status is CellStatus.OK and curve:
            data.density_curves.setdefault(c.key.environment, list(curve))
    _collect_cdfs(data, measured)
    watched = store.telemetry(run.id)
    data.explained = explain(records, watched)
    data.unwatched = sum(1 for c in measured if c.status is CellStatus.OK and c.id not in watched)
    if plan.canary:
        _apply_noise_floor(data, plan.canary)
    for c in measured:
        if c.status is CellStatus.NOT_APPLICABLE:
            data.not_applicable.setdefault(
                (c.key.environment, c.key.workload, c.key.params_key), c.reason)
        for s in c.samples:
            missing = s.labels.get(NOT_MEASURED)
            for metric, why in (missing.items() if isinstance(missing, Mapping) else ()):
                data.not_measured.setdefault(
                    (c.key.environment, c.key.workload, c.key.params_key, str(metric)),
                    str(why))
    judge = _apply_verdicts(data, store, records)
    # Each row's values by round, once: the layers' pairs and the other ratios' are these.
    data.rounds = rounds = {k: verdicts.by_round(v, reps[k]) for k, v in values.items()}

    def verdict(row: Row, env: str, before: str) -> RatioVerdict | None:
        """env over `before` on the rounds both ran, against the row's margin for env."""
        margin = judge((row.workload, row.params_key, row.metric), env).value
        return verdicts.decide_by_round(rounds.get((row, env), {}),
                                        rounds.get((row, before), {}), row.higher_is_better,
                                        margin)

    data.layers = single_layer_pairs(list(plan.environments), columns, baseline)
    for layer in data.layers:
        for row in rows:
            if (lv := verdict(row, layer.after_env, layer.before_env)) is not None:
                data.layer_ratios[(layer, row)] = lv
    # Every other ratio to the baseline (not a headline: not chased by added rounds) judged
    # by the same machinery on the rounds it has, so no bootstrap interval decides a word.
    for (row, env), cell in list(data.cells.items()):
        if cell.ratio is not None and not cell.ratio.decided:
            if (v := verdict(row, env, baseline)) is not None:
                data.other_verdicts[(row, env)] = v
            data.cells[(row, env)] = replace(cell, ratio=replace(
                cell.ratio, decided=v.verdict.value if v else "undecided"))
    data.warmups = check_warmups(records)
    for (row, env), vals in values.items():
        for i, z in outliers(vals):
            data.outliers.append((row, env, reps[(row, env)][i], vals[i], z))
    data.warnings = [*_warnings(data), *_blas_warnings(blas, baseline)]
    return data


def _apply_verdicts(d: ReportData, store: Store, records: Sequence[CellRecord]
                    ) -> Callable[[RowKey, str], Margin]:
    """Every headline ratio's sequential verdict (isotax.analysis.sequential), kept in
    d.sequential and on the headline cells' ratios: judged with the margins and borrowed
    spreads the run itself used (stored in run_meta "sequential"), so a report rendered later
    shows the verdicts the run ended with; a run stored before they were kept is judged with
    today's margins. Verdicts that still differ (cells added since) are in d.rejudged.
    Returns the margins it judged with, which the layers' verdicts use too."""
    settings = d.plan.verdicts
    aa = d.plan.canary
    fixed = d.plan.repetitions
    cap = max(fixed, settings.max_repetitions or 0)
    meta = d.meta.sequential
    kept = {(r.environment, r.workload, r.params): r for r in (meta.ratios if meta else [])
            if r.borrowed_dof is not None and r.margin is not None}
    lent: dict[tuple[str, str, str], Borrowed] = {}
    if kept:
        def rules(row: tuple[str, str, str], env: str) -> Margin:
            r = kept.get((env, row[0], row[1]))
            return (Margin(r.margin, r.margin_source) if r is not None and r.margin is not None
                    else Margin(MIN_MARGIN, "minimum (not judged by the run)"))
        lent = {k: Borrowed(r.borrowed_dof or 0.0, r.borrowed_ss or 0.0, r.borrowed_from,
                            g=PRIOR_G if r.prior_g is None else r.prior_g,
                            runs=tuple(r.borrowed_runs))
                for k, r in kept.items()}
        judge: Callable[[RowKey, str], Margin] = rules
    else:
        try:
            judge = margins_for(store, d.run.id, settings.margin, d.baseline, aa, records)
        except (ValueError, TypeError):  # a stored plan this version cannot read: the minimum
            judge = margins_for(store, d.run.id, MIN_MARGIN, d.baseline, None, records)
    d.sequential = sequential.assess(records, d.baseline, judge, fixed, cap,
                                     settings.confidence, borrowed=lent)
    d.ebh_kept = ebh.kept(d.sequential.ratios)
    for st in d.sequential.ratios:
        was = kept.get(st.point)
        if was is not None and was.verdict != st.verdict.verdict.value:
            d.rejudged.append(f"{st.environment} {st.workload} {st.params_key}: "
                              f"{was.verdict} -> {st.verdict.verdict.value}")
        row = d._row_index.get((st.workload, st.params_key, st.metric))
        if row is None:
            continue
        cell = d.cells.get((row, st.environment))
        if cell is not None and cell.ratio is not None:
            d.cells[(row, st.environment)] = replace(
                cell, ratio=replace(cell.ratio, decided=st.verdict.verdict.value))
    return judge


def _collect_cdfs(data: ReportData, measured: Sequence[CellRecord]) -> None:
    """Every valid `*_cdf_us` label of the OK measured cells, pooled per point and environment
    (each repetition weighs the same)."""
    runs: dict[CdfKey, dict[str, list[distributions.Cdf]]] = defaultdict(lambda: defaultdict(list))
    for c in measured:
        if c.status is not CellStatus.OK:
            continue
        for s in c.samples:
            for label, value in s.labels.items():
                if label.endswith(CDF_SUFFIX) and distributions.valid(value):
                    runs[(c.key.workload, c.key.params_key, s.metric, label)][
                        c.key.environment].append(value)
    points = data.in_row_order((k[0], k[1]) for k in runs)
    for key in sorted(runs, key=lambda k: (points.index((k[0], k[1])), k[2], k[3])):
        by_env = runs[key]
        envs = [e for e in data.columns if e in by_env]
        data.latency_cdfs[key] = {e: distributions.pooled(by_env[e]) for e in envs}
        data.cdf_runs[key] = {e: len(by_env[e]) for e in envs}


def _apply_noise_floor(d: ReportData, aa_env: str) -> None:
    """Each row's noise floor from the baseline's A/A copy, and every other environment's
    ratio judged against it: a difference no larger than A/A shows is within noise."""
    d.aa_env = aa_env
    for row in d.rows:
        aa = d.cells.get((row, aa_env))
        if aa is None or aa.ratio is None:
            continue
        floor = aa_noise_floor(aa.ratio)
        if math.isnan(floor):
            continue
        d.noise_floor[row] = floor
        for env in d.columns:
            cell = d.cells.get((row, env))
            if env in (d.baseline, aa_env) or cell is None or cell.ratio is None:
                continue
            d.cells[(row, env)] = replace(cell, ratio=replace(cell.ratio, noise_floor=floor))


def _env_cpu(runs: list[tuple[float, Mapping[str, Any]]]) -> EnvCpu:
    programs: dict[str, float] = defaultdict(float)
    for _, by_program in runs:
        for name, secs in by_program.items():
            programs[name] += float(secs) / len(runs)
    return EnvCpu(summarize([v for v, _ in runs]),
                  dict(sorted(programs.items(), key=lambda kv: -kv[1])))


def _plan_points(plan_toml: str) -> dict[tuple[str, str], int]:
    """(workload, params_key) -> its position in the plan's own order of points; empty when
    the stored plan no longer parses (e.g. a workload since removed): rows then keep the
    order they appeared in."""
    try:
        plan = parse_plan(plan_toml)
    except PlanError:
        return {}
    out: dict[tuple[str, str], int] = {}
    for w in plan.workloads:
        for p in w.combinations():
            out.setdefault((w.name, CellKey("", w.name, p, 0).params_key), len(out))
    return out


def _split_params(cells: list[CellRecord]
                  ) -> tuple[dict[str, dict[str, Any]], dict[tuple[str, str], str]]:
    points: dict[str, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for c in cells:
        points[c.key.workload][c.key.params_key] = c.key.params
    common: dict[str, dict[str, Any]] = {}
    sweep: dict[tuple[str, str], str] = {}
    for wl, by_key in points.items():
        names = sorted({k for p in by_key.values() for k in p})
        varying = [k for k in names if len({repr(p.get(k)) for p in by_key.values()}) > 1]
        first = next(iter(by_key.values()))
        common[wl] = {k: first.get(k) for k in names if k not in varying}
        sweep.update({(wl, key): sweep_words(p, common[wl]) for key, p in by_key.items()})
    return common, sweep


def sweep_words(params: Mapping[str, Any], common: Mapping[str, Any], leave_out: str = "") -> str:
    """A point's parameters its workload's points do not share (common), but leave_out, as
    "k=v,k=v" by name: its sweep label. Pure."""
    return ",".join(f"{k}={params[k]}" for k in sorted(params)
                    if k not in common and k != leave_out)


def _blas_warnings(blas: Mapping[str, Mapping[str, set[str]]], baseline: str
                   ) -> list[Warned]:
    """Where OpenBLAS chose other kernels than in the baseline (it picks them by the CPU it
    is shown: a VM's CPU model decides which HPL and DGEMM code runs)."""
    base = blas.get(baseline, {})
    if len(base) != 1:
        return []
    (base_core,) = base
    out = []
    for env, cores in blas.items():
        for core, workloads in cores.items():
            if env != baseline and core != base_core:
                out.append(ReportWarning.BLAS_CORE.say(
                    core=core, env=env, base_core=base_core, base=baseline,
                    workloads=", ".join(sorted(workloads))))
    return out


def _concurrent(meta: Mapping[str, ConcurrentRun]) -> list[Warned]:
    """One warning per environment and other run that measured while its cells ran (the
    runner's "concurrent" meta: {other run: its pid and the cells, by ident})."""
    out = []
    for other, entry in sorted(meta.items()):
        by_env: dict[str, list[str]] = defaultdict(list)
        for ident in entry.cells:
            env, workload = ident.split("|")[:2]
            by_env[env].append(workload)
        for env, workloads in sorted(by_env.items()):
            names = list(dict.fromkeys(workloads))
            out.append(ReportWarning.CONCURRENT.say(
                env=env, count=len(workloads), other=other,
                pid=entry.pid if entry.pid is not None else "?",
                points=", ".join(names[:4]) + (f" and {len(names) - 4} more"
                                               if len(names) > 4 else "")))
    return out


def _died(records: Sequence[DeathMeta]) -> list[Warned]:
    """One warning per environment that died mid-run, from the runner's "restarts" meta (a
    list of deaths: environment, why, outcome)."""
    seen: dict[str, list[DeathMeta]] = defaultdict(list)
    for r in records:
        seen[r.environment].append(r)

    def times(n: int) -> str:
        return "once" if n == 1 else f"{n} times"

    out = []
    for env, deaths in seen.items():
        restarted = sum(r.outcome == "restarted" for r in deaths)
        ended = [r.outcome for r in deaths
                 if r.outcome.startswith(("given up", "restart failed"))]
        outcome = (f"it was restarted {times(restarted)}" if restarted
                   else "it was not restarted") + (
            f", then {ended[-1]}: its remaining cells failed" if ended else "")
        out.append(ReportWarning.DIED.say(env=env, deaths=times(len(deaths)),
                                          why=deaths[-1].why, outcome=outcome))
    return out


def version_fix(image: ImageMeta | None) -> str:
    """The fix a tool version mismatch names: where the image is another Debian release than
    the host's, the distribution choice; else the host's package version."""
    if image is not None and image.distribution and image.host_distribution != image.distribution:
        host = image.host_distribution
        choose = (f'[image] distribution = "{host}" in the plan, or none: the host\'s release '
                  "is the default" if host else
                  "run on a host of a release isotax builds the image from")
        return (f"the image is {image.words()} and the host {image.host_os or 'another release'}"
                f"; for the same bits build the image from the host's release ({choose}); or "
                "install the image's package version on the host")
    return "install the same package version on the host as in the image"


def _warnings(d: ReportData) -> list[Warned]:
    out: list[Warned] = []
    if d.run.status != RunStatus.COMPLETE:
        out.append(ReportWarning.INCOMPLETE.say(status=d.run.status, run=d.run.id))
    for e in d.environments:
        if not e.available:
            out.append(ReportWarning.UNAVAILABLE.say(env=e.name, reason=e.reason))
        elif d.emulated(e.name):
            out.append(ReportWarning.EMULATED.say(env=e.name))
    out += _died(d.meta.restarts)
    base = d.env(d.baseline)
    if base is not None:
        fix = version_fix(d.meta.image)
        for e in d.environments:
            if e.name == d.baseline or not e.available:
                continue
            for tool, version in base.tools.items():
                other = e.tools.get(tool)
                if other is not None and other != version:
                    out.append(ReportWarning.VERSION_MISMATCH.say(
                        tool=tool, env=e.name, other=other, base=d.baseline, version=version,
                        fix=fix))
    pinned = [str(e.get("name")) for e in d.plan.environments
              if e.get("numa_node") is not None]
    if pinned and int(d.run.host.get("numa_nodes", 1)) == 1:
        out.append(ReportWarning.NUMA_SINGLE_NODE.say(", ".join(pinned), envs=", ".join(pinned)))
    described = {e.name: e.describe for e in d.environments if e.available}
    out += [ReportWarning.PARITY.say(env, problem=p)
            for env, p in parity_problems(described, d.baseline)]
    # With added rounds (max_repetitions above repetitions) the fixed rounds are a minimum:
    # every undecided ratio gets a second pair (sequential.MIN_PAIRS), so one fixed round
    # is a design, not too few.
    reps = max(d.plan.repetitions, d.plan.verdicts.max_repetitions or 0)
    if reps < 2:
        out.append(ReportWarning.FEW_REPETITIONS.say(n=reps))
    failed: dict[str, int] = defaultdict(int)
    for c in d.failures:
        failed[c.key.environment] += 1
    for env, n in failed.items():
        out.append(ReportWarning.FAILURES.say(count=n, env=env))
    flagged: dict[str, list[str]] = defaultdict(list)
    for row, env, _, _, _ in d.outliers:
        flagged[env].append(f"{row.workload} {row.metric}")
    for env, where in flagged.items():
        names = list(dict.fromkeys(where))
        out.append(ReportWarning.OUTLIERS.say(
            env=env, count=len(where),
            metrics=", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4
                                            else "")))
    # One high-variance warning per environment (its worst metric and how many more), not
    # one per cell: a noisy host would otherwise bury every other warning.
    noisy: dict[str, list[tuple[float, Row]]] = defaultdict(list)
    for (row, env), cell in d.cells.items():
        if cell.summary.n >= 2 and cell.summary.cv > HIGH_CV:
            noisy[env].append((cell.summary.cv, row))
    for env, found in noisy.items():
        cv, row = max(found, key=lambda x: x[0])
        out.append(ReportWarning.HIGH_VARIANCE.say(
            env=env, count=len(found), workload=row.workload, metric=row.metric, cv=cv))
    out += _concurrent(d.meta.concurrent)
    forced = d.meta.fingerprint_forced
    if forced:
        out.append(ReportWarning.FINGERPRINT_FORCED.say(changes="; ".join(forced)))
    for (env, wl, pkey), ex in d.explained.items():
        if ex.limiter.limiter is Limiter.LOADGEN:
            point = f"{wl} {d.sweep_label.get((wl, pkey), '')}".strip()
            out.append(ReportWarning.LOADGEN_SATURATED.say(env=env, point=point,
                                                           words=ex.limiter.words))
    if d.unwatched:
        out.append(ReportWarning.NO_TELEMETRY.say(count=d.unwatched))
    asked = d.asked_ratios()
    undecided = sum(not r.verdict.verdict.decided for r in asked)
    if undecided:
        out.append(ReportWarning.UNDECIDED.say(undecided=undecided, total=len(asked)))
    out += _verdict_warnings(d)
    return out


def _verdict_warnings(d: ReportData) -> list[Warned]:
    """The canary that did not come out equal, verdicts judged again since the run, and
    ratios whose pairs are correlated."""
    out: list[Warned] = []
    seq = d.sequential
    if seq is None:
        return out
    aa = d.plan.aa_name
    off = [r for r in seq.ratios if r.environment == aa
           and r.verdict.verdict in (Verdict.WORSE, Verdict.BETTER)]
    if off:
        out.append(ReportWarning.CANARY.say(
            env=aa, verdict=" / ".join(sorted({r.verdict.verdict.value for r in off})),
            points=", ".join(f"{r.workload} {r.params_key}" for r in off)))
    if d.rejudged:
        out.append(ReportWarning.REJUDGED.say(
            count=len(d.rejudged), why="cells were added or changed since; "
            + "; ".join(d.rejudged[:3]) + (" ..." if len(d.rejudged) > 3 else "")))
    lagged: dict[str, list[RatioState]] = defaultdict(list)
    for r in seq.ratios:
        if r.lag1 == r.lag1 and r.lag1 > HIGH_LAG1:
            lagged[r.environment].append(r)
    for env, found in lagged.items():
        worst = max(found, key=lambda r: r.lag1)
        out.append(ReportWarning.CORRELATED_PAIRS.say(
            env=env, count=len(found), limit=HIGH_LAG1, lag1=worst.lag1,
            point=f"{worst.workload} {worst.params_key}"))
    return out
