"""The parts of benchmarks/variance_components.py that its phases share with
benchmarks/interleave.py: the pure statistics of log values (spreads, autocorrelation and its
time scale, the intervals), a table row (Component), one measured run (Run), the time budget
and the bench that starts and measures the environments (Bench). A module of its own so that
variance_components imports interleave and interleave imports these, with no cycle."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIDENCE = 0.95
INV_E = 1 / math.e

# ------------------------------------------------------------------- pure statistics


def log_values(values: Sequence[float]) -> list[float]:
    """Natural logs of positive values; a value that is not positive is an error."""
    out = []
    for v in values:
        if not v > 0 or not math.isfinite(v):
            raise ValueError(f"a value must be positive and finite for its log: {v!r}")
        out.append(math.log(v))
    return out


def sd(xs: Sequence[float]) -> float:
    """Sample standard deviation (n - 1); nan below two values."""
    return statistics.stdev(xs) if len(xs) >= 2 else math.nan


def sd_log(values: Sequence[float]) -> float:
    """Standard deviation of the log values: about the coefficient of variation."""
    return sd(log_values(values))


def adjacent_spread(values: Sequence[float]) -> float:
    """sd(log x[i+1] / x[i]) / sqrt(2): the spread within a series with slow drift removed
    (equals sd_log for independent values; smaller when neighbours move together)."""
    lx = log_values(values)
    diffs = [b - a for a, b in itertools.pairwise(lx)]
    return sd(diffs) / math.sqrt(2)


def adjacent_df(n: int) -> float:
    """Approximate degrees of freedom of the adjacent spread of n independent normal values:
    the von Neumann mean square successive difference has variance sigma^4 (3n - 4)/(n - 1)^2
    against 2 sigma^4 / df for a chi-square variance, so df = 2 (n - 1)^2 / (3n - 4)."""
    if n < 3:
        return math.nan
    return 2 * (n - 1) ** 2 / (3 * n - 4)


def pair_log_ratios(env: Sequence[float], base: Sequence[float]) -> list[float]:
    """log(env[i] / base[i]) for each pair."""
    if len(env) != len(base):
        raise ValueError(f"{len(env)} values against {len(base)}: not pairs")
    return [a - b for a, b in zip(log_values(env), log_values(base), strict=True)]


def autocorrelation(xs: Sequence[float], lag: int) -> float:
    """The sample autocorrelation at `lag` (the usual biased estimator: lagged products over
    the whole series' sum of squares, both about the series mean); nan where undefined."""
    n = len(xs)
    if lag < 1 or n - lag < 2:
        return math.nan
    m = statistics.fmean(xs)
    den = sum((x - m) ** 2 for x in xs)
    if den == 0:
        return math.nan
    num = sum((xs[i] - m) * (xs[i + lag] - m) for i in range(n - lag))
    return num / den


def max_lag(n: int) -> int:
    """The largest lag worth estimating from n values (a quarter of them, Box and Jenkins)."""
    return max(1, n // 4)


@dataclass(frozen=True)
class TimeScale:
    """Where the autocorrelation first falls below 1/e: at `lag` (None: not within the lags
    estimated, up to `checked`), `seconds` = lag x spacing."""

    lag: int | None
    seconds: float | None
    checked: int
    spacing_s: float

    def words(self) -> str:
        if self.lag == 1:
            return f"below 1/e at lag 1 (< {self.spacing_s:.1f} s)"
        if self.lag is None:
            return (f"above 1/e up to lag {self.checked} "
                    f"(> {self.checked * self.spacing_s:.0f} s)")
        return f"below 1/e at lag {self.lag} (~{self.seconds:.0f} s)"


def time_scale(xs: Sequence[float], spacing_s: float, lags: int | None = None) -> TimeScale:
    """The first lag whose autocorrelation is below 1/e (or undefined: too few values), and
    its time in seconds given the mean spacing of the series."""
    top = lags if lags is not None else max_lag(len(xs))
    for lag in range(1, top + 1):
        r = autocorrelation(xs, lag)
        if math.isnan(r):
            return TimeScale(None, None, lag - 1, spacing_s)
        if r < INV_E:
            return TimeScale(lag, lag * spacing_s, top, spacing_s)
    return TimeScale(None, None, top, spacing_s)


def chi2_sd_interval(s: float, df: float, confidence: float = CONFIDENCE
                     ) -> tuple[float, float]:
    """The chi-square interval for a standard deviation s estimated with df degrees of
    freedom: sqrt(df s^2 / chi2_hi), sqrt(df s^2 / chi2_lo)."""
    from scipy import stats as sps

    if not (df > 0 and math.isfinite(s)):
        return math.nan, math.nan
    a = (1 - confidence) / 2
    lo = math.sqrt(df * s * s / float(sps.chi2.ppf(1 - a, df)))
    hi = math.sqrt(df * s * s / float(sps.chi2.ppf(a, df)))
    return lo, hi


def mean_interval(xs: Sequence[float], confidence: float = CONFIDENCE
                  ) -> tuple[float, float, float]:
    """(mean, low, high): the t interval for the mean; nan bounds below two values."""
    from scipy import stats as sps

    n = len(xs)
    if n == 0:
        return math.nan, math.nan, math.nan
    m = statistics.fmean(xs)
    if n < 2:
        return m, math.nan, math.nan
    half = float(sps.t.ppf((1 + confidence) / 2, n - 1)) * sd(xs) / math.sqrt(n)
    return m, m - half, m + half


def fisher_interval(r: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Fisher's z interval for a correlation from n pairs (nan below 4, or r undefined)."""
    from scipy import stats as sps

    if n < 4 or not math.isfinite(r):
        return math.nan, math.nan
    z = math.atanh(max(-0.999999, min(0.999999, r)))
    half = float(sps.norm.ppf((1 + confidence) / 2)) / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


def per_second_spread(s: float, seconds: float) -> float:
    """s x sqrt(seconds): the spread of a mean bought with one second of budget when each
    value costs `seconds` (lower is better; equal across lengths when the noise is white)."""
    return s * math.sqrt(seconds)


def lag_for_gap(times: Sequence[float], target_s: float, min_pairs: int) -> int:
    """The lag L (in series positions, times ascending) whose median gap times[i+L]-times[i]
    is nearest `target_s`, among the lags that leave at least min_pairs pairs; 0 when none
    but lag 0 does."""
    n = len(times)
    best, best_err = 0, math.inf
    for lag in range(0, n - min_pairs + 1):
        gaps = [times[i + lag] - times[i] for i in range(n - lag)]
        err = abs(statistics.median(gaps) - target_s)
        if err < best_err:
            best, best_err = lag, err
    return best


def balanced_blocks(levels: Sequence[Any], n: int, rng: random.Random) -> list[Any]:
    """n draws of levels, each block of len(levels) a shuffled copy: balanced, random order."""
    out: list[Any] = []
    while len(out) < n:
        block = list(levels)
        rng.shuffle(block)
        out.extend(block)
    return out[:n]


# ----------------------------------------------------------------------- components


@dataclass
class Component:
    """One row of the table: an estimate, its number of values and its 95% interval."""

    group: str
    name: str
    kind: str  # "sd" (log units), "mean" (log units), "r" (a correlation), "number", "note"
    n: int
    estimate: float
    low: float = math.nan
    high: float = math.nan
    note: str = ""

    def cells(self) -> tuple[str, str, str]:
        def f(x: float) -> str:
            if not math.isfinite(x):
                return "n/a"
            if self.kind in ("sd", "mean"):
                return f"{100 * x:+.2f}%" if self.kind == "mean" else f"{100 * x:.2f}%"
            if self.kind == "number":
                return f"{x:.2f}"
            return f"{x:+.2f}"

        if self.kind == "note":
            return "", "", ""
        interval = ("n/a" if not (math.isfinite(self.low) and math.isfinite(self.high))
                    else f"[{f(self.low)}, {f(self.high)}]")
        return f(self.estimate), interval, str(self.n)


def sd_row(group: str, name: str, xs: Sequence[float], note: str = "") -> Component:
    """The sd of values already in log units, with its chi-square interval."""
    s = sd(xs)
    lo, hi = chi2_sd_interval(s, len(xs) - 1)
    return Component(group, name, "sd", len(xs), s, lo, hi, note)


def per_second_row(group: str, name: str, row: Component, seconds: float) -> Component:
    """row's sd (and interval) as the spread of one second of budget (per_second_spread):
    what a design gives for the time it costs; the lowest wins."""
    return Component(group, name, "sd", row.n, per_second_spread(row.estimate, seconds),
                     per_second_spread(row.low, seconds), per_second_spread(row.high, seconds),
                     "the spread of one second of budget: the lowest wins")


def sd_log_row(group: str, name: str, values: Sequence[float], note: str = "") -> Component:
    return sd_row(group, name, log_values(values), note)


def adjacent_row(group: str, name: str, values: Sequence[float], note: str = "") -> Component:
    s = adjacent_spread(values) if len(values) >= 3 else math.nan
    lo, hi = chi2_sd_interval(s, adjacent_df(len(values)))
    return Component(group, name, "sd", len(values), s, lo, hi, note)


def mean_row(group: str, name: str, xs: Sequence[float], note: str = "") -> Component:
    m, lo, hi = mean_interval(xs)
    return Component(group, name, "mean", len(xs), m, lo, hi, note)


def acf_rows(group: str, name: str, xs: Sequence[float], times: Sequence[float]
             ) -> list[Component]:
    """Lag-1 autocorrelation (its interval by Fisher's z) and the time scale, and the
    autocorrelation at the further lags in the note."""
    n = len(xs)
    spacing = (times[-1] - times[0]) / (n - 1) if n >= 2 else math.nan
    r1 = autocorrelation(xs, 1)
    lo, hi = fisher_interval(r1, n - 1)
    ts = time_scale(xs, spacing)
    further = [f"lag {k} {autocorrelation(xs, k):+.2f}" for k in (2, 3, 5, 10)
               if k <= max_lag(n) and math.isfinite(autocorrelation(xs, k))]
    note = f"one step {spacing:.1f} s; time scale: {ts.words()}"
    if further:
        note += "; " + ", ".join(further)
    return [Component(group, f"{name}: lag-1 autocorrelation", "r", n, r1, lo, hi, note)]


# ----------------------------------------------------------------------- measuring


@dataclass
class Run:
    """One measured run: where, when (seconds since the start), its headline value."""

    phase: str
    env: str
    params: dict[str, Any]
    value: float
    t_start: float  # the cell's start (before its resume and telemetry)
    t_run: float  # just before workload.run
    t_end: float  # after workload.run and telemetry
    tags: dict[str, Any] = field(default_factory=dict)


class Budget:
    """The time budget: the end of the whole measurement and of the current phase."""

    def __init__(self, seconds: float) -> None:
        self.t0 = time.monotonic()
        self.end = self.t0 + seconds

    def now(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return self.end - time.monotonic()


class Bench:
    """The two started instances, the workload, and every run measured."""

    def __init__(self, args: argparse.Namespace, image: Any, workdir: Path,
                 log: Callable[[str], None]) -> None:
        from isotax import protocols

        self.args = args
        self.image = image
        self.workdir = workdir
        self.log = log
        self.cls = protocols.workloads()[args.workload]
        workload = self.cls()
        if isinstance(workload, protocols.LaunchingWorkload):
            # startup and density start their own instances: nothing here to pair.
            raise SystemExit(f"{args.workload} starts its own instances; this benchmark "
                             "measures a workload run in two started ones")
        self.workload = workload
        self.instances: dict[str, Any] = {}
        self.describe: dict[str, dict[str, Any]] = {}
        self.isolation: dict[str, Any] = {}  # what each kind declares itself (telemetry)
        self.paused: set[str] = set()
        self.prepared: set[tuple[str, str]] = set()
        self.loadgen: Any = None
        self.runs: list[Run] = []
        self.failures: list[str] = []
        self.budget = Budget(args.minutes * 60)
        self.telemetry_seconds: list[float] = []  # loadgen share per watched run, where any

    # -- environments --
    def start(self, name: str, kind: str, network: str) -> None:
        from isotax import protocols
        from isotax.protocols import EnvSpec

        env = protocols.environments()[kind]()
        avail = env.available()
        if not avail.ok:
            raise SystemExit(f"variance_components: {kind} is not available here: {avail}")
        spec = EnvSpec(name=name, kind=kind, image=self.image, workdir=self.workdir / name,
                       network=network)
        spec.workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        inst = env.start(spec)
        self.instances[name] = inst
        facts = inst.facts()
        self.describe[name] = facts.display()
        self.isolation[name] = facts.isolation or type(env).isolation
        self.log(f"{name} ({kind}, network {network}): ready in {time.monotonic() - t0:.2f} s")

    def stop_all(self) -> None:
        from isotax.run.interrupts import no_interrupts

        with no_interrupts():
            for name, inst in list(self.instances.items()):
                with contextlib.suppress(Exception):
                    inst.resume()
                try:
                    inst.stop()
                except Exception as e:  # teardown goes on whatever one step says
                    self.log(f"{name}: stop failed: {e}")
            self.instances.clear()

    def set_running(self, active: str, others_paused: bool) -> None:
        """`active` runs; every other instance paused (the runner's way) or running."""
        for name, inst in self.instances.items():
            want_paused = others_paused and name != active
            if want_paused and name not in self.paused:
                inst.pause()
                self.paused.add(name)
            elif not want_paused and name in self.paused:
                inst.resume()
                self.paused.discard(name)

    # -- the workload --
    def params(self, **over: Any) -> dict[str, Any]:
        base = {p.name: p.default for p in self.cls.params}
        return {**base, **self.args.params, **over}

    def prepare(self, name: str, params: Mapping[str, Any]) -> None:
        key = (name, json.dumps(params, sort_keys=True))
        if key in self.prepared:
            return
        t0 = time.monotonic()
        self.set_running(name, True)
        self.workload.prepare(self.instances[name], params, self.loadgen)
        self.prepared.add(key)
        self.log(f"{name}: prepared {param_words(params)} in {time.monotonic() - t0:.1f} s")
        self.measure("warmup", name, params, telemetry=False)  # one warm-up, as the plans do

    def measure(self, phase: str, name: str, params: Mapping[str, Any], *,
                telemetry: bool = True, others_paused: bool = True,
                **tags: Any) -> Run | None:
        """One run as the runner makes a cell: the others paused (or not), watched by
        telemetry (or not); its headline value, or None when it failed (kept in failures)."""
        from isotax.model import SanityError
        from isotax.protocols import ExecError, headline_metric
        from isotax.telemetry import observe

        inst = self.instances[name]
        t_start = self.budget.now()
        self.set_running(name, others_paused)
        watch: Any = (observe.observed(inst, self.isolation[name], self.loadgen,
                                       observe.Settings()) if telemetry
                      else contextlib.nullcontext(None))
        try:
            with watch as obs:
                t_run = self.budget.now()
                samples = self.workload.run(inst, params, self.loadgen)
        except (SanityError, ExecError, OSError, TimeoutError, ValueError, RuntimeError) as e:
            self.failures.append(f"{phase} {name}: {type(e).__name__}: {e}"[:300])
            if len(self.failures) >= 5:
                raise RuntimeError(f"5 runs failed; the last: {self.failures[-1]}") from e
            return None
        t_end = self.budget.now()
        want = headline_metric(self.cls.name, [s.metric for s in samples])
        value = next(s.value for s in samples if s.metric == want)
        if obs is not None and obs.summary is not None and obs.summary.loadgen is not None:
            s = obs.summary
            self.telemetry_seconds.append(s.loadgen.cpu_s / max(1e-9, s.duration_s * s.cpus))
        run = Run(phase, name, dict(params), value, t_start, t_run, t_end,
                  {"telemetry": telemetry, "others_paused": others_paused, **tags})
        if phase != "warmup":
            self.runs.append(run)
        return run

def param_words(params: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())
