"""Pure statistics: per-cell summaries and ratios to the baseline with bootstrap CIs.

Constants and their sources:
- 95% intervals of a mean use Student's t with n-1 degrees of freedom (the usual small-sample
  interval; the studies report 10-run means).
- Ratio intervals use the nonparametric bootstrap of the ratio of means, resampling each
  environment's repetitions independently (Efron & Tibshirani, "An Introduction to the
  Bootstrap", 1993, ch. 13), via scipy.stats.bootstrap with the percentile method: with the
  handful of repetitions a benchmark has, BCa's acceleration estimate is itself unstable.
- "Within noise": the ratio's 95% interval contains 1.0. (A per-host A/A noise floor refines
  this later; until then the interval is the only evidence.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 10_000


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    sd: float  # sample standard deviation (n-1); 0.0 when n == 1
    ci_low: float  # NaN when n < 2
    ci_high: float

    @property
    def cv(self) -> float:
        return self.sd / self.mean if self.mean else math.nan


def summarize(values: Sequence[float]) -> Summary:
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    if n == 0:
        raise ValueError("no values to summarize")
    mean = float(x.mean())
    if n < 2:
        return Summary(n, mean, 0.0, math.nan, math.nan)
    sd = float(x.std(ddof=1))
    half = float(sps.t.ppf((1 + CONFIDENCE) / 2, n - 1)) * sd / math.sqrt(n)
    return Summary(n, mean, sd, mean - half, mean + half)


# Iglewicz and Hoaglin's rule: a modified z-score above 3.5 marks a likely outlier.
OUTLIER_Z = 3.5


def modified_z_scores(values: Sequence[float]) -> list[float]:
    """0.6745 (x - median) / MAD for each value (Iglewicz and Hoaglin): robust to the very
    outliers it looks for, unlike a z-score on the mean and sd. When more than half the
    values are equal (MAD 0) the mean absolute deviation stands in, scaled by 1.253314 (as
    IBM's SPSS and others do); all 0 when every value is the same. Pure."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return []
    med = float(np.median(x))
    dev = np.abs(x - med)
    mad = float(np.median(dev))
    if mad > 0:
        return [float(0.6745 * (v - med) / mad) for v in x]
    mean_ad = float(dev.mean())
    if mean_ad == 0:
        return [0.0] * int(x.size)
    return [float((v - med) / (1.253314 * mean_ad)) for v in x]


def outliers(values: Sequence[float], threshold: float = OUTLIER_Z) -> list[tuple[int, float]]:
    """(index, modified z-score) of each value beyond the threshold; needs 3 or more values
    (with 2 the median sits between them and neither can stand out). Pure."""
    if len(values) < 3:
        return []
    return [(i, z) for i, z in enumerate(modified_z_scores(values)) if abs(z) > threshold]


@dataclass(frozen=True)
class Ratio:
    """mean(env) / mean(baseline), with its bootstrap interval and what it means."""

    ratio: float
    ci_low: float  # NaN when either side has fewer than 2 values
    ci_high: float
    higher_is_better: bool
    # The smallest difference this host's noise alone makes for this metric (from an A/A
    # run of the baseline against itself), as a fraction: NaN when unknown.
    noise_floor: float = math.nan
    # The ratio's verdict from its confidence sequence (isotax.analysis.verdicts: "worse",
    # "better", "equivalent", "undecided"), which then decides what within_noise and verdict
    # say: report_data sets it on every ratio to the baseline, compare and the fleet on
    # theirs; "" only where nothing judged it (the interval's words then, never shown as a
    # verdict by isotax's reports).
    decided: str = ""

    @property
    def delta_pct(self) -> float:
        """The study's '(Δ% vs native)': signed change of the mean."""
        return (self.ratio - 1.0) * 100.0

    @property
    def has_ci(self) -> bool:
        return not (math.isnan(self.ci_low) or math.isnan(self.ci_high))

    @property
    def within_noise(self) -> bool | None:
        """True when the interval contains 1.0, or the difference is no larger than the
        noise floor (an A/A run showed as much between identical environments); None when
        there is no interval."""
        if self.decided:  # only an equivalence verdict says the difference is noise
            return self.decided == "equivalent"
        if not self.has_ci:
            return None
        if not math.isnan(self.noise_floor) and abs(self.ratio - 1.0) <= self.noise_floor:
            return True
        return self.ci_low <= 1.0 <= self.ci_high

    @property
    def verdict(self) -> str:
        if self.decided:
            return self.decided
        if self.within_noise is None:
            return "too few runs"
        if self.within_noise:
            return "within noise"
        better = (self.ratio > 1.0) == self.higher_is_better
        return "better" if better else "worse"


def aa_noise_floor(aa: Ratio) -> float:
    """The noise floor an A/A ratio shows: the largest distance from 1 within its interval
    (NaN without an interval). Pure."""
    if not aa.has_ci:
        return math.nan
    return max(abs(aa.ci_low - 1.0), abs(aa.ci_high - 1.0), abs(aa.ratio - 1.0))


def _ratio_of_means(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a, axis=axis) / np.mean(b, axis=axis)


def ratio(env: Sequence[float], base: Sequence[float], higher_is_better: bool = True,
          seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> Ratio:
    a = np.asarray(env, dtype=float)
    b = np.asarray(base, dtype=float)
    if a.size == 0 or b.size == 0:
        raise ValueError("a ratio needs values on both sides")
    if b.mean() == 0:
        raise ValueError("the baseline mean is zero; no ratio")
    r = float(a.mean() / b.mean())
    if a.size < 2 or b.size < 2:
        return Ratio(r, math.nan, math.nan, higher_is_better)
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        # Identical repetitions on both sides: the bootstrap distribution is a point.
        return Ratio(r, r, r, higher_is_better)
    # A baseline with some zero values (errors, drops) resamples to a zero mean now and then:
    # that resample's ratio is inf, which the percentile interval handles; no warning for it.
    with np.errstate(divide="ignore", invalid="ignore"):
        res = sps.bootstrap(
            (a, b), _ratio_of_means, n_resamples=resamples, vectorized=True, paired=False,
            confidence_level=CONFIDENCE, method="percentile",
            random_state=np.random.default_rng(seed),
        )
    ci = res.confidence_interval
    return Ratio(r, float(ci.low), float(ci.high), higher_is_better)
