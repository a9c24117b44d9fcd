"""A verdict per headline ratio, valid however many rounds were looked at before stopping.

Each environment's headline value is paired with the baseline's of the same round (cells of
one repetition number run in one interleaved round, minutes apart at most): the pair's log
ratio d = log(env / baseline) takes the host's slow drifts out of the comparison, and a
noisier environment only widens its own pairs. Under the usual model of benchmark timings
(log-normal, so d is Gaussian with an unknown spread) the mean of d is the log of the ratio
of the two environments' geometric means.

The interval on that mean is a confidence sequence, not a confidence interval: it covers the
true ratio at every number of pairs at once with probability 1 - alpha, so looking after
each round and stopping as soon as a verdict is reached does not inflate false verdicts (a
fixed-n t or bootstrap interval checked after every round would). It is the one-sample
t-test's mixture martingale: a Gaussian mixture over the standardized effect (mean / sigma ~
N(0, g)) and the right-Haar prior 1/sigma over the unknown spread, whose Bayes factor

    BF(t) = c**-0.5 * ((1 + t**2 / nu) / (1 + t**2 / (nu * c))) ** ((nu + 1) / 2),
    c = 1 + n * g, nu = n - 1, t the t-statistic of the mean against the value tested,

is a test martingale under that value: H. Wang and A. Ramdas, "Anytime-valid t-tests and
confidence sequences for Gaussian means with unknown variance", arXiv:2310.03722 (2023), show
that this Gaussian mixture over the standardized effect with the right-Haar prior on the scale
is a test martingale in the scale-invariant filtration (the idea of a scale-invariant mixture
goes back to Lai, "On confidence sequences", Ann. Statist. 4, 1976, who used other mixtures).
By Ville's inequality it exceeds 1/alpha at any n with probability at most alpha, so {values
whose BF < 1/alpha} is the confidence sequence, closed form below. Regression-adjusted and
linear-model forms: M. Lindon, D. Ham, M. Tingley and I. Bojinov, "Anytime-valid linear
models and regression adjusted causal inference in randomized experiments", arXiv:2210.08589
(2022).

Borrowed spread. The same Bayes factor with `Borrowed(dof, ss)` (d0 degrees of freedom and a
sum of squares E of zero-mean residuals with the same sigma, e.g. this host's stored pairs of
the same point, each run centred on its own mean: a Helmert rotation makes k centred values k
- 1 independent ones) is the scale-invariant likelihood ratio of the whole stream (borrowed
residuals first, then the pairs), so it stays a test martingale for every sigma as long as the
borrowed residuals really share the pairs' sigma:

    BF = c**-0.5 * (A0 / A1) ** ((n + d0) / 2),
    A0 = nu s**2 + n (mean - mu)**2 + E,   A1 = nu s**2 + n (mean - mu)**2 / c + E.

d0 = 0 is the t form above. Whether the borrowed sigma is this run's sigma is an assumption,
checked before borrowing (isotax.analysis.borrowing) and by the resampling simulation.

No zero-width interval: a pair spread below SD_FLOOR counts as SD_FLOOR (three identical
pairs of a quantized metric must not decide anything by themselves); a larger s only widens
the interval, so the guarantee holds.

g: the mixture's width over the standardized effect. It sets where the sequence is tightest:
about where n g is 10. g = PRIOR_G (10) lets 3 pairs already decide an effect of about 8
standard deviations (an emulated VM at 0.004x native) and costs about a factor of 2 in width
against a fixed-n t interval at 5-10 pairs; a ratio within a few percent of native at a 10%
spread is decided, if at all, after 20 to 40 pairs, where g = 0.3 is 12% narrower (1.3 times
fewer pairs). So where this host's stored runs of the point say where its ratio lies, g is
chosen from them (prior_width: the squared distance, in pair spreads, from the history's mean
to the nearer edge of the margin, the effect the tests at that edge will face). Any g fixed
before the pairs keeps the martingale a martingale; a g from the stored runs, which are not
today's pairs, is such a g (a g picked from today's pairs would not be). Pure functions; the
error rates are checked by simulation (tests/unit/test_verdict_simulation.py).

The verdict against the equivalence margin m (on the ratio, symmetric on the log scale):
- worse / better by x%: the whole interval is beyond the margin on that side;
- equivalent: the whole interval is inside ±m;
- undecided: neither, with why (straddles the margin, or too few pairs to say anything).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

ALPHA = 0.05  # 95% confidence sequences
PRIOR_G = 10.0
MIN_MARGIN = 0.02  # no margin below ±2%, however quiet the host
# The smallest pair spread (sd of the log ratios) an interval is computed with: 0.2%, an
# eighth of the quietest point this host showed in stored quick runs (1.6%), and still wide
# enough that three identical pairs (a quantized metric: memory in pages, times in ms) give an
# interval, not a point. A larger spread only widens the interval: the guarantee holds.
SD_FLOOR = 0.002
# One pair (possible only with borrowed spread) is one draw, and no test can compare today's
# spread with the history's: its interval is at least this many of the history's standard
# deviations to each side. The Gaussian model alone would give ~3.6 (12 borrowed degrees of
# freedom); on this host's lumpiest pair sequences, block-resampled with a stored run's spread,
# one-pair verdicts at 3.6 raised the false worse/better rate from 0.3% to 1.1% (3 of 75
# sequences above 5%), at 8 they stay near the rate of two pairs (0.5%, the same one above 5%:
# tests/unit/test_verdict_simulation.py). A wider interval only narrows what is claimed.
ONE_PAIR_SDS = 8.0
# The narrowest mixture a history may choose (prior_width): tightest near 10 / 0.2 = 50 pairs,
# beyond what a budget of minutes gives one ratio here.
MIN_PRIOR_G = 0.2


@dataclass(frozen=True)
class Borrowed:
    """Strength borrowed from outside the pairs: `dof` degrees of freedom of zero-mean
    residuals with the pairs' sigma, and their sum of squares `ss`; `source` says where from,
    in words, and `runs` names the stored runs it came from, newest first (empty where it
    came from none, or from a run stored before they were kept); `center`, the history's mean
    log ratio (NaN: none), and `g`, the mixture's width that history chose (prior_width;
    PRIOR_G without history)."""

    dof: float
    ss: float
    source: str
    center: float = math.nan
    g: float = PRIOR_G
    runs: tuple[str, ...] = ()

    @property
    def sd(self) -> float:
        return math.sqrt(self.ss / self.dof) if self.dof > 0 else math.nan


NOTHING_BORROWED = Borrowed(0.0, 0.0, "")


class Verdict(StrEnum):
    WORSE = "worse"
    BETTER = "better"
    EQUIVALENT = "equivalent"
    UNDECIDED = "undecided"

    @property
    def decided(self) -> bool:
        return self is not Verdict.UNDECIDED


def prior_width(center: float, sd: float, margin: float) -> float:
    """The mixture's width g that a history chooses for a ratio (module docstring): the
    squared distance, in pair spreads sd, from the history's mean log ratio `center` to the
    nearer edge of the margin, within [MIN_PRIOR_G, PRIOR_G]; PRIOR_G without a history."""
    if not (math.isfinite(center) and math.isfinite(sd)) or sd <= 0:
        return PRIOR_G
    z = abs(abs(center) - math.log1p(margin)) / max(sd, SD_FLOOR)
    return min(PRIOR_G, max(MIN_PRIOR_G, z * z))


def radius(n: int, sd: float, alpha: float = ALPHA,
           borrowed: Borrowed = NOTHING_BORROWED) -> float:
    """The confidence sequence's half-width on the mean log ratio after n pairs whose sample
    standard deviation is sd (NaN below 2 pairs), with `borrowed` spread: the distance delta
    from the mean at which BF = 1/alpha (module docstring), inf where none is reachable."""
    d0, e = borrowed.dof, borrowed.ss
    nu = n - 1
    if n < 1 or (nu < 1 and d0 <= 0):
        return math.inf
    c = 1 + n * borrowed.g
    if ((nu + d0) / 2) * math.log(c) <= math.log(1 / alpha):
        return math.inf
    k = (math.sqrt(c) / alpha) ** (2 / (n + d0))
    s = max(sd, SD_FLOOR) if nu >= 1 else 0.0
    r = math.sqrt((k - 1) * (nu * s * s + e) / (n * (1 - k / c)))
    return r if nu >= 1 else max(r, ONE_PAIR_SDS * math.sqrt(e / d0))


def first_bounded_pairs(g: float = PRIOR_G, alpha: float = ALPHA, most: int = 1000) -> int:
    """The fewest pairs whose confidence sequence is bounded at all with nothing borrowed (a
    first run's ratios): below it no ratio can be decided, however large its tax (3 at the
    default width and 95%)."""
    return next((n for n in range(1, most + 1) if math.isfinite(radius(n, 1.0, alpha, replace(
        NOTHING_BORROWED, g=g)))), most)


@dataclass(frozen=True)
class ConfidenceSequence:
    """The confidence sequence on the mean log ratio after n pairs."""

    n: int
    mean: float  # mean of the log ratios (nan without pairs)
    sd: float  # their sample standard deviation (nan below 2)
    low: float  # -inf / inf when n pairs cannot bound it yet
    high: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def spread(log_ratios: Sequence[float] | np.ndarray) -> float:
    """The pairs' sample standard deviation (n - 1); NaN below 2 pairs."""
    d = np.asarray(log_ratios, dtype=float)
    return float(d.std(ddof=1)) if d.size >= 2 else math.nan


def confidence_sequence(log_ratios: Sequence[float], alpha: float = ALPHA,
                        borrowed: Borrowed = NOTHING_BORROWED
                        ) -> ConfidenceSequence:
    """The t confidence sequence at the current n for the mean of the paired log ratios,
    with `borrowed` spread where there is some."""
    d = np.asarray(log_ratios, dtype=float)
    n = int(d.size)
    if n == 0:
        return ConfidenceSequence(0, math.nan, math.nan, -math.inf, math.inf)
    mean = float(d.mean())
    sd = spread(d)
    if n < 2 and borrowed.dof <= 0:
        return ConfidenceSequence(n, mean, sd, -math.inf, math.inf)
    r = radius(n, sd, alpha, borrowed)
    return ConfidenceSequence(n, mean, sd, mean - r, mean + r)


def pair_by_round(env: Mapping[int, float], base: Mapping[int, float]) -> list[float]:
    """log(env / baseline) of every repetition both sides passed, in repetition order (the
    sequence the martingale runs along: it only ever grows at its end). Values <= 0 have no
    log: such a pair is left out (headline metrics are rates and times, all positive)."""
    return [math.log(env[r] / base[r]) for r in sorted(env.keys() & base.keys())
            if env[r] > 0 and base[r] > 0]


@dataclass(frozen=True)
class RatioVerdict:
    """One headline ratio's verdict and the evidence for it."""

    verdict: Verdict
    ratio: float  # exp(mean log ratio): the ratio of geometric means (nan without pairs)
    low: float  # the confidence sequence on the ratio (0 / inf when unbounded)
    high: float
    margin: float  # the equivalence margin, a fraction (0.02 for ±2%)
    n: int  # pairs
    higher_is_better: bool
    reason: str  # why undecided ("" when decided)

    @property
    def change(self) -> float:
        """The ratio's change as a fraction: +0.08 is 8% higher than the baseline."""
        return self.ratio - 1.0

    def words(self) -> str:
        """'worse by 8.1%', 'equivalent within ±2%', 'undecided'."""
        if self.verdict in (Verdict.WORSE, Verdict.BETTER):
            return f"{self.verdict.value} by {abs(self.change):.1%}"
        if self.verdict is Verdict.EQUIVALENT:
            return f"equivalent within ±{self.margin:.1%}"
        return "undecided"

    @property
    def ends(self) -> tuple[float | None, float | None]:
        """The interval's ends for JSON and tables; None where it is still unbounded (low 0,
        high inf)."""
        return (self.low if self.low > 0 else None,
                self.high if math.isfinite(self.high) else None)

    def interval(self) -> str:
        """'[0.91, 0.97]' on the ratio; '[unbounded]' before enough pairs."""
        if not math.isfinite(self.high) or self.low <= 0:
            return "[unbounded]"
        return f"[{_num(self.low)}, {_num(self.high)}]"


def _num(x: float) -> str:
    return f"{x:.3g}" if x < 10 else f"{x:,.0f}"


def decide(log_ratios: Sequence[float], higher_is_better: bool, margin: float,
           alpha: float = ALPHA, borrowed: Borrowed = NOTHING_BORROWED) -> RatioVerdict:
    """The verdict on one ratio from its paired log ratios so far."""
    return decide_on(confidence_sequence(log_ratios, alpha, borrowed), higher_is_better,
                     margin)


def by_round(vals: Sequence[float], reps: Sequence[int]) -> dict[int, float]:
    """{repetition: value} from a cell's values and their repetitions; a repetition with
    several values of one row has their mean."""
    got: dict[int, list[float]] = defaultdict(list)
    for v, r in zip(vals, reps, strict=True):
        got[r].append(v)
    return {r: sum(v) / len(v) for r, v in got.items()}


def decide_by_round(env: Mapping[int, float], base: Mapping[int, float],
                    higher_is_better: bool, margin: float) -> RatioVerdict | None:
    """env over base ({repetition: value} each) on the rounds both ran, judged against the
    margin: a layer's after over before, or a ratio the added rounds do not chase. None
    where no round has both (or no value of them is positive)."""
    d = pair_by_round(env, base)
    return decide(d, higher_is_better, margin) if d else None


def decide_on(cs: ConfidenceSequence, higher_is_better: bool, margin: float) -> RatioVerdict:
    """The verdict that a ratio's confidence sequence gives against the margin."""
    m = math.log1p(margin)
    ratio = math.exp(cs.mean) if cs.n else math.nan
    low = math.exp(cs.low) if cs.low > -math.inf else 0.0
    high = math.exp(cs.high) if cs.high < math.inf else math.inf

    def made(v: Verdict, why: str = "") -> RatioVerdict:
        return RatioVerdict(v, ratio, low, high, margin, cs.n, higher_is_better, why)

    if cs.n < 1 or not math.isfinite(cs.half_width):
        return made(Verdict.UNDECIDED, f"{cs.n} pair(s) cannot bound the ratio yet")
    if cs.low > m or cs.high < -m:
        up = cs.low > m  # the environment's value is higher than the baseline's
        return made(Verdict.BETTER if up == higher_is_better else Verdict.WORSE)
    if -m < cs.low and cs.high < m:
        return made(Verdict.EQUIVALENT)
    if cs.low > 0 or cs.high < 0:
        why = f"differs from the baseline, but the interval still reaches into ±{margin:.1%}"
    else:
        why = f"the interval spans both sides of ±{margin:.1%}"
    return made(Verdict.UNDECIDED, why)


def pairs_to_decide(cs: ConfidenceSequence, margin: float, cap: int, alpha: float = ALPHA,
                    borrowed: Borrowed = NOTHING_BORROWED) -> int | None:
    """How many pairs in all the ratio would need to be decided if its mean and spread stayed
    what they are now: the smallest n (up to cap) whose half-width fits the distance from the
    mean to the nearer margin edge; None when none up to cap does (the mean sits on the
    margin's edge, or the spread is too wide for cap pairs). An estimate that orders the
    undecided ratios by what a run buys, never evidence."""
    sd = cs.sd if not math.isnan(cs.sd) else borrowed.sd
    if cs.n < 1 or math.isnan(sd):
        return None
    room = abs(abs(cs.mean) - math.log1p(margin))
    if room == 0:
        return None
    for n in range(max(cs.n, 2), cap + 1):
        # The borrowed sum of squares stays; the pairs' own grows with n at today's spread.
        if radius(n, sd, alpha, borrowed) < room:
            return n
    return None


def pairs_to_decide_near(cs: ConfidenceSequence, margin: float, cap: int, alpha: float = ALPHA,
                         borrowed: Borrowed = NOTHING_BORROWED
                         ) -> int | None:
    """pairs_to_decide were the ratio's mean one standard error nearer a decision (either
    way, or at 1.00 where that is within one): None only where no such ratio could be
    decided within cap. At a few pairs the mean itself is uncertain: a ratio at 1.00 with a
    10% spread reads 1.08 after two pairs one time in five, and its projection against a
    ±10% margin then says "never". Such a ratio is a long shot, not a lost cause."""
    sd = cs.sd if not math.isnan(cs.sd) else borrowed.sd
    if cs.n < 1 or math.isnan(sd):
        return None
    se = sd / math.sqrt(cs.n)
    means = [cs.mean - se, cs.mean + se] + ([0.0] if abs(cs.mean) <= se else [])
    found = [p for mu in means
             if (p := pairs_to_decide(replace(cs, mean=mu), margin, cap, alpha, borrowed))
             is not None]
    return min(found, default=None)


def bayes_factor(n: int, mean: float, sd: float, mu: float,
                 borrowed: Borrowed = NOTHING_BORROWED) -> float:
    """The mixture Bayes factor (module docstring) of n pairs with this mean and sd against the
    mean log ratio mu: an e-value for "the true mean is mu" (its expectation under mu is at
    most 1), what e-BH combines across ratios. 1 below 2 pairs with nothing borrowed."""
    nu = n - 1
    if n < 1 or (nu < 1 and borrowed.dof <= 0):
        return 1.0
    c = 1 + n * borrowed.g
    s2 = max(sd, SD_FLOOR) ** 2 if nu >= 1 else 0.0
    base = nu * s2 + borrowed.ss
    dist = n * (mean - mu) ** 2
    log_bf = -0.5 * math.log(c) + (n + borrowed.dof) / 2 * math.log(
        (base + dist) / (base + dist / c))
    return math.exp(min(log_bf, 700.0))


def smallest_decidable(sd: float, n: int, margin: float, alpha: float = ALPHA,
                       borrowed: Borrowed = NOTHING_BORROWED) -> float:
    """The smallest true change (a fraction, as |ratio - 1|) that n pairs at pair spread sd
    would call worse or better, to the first order: the margin plus the interval's half-width
    (the mean must clear the margin by a whole half-width). inf when n pairs bound nothing."""
    r = radius(n, sd, alpha, borrowed)
    return math.expm1(math.log1p(margin) + r) if math.isfinite(r) else math.inf


def pairs_for_half_width(sd: float, half_width: float, cap: int = 100_000,
                         alpha: float = ALPHA, borrowed: Borrowed = NOTHING_BORROWED
                         ) -> int | None:
    """The pairs whose interval is at most ±half_width (a fraction of the ratio, 0.05 for ±5%)
    at pair spread sd; None beyond cap. Doubling search, then bisection: radius falls with n."""
    want = math.log1p(half_width)
    if radius(cap, sd, alpha, borrowed) > want:
        return None
    lo, hi = 1, 2
    while radius(hi, sd, alpha, borrowed) > want:
        lo, hi = hi, min(cap, hi * 2)
    while lo < hi:
        mid = (lo + hi) // 2
        if radius(mid, sd, alpha, borrowed) > want:
            lo = mid + 1
        else:
            hi = mid
    return lo
