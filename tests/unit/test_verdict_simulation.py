"""Error rates of the sequential verdicts on this host's real pair sequences, by simulation.

The pairs are this host's: every environment x point of stored quick runs
(tests/data/verdicts/spreads.json, written by benchmarks/host_spreads.py), each a sequence of
paired log ratios in the order they were measured. A simulated ratio is a point's runs'
segments as one sequence, centred once on its whole mean (no true difference, or shifted by a
true one), stationary-bootstrapped with mean blocks of BLOCK pairs, so the host's
autocorrelation (its load comes in regimes) stays in the resampled sequences; Gaussian pairs
are the model the confidence sequence assumes, for comparison. The error rates a user can
rely on are measured on long sequences in test_verdict_error_rates.py.

Two drivers: a vectorised one (many runs, one ratio at a time, stopping at the first decided
look from the plan's minimum to the cap) and the runner's own rule (isotax.analysis.sequential
assess + next_round over stored-cell records: the minimum, the cap, the deadline, and which
ratios get rounds), which the first is checked against.

Run directly to print the rates: .venv/bin/python tests/unit/test_verdict_simulation.py
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats

from isotax.analysis import borrowing, sequential
from isotax.analysis.borrowing import DISCOUNT, F_LEVEL, MAX_DOF
from isotax.analysis.margins import Margin
from isotax.analysis.verdicts import (
    ALPHA,
    MIN_MARGIN,
    NOTHING_BORROWED,
    ONE_PAIR_SDS,
    PRIOR_G,
    SD_FLOOR,
    Borrowed,
    Verdict,
    decide,
    prior_width,
    radius,
)
from isotax.model import CellKey, CellStatus, Sample
from isotax.store.base import CellRecord

HISTORY_PAIRS = 13  # a stored run's pairs lent: 12 degrees of freedom, borrowing's cap
SPREADS = json.loads((Path(__file__).parent.parent / "data/verdicts/spreads.json").read_text())
# Each environment x point: its runs' segments of pairs in the order they were measured.
SEGMENTS = [[np.asarray(seg, dtype=float) for seg in s.get("segments", [s["log_ratios"]])]
            for s in SPREADS["spreads"]]
MIN_PAIRS = 1  # the quick plan's repetitions: one fixed round
CAP = 20  # the quick plan's max_repetitions
BLOCK = 3  # pairs per resampled block: the host's lag-1 correlation falls off within ~2 pairs


def radii(cap: int, sd: np.ndarray, borrowed: Borrowed = NOTHING_BORROWED) -> np.ndarray:
    """radius() for every n = 1..cap and every row's running sd (rows x cap)."""
    out = np.empty_like(sd)
    for k in range(1, cap + 1):
        out[:, k - 1] = [radius(k, s, borrowed=borrowed) for s in sd[:, k - 1]]
    return out


def radius_np(n: int, sd: np.ndarray, dof: np.ndarray | float = 0.0,
              ss: np.ndarray | float = 0.0, g: np.ndarray | float = PRIOR_G,
              f_test: bool = True, f_level: float = F_LEVEL) -> np.ndarray:
    """verdicts.radius for one n and arrays of sd and borrowed (dof, ss, the width g), with
    the F test of borrowing.usable applied: where today's spread refuses its history, no
    spread is borrowed (the width stays). Checked against radius() and usable() in
    test_the_vectorised_radius_is_the_codes."""
    sd = np.asarray(sd, dtype=float)
    dof = np.broadcast_to(np.asarray(dof, dtype=float), sd.shape).copy()
    ss = np.broadcast_to(np.asarray(ss, dtype=float), sd.shape).copy()
    nu = n - 1
    if nu >= 1 and f_test:
        with np.errstate(invalid="ignore", divide="ignore"):
            f = sd * sd / (ss / dof)
            d = np.maximum(dof, 1)
            refused = (dof > 0) & ((f > stats.f.ppf(1 - f_level, nu, d))
                                   | (f < stats.f.ppf(f_level, nu, d)))
        dof[refused], ss[refused] = 0.0, 0.0
    c = 1 + n * np.broadcast_to(np.asarray(g, dtype=float), sd.shape)
    s = np.maximum(sd, SD_FLOOR) if nu >= 1 else np.zeros_like(sd)
    out = np.full(sd.shape, np.inf)
    ok = ((nu + dof) / 2) * np.log(c) > math.log(1 / ALPHA)
    k = (np.sqrt(c[ok]) / ALPHA) ** (2 / (n + dof[ok]))
    out[ok] = np.sqrt((k - 1) * (nu * s[ok] ** 2 + ss[ok]) / (n * (1 - k / c[ok])))
    if nu < 1:  # one pair: at least ONE_PAIR_SDS of the history's sd
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.maximum(out, np.where(dof > 0, ONE_PAIR_SDS * np.sqrt(ss / dof), np.inf))
    return out


def stopped_verdicts(d: np.ndarray, margin: float = MIN_MARGIN, first: int = MIN_PAIRS,
                     dof: np.ndarray | float = 0.0, ss: np.ndarray | float = 0.0,
                     g: np.ndarray | float = PRIOR_G, f_test: bool = True,
                     f_level: float = F_LEVEL) -> np.ndarray:
    """d: (simulations, max pairs) log ratios; dof, ss, g: each simulation's borrowed spread
    and the width its history chose; f_test False borrows without borrowing.usable's check.
    Per simulation, the verdict at the first look (n = first ..) that decides, else undecided
    at the last: 1 higher, -1 lower, 0 equivalent, 2 undecided. The rule of verdicts.decide
    after sequential.assess's borrowing, vectorised."""
    sims, cap = d.shape
    n = np.arange(1, cap + 1)
    mean = np.cumsum(d, axis=1) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        var = (np.cumsum(d * d, axis=1) - n * mean**2) / (n - 1)
    sd = np.sqrt(np.maximum(np.nan_to_num(var, nan=0.0), 0.0))
    rad = np.column_stack([radius_np(k, sd[:, k - 1], dof, ss, g, f_test, f_level)
                           for k in range(1, cap + 1)])
    m = math.log1p(margin)
    low, high = mean - rad, mean + rad
    up, down = low > m, high < -m
    equal = (low > -m) & (high < m)
    decided = (up | down | equal) & (n >= first)
    out = np.full(sims, 2)
    at = np.where(decided.any(axis=1), decided.argmax(axis=1), -1)
    rows = np.flatnonzero(at >= 0)
    cols = at[rows]
    out[rows] = np.where(up[rows, cols], 1, np.where(down[rows, cols], -1, 0))
    return out


def history(rng: np.random.Generator, segments: list[np.ndarray], sims: int,
            pairs: int = HISTORY_PAIRS, delta: float = 0.0, margin: float = MIN_MARGIN
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each simulation's stored run: another block resample of the host's sequence (`pairs`
    pairs, as a stored run would give, at the same true delta): (dof, ss) of its centred
    pairs as borrowing lends them, capped at its MAX_DOF, and the mixture width its mean
    chooses against `margin` (borrowing.with_prior)."""
    h = block_resampled(rng, segments, delta, sims, pairs)
    ss = ((h - h.mean(axis=1, keepdims=True)) ** 2).sum(axis=1)
    dof = min(pairs - 1.0, MAX_DOF)
    ss = ss * dof / (pairs - 1) * DISCOUNT**2  # as borrowing.from_store lends it
    g = np.array([prior_width(m, math.sqrt(e / dof), margin)
                  for m, e in zip(h.mean(axis=1), ss, strict=True)])
    return np.full(sims, dof), ss, g


def whole(segments: list[np.ndarray]) -> np.ndarray:
    """A point's runs' segments as one sequence, in the order measured, centred once on its
    whole mean (never a short segment on its own: a 2-pair segment centred on itself is
    (x, -x), negatively dependent by construction): what is left of the runs' differences
    stays in as noise."""
    seq = np.concatenate(segments)
    return seq - seq.mean()


def stationary(rng: np.random.Generator, seq: np.ndarray, sims: int, length: int,
               mean_block: float = BLOCK) -> np.ndarray:
    """Politis and Romano's stationary bootstrap of one whole sequence: blocks of geometric
    length (mean `mean_block` pairs) from random starts, wrapping around: (sims, length)."""
    n = seq.size
    idx = np.empty((sims, length), dtype=int)
    idx[:, 0] = rng.integers(0, n, sims)
    jump = rng.random((sims, length)) < 1.0 / mean_block
    fresh = rng.integers(0, n, (sims, length))
    for k in range(1, length):
        idx[:, k] = np.where(jump[:, k], fresh[:, k], (idx[:, k - 1] + 1) % n)
    return seq[idx]


def block_resampled(rng: np.random.Generator, segments: list[np.ndarray], delta: float,
                    sims: int, cap: int, block: int = BLOCK) -> np.ndarray:
    """The host's sequence of one ratio (its runs' segments, whole), stationary-bootstrapped
    and shifted by delta: (sims, cap)."""
    return delta + stationary(rng, whole(segments), sims, cap, block)


def gaussian(rng: np.random.Generator, delta: float, sd: float, sims: int, cap: int
             ) -> np.ndarray:
    return rng.normal(delta, sd, (sims, cap))


def lag1(seq: np.ndarray) -> float:
    c = seq - seq.mean()
    return float((c[:-1] * c[1:]).sum() / (c * c).sum())


# -- the interval itself ------------------------------------------------------------------------

def bf_by_integration(mean: float, sd: float, n: int, g: float = PRIOR_G) -> float:
    """The mixture Bayes factor of n Gaussian values with sample mean `mean` and sd `sd`
    against the mean 0, by numerical integration: N(0, g) over the standardized effect and
    the right-Haar 1/sigma over the scale, in the numerator and the denominator alike. An
    independent check of the closed form in verdicts.radius (its nu and alpha)."""
    ss = (n - 1) * sd * sd

    def lik(sigma: float, theta: float) -> float:
        q = ss + n * (mean - theta * sigma) ** 2
        return sigma ** (-n - 1) * math.exp(-q / (2 * sigma * sigma))

    def h1(sigma: float) -> float:
        return integrate.quad(lambda t: lik(sigma, t) * math.exp(-t * t / (2 * g))
                              / math.sqrt(2 * math.pi * g), -np.inf, np.inf)[0]

    top = integrate.quad(h1, 0, np.inf, limit=200)[0]
    bottom = integrate.quad(lambda s: lik(s, 0.0), 0, np.inf, limit=200)[0]
    return top / bottom


@pytest.mark.parametrize("n", [3, 5, 9])
def test_the_radius_is_where_the_integrated_bayes_factor_reaches_one_over_alpha(n: int) -> None:
    """Tight: BF at the interval's edge is 1/alpha to 0.5%. With nu = n instead of n - 1, or
    another alpha, the edge moves and the check fails."""
    sd = 0.1
    edge = radius(n, sd)
    assert bf_by_integration(edge, sd, n) == pytest.approx(1 / ALPHA, rel=5e-3)
    # the same closed form with nu = n (one degree of freedom too many) misses it
    c = 1 + n * PRIOR_G
    k = (math.sqrt(c) / ALPHA) ** (2 / (n + 1))
    wrong = math.sqrt((k - 1) * n * sd * sd / (n * (1 - k / c)))
    assert abs(bf_by_integration(wrong, sd, n) * ALPHA - 1) > 0.05


@pytest.mark.parametrize(("n", "g"), [(9, 1.0), (20, 0.2)])
def test_a_width_a_history_chose_is_where_its_bayes_factor_reaches_one_over_alpha(
        n: int, g: float) -> None:
    """The narrower mixtures that stored runs choose (verdicts.prior_width) are the same
    closed form at their own g: checked by integration, and narrower than PRIOR_G's there."""
    edge = radius(n, 0.1, borrowed=Borrowed(0.0, 0.0, "", g=g))
    assert bf_by_integration(edge, 0.1, n, g=g) == pytest.approx(1 / ALPHA, rel=5e-3)
    assert edge < radius(n, 0.1)


def test_a_first_runs_ratio_is_bounded_from_its_third_pair() -> None:
    """With nothing borrowed, two pairs never bound a ratio at 95% (the Bayes factor stays
    below 1/alpha however far the mean is); three do. What the first run's line says."""
    from isotax.analysis.verdicts import first_bounded_pairs

    assert first_bounded_pairs() == 3
    assert math.isinf(radius(2, 0.001)) and math.isfinite(radius(3, 0.1))
    # A narrower mixture (a history's) or a looser level moves it.
    assert first_bounded_pairs(g=1.0) > 3 and first_bounded_pairs(alpha=0.5) < 3


def test_borrowed_spread_is_the_integrated_bayes_factor_of_the_longer_stream() -> None:
    """Borrowed residuals (dof d0, sum of squares E) act as d0 more values of known mean 0:
    the closed form equals the Bayes factor of n + d0 values whose extra d0 carry E and no
    effect, integrated the same way."""
    n, sd, d0, e = 3, 0.1, 6, 6 * 0.1**2
    edge = radius(n, sd, borrowed=Borrowed(d0, e, "test"))
    ss = (n - 1) * sd * sd + e

    def lik(sigma: float, theta: float) -> float:
        q = ss + n * (edge - theta * sigma) ** 2
        return sigma ** (-n - d0 - 1) * math.exp(-q / (2 * sigma * sigma))

    def h1(sigma: float) -> float:
        return integrate.quad(lambda t: lik(sigma, t) * math.exp(-t * t / (2 * PRIOR_G))
                              / math.sqrt(2 * math.pi * PRIOR_G), -np.inf, np.inf)[0]

    top = integrate.quad(h1, 0, np.inf, limit=200)[0]
    bottom = integrate.quad(lambda s: lik(s, 0.0), 0, np.inf, limit=200)[0]
    assert top / bottom == pytest.approx(1 / ALPHA, rel=5e-3)
    assert edge < radius(n, sd)  # borrowing narrows


def test_no_zero_width_interval_from_identical_pairs() -> None:
    v = decide([0.03, 0.03, 0.03], True, MIN_MARGIN)
    assert v.high > v.low and v.verdict is Verdict.UNDECIDED
    assert radius(3, 0.0) == radius(3, SD_FLOOR) > 0


def test_the_vectorised_radius_is_the_codes() -> None:
    rng = np.random.default_rng(9)
    sd = rng.uniform(0.0, 0.3, 50)
    for n in (1, 2, 3, 7):
        lent = Borrowed(12, 12 * 0.05**2, "h")
        want = [radius(n, x, borrowed=borrowing.usable(lent, x, n)) for x in sd]
        assert np.allclose(radius_np(n, sd, 12, 12 * 0.05**2), want)
        narrow = Borrowed(12, 12 * 0.05**2, "h", g=0.4)
        want = [radius(n, x, borrowed=borrowing.usable(narrow, x, n)) for x in sd]
        assert np.allclose(radius_np(n, sd, 12, 12 * 0.05**2, 0.4), want)
        assert np.allclose(radius_np(n, sd), [radius(n, x) for x in sd])
    # one pair: the Gaussian model's radius would be ~3.6 of the history's sd; it is 8
    assert radius(1, math.nan, borrowed=Borrowed(12, 12 * 0.05**2, "h")) == \
        pytest.approx(ONE_PAIR_SDS * 0.05)


def test_the_vectorised_rule_is_decide() -> None:
    rng = np.random.default_rng(5)
    d = rng.normal(0.05, 0.03, (200, 12))
    got = stopped_verdicts(d)
    code = {Verdict.BETTER: 1, Verdict.WORSE: -1, Verdict.EQUIVALENT: 0, Verdict.UNDECIDED: 2}
    for row, v in zip(d, got, strict=True):
        for k in range(MIN_PAIRS, 13):
            r = decide(list(row[:k]), True, MIN_MARGIN)
            if r.verdict.decided or k == 12:
                assert code[r.verdict] == v
                break


# -- error rates on this host's sequences -------------------------------------------------------

def aa_false_rates(shape: str, sims: int = 4000, cap: int = CAP, lend: bool = False
                   ) -> list[float]:
    """Per sequence of this host, the share of A/A runs (no true difference), looked at after
    every pair from MIN_PAIRS to `cap`, that end with a worse/better verdict; with `lend`,
    each run borrows its spread from another resample of the sequence (a stored run)."""
    rng = np.random.default_rng(2026)
    rates = []
    for spread, segs in zip(SPREADS["spreads"], SEGMENTS, strict=True):
        d = (gaussian(rng, 0.0, float(spread["sd"]), sims, cap) if shape == "gaussian"
             else block_resampled(rng, segs, 0.0, sims, cap))
        dof, ss, g = history(rng, segs, sims) if lend else (0.0, 0.0, PRIOR_G)
        rates.append(float(np.mean(np.abs(stopped_verdicts(d, dof=dof, ss=ss, g=g)) == 1)))
    return rates


def test_gaussian_pairs_at_this_hosts_spreads_stay_at_5_percent() -> None:
    rates = aa_false_rates("gaussian")
    assert max(rates) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / 4000), max(rates)


def test_this_hosts_real_sequences_block_resampled_stay_at_5_percent() -> None:
    """The host's own pair sequences, resampled in blocks (autocorrelation kept): at most 5%
    false worse/better per ratio on average over them, and no sequence far beyond."""
    rates = aa_false_rates("blocks")
    assert np.mean(rates) <= 0.05, np.mean(rates)


def test_with_borrowed_spread_the_real_sequences_stay_at_5_percent() -> None:
    """Borrowing from a stored run of the same sequence (its own resample: the assumption
    that the stored sigma is today's holds on average, not run by run): at most 5% false
    worse/better per ratio on average."""
    rates = aa_false_rates("blocks", sims=2000, lend=True)
    assert np.mean(rates) <= 0.05, np.mean(rates)


def test_equivalent_is_rarely_said_at_the_margins_edge() -> None:
    """A true ratio exactly at the margin's edge: "equivalent" in at most 5% of runs, alone
    and with a stored run's spread and the width its mean chooses (near the edge: narrow)."""
    rng = np.random.default_rng(3)
    for segs in SEGMENTS[::4]:
        for edge in (math.log1p(MIN_MARGIN), -math.log1p(MIN_MARGIN)):
            v = stopped_verdicts(block_resampled(rng, segs, edge, 2000, CAP))
            assert np.mean(v == 0) <= 0.05, (edge, np.mean(v == 0))
            dof, ss, g = history(rng, segs, 2000, delta=edge)
            v = stopped_verdicts(block_resampled(rng, segs, edge, 2000, CAP), dof=dof, ss=ss,
                                 g=g)
            assert np.mean(v == 0) <= 0.05, (edge, "borrowed", np.mean(v == 0))


def test_a_true_5_percent_difference_is_found_on_quiet_sequences() -> None:
    """A true ratio of 0.95 or 1.05 on this host's quietest sequences, up to 400 pairs: found
    (right side) in at least 90% of runs; the opposite or "equivalent" in at most 5%."""
    rng = np.random.default_rng(7)
    quiet = sorted(SEGMENTS, key=lambda segs: float(whole(segs).std()))[:6]
    for segs in quiet:
        for delta in (math.log(1.05), math.log(0.95)):
            v = stopped_verdicts(block_resampled(rng, segs, delta, 1000, 400))
            right = 1 if delta > 0 else -1
            assert np.mean(v == right) >= 0.9, (delta, np.mean(v == right))
            assert np.mean((v == -right) | (v == 0)) <= 0.05


def test_a_fixed_n_interval_checked_every_round_would_fail_the_same_check() -> None:
    """Why a confidence sequence: a 95% t interval looked at after every round from 3 to 20
    declares false differences far more often than 5% on the same A/A data."""
    from scipy import stats

    rng = np.random.default_rng(11)
    d = rng.normal(0.0, 0.1, (4000, 20))
    n = np.arange(1, 21)
    mean = np.cumsum(d, axis=1) / n
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = np.sqrt((np.cumsum(d * d, axis=1) - n * mean**2) / (n - 1))
        half = stats.t.ppf(0.975, np.maximum(n - 1, 1)) * sd / np.sqrt(n)
    naive = ((np.abs(mean) > half) & (n >= 3)).any(axis=1).mean()
    ours = (np.abs(stopped_verdicts(d, margin=1e-12)) == 1).mean()
    assert naive > 0.15 and ours <= 0.05, (naive, ours)


# -- the runner's own stopping rule ---------------------------------------------------------------

_ids = itertools.count(1)


def _cell(env: str, point: int, rep: int, value: float, secs: float) -> CellRecord:
    return CellRecord(next(_ids), CellKey(env, "w", {"p": point}, rep), "1", CellStatus.OK, "",
                      0.0, secs, (Sample("tput", value, "u", True),))


def _margin(row: tuple[str, str, str], environment: str = "") -> Margin:
    return Margin(MIN_MARGIN, "plan")


def simulated_run(rng: np.random.Generator, seqs: list[list[np.ndarray]], deltas: list[float],
                  fixed: int, cap: int, room_s: float, secs: float = 1.0, lend: bool = False
                  ) -> tuple[sequential.Progress, int]:
    """One run as the runner makes it: `fixed` rounds of every ratio (one environment per
    sequence, all on one point each, against one baseline), then rounds from
    sequential.next_round while it chooses some and the room (seconds of cells) lasts.
    Returns the final progress and the rounds added."""
    draws = [block_resampled(rng, s, dl, 1, cap)[0] for s, dl in zip(seqs, deltas, strict=True)]
    lent = {}
    if lend:  # each ratio's stored run: another resample of its sequence
        for i, segs in enumerate(seqs):
            h = block_resampled(rng, segs, deltas[i], 1, HISTORY_PAIRS)[0]
            dof = min(HISTORY_PAIRS - 1.0, MAX_DOF)
            ss = float(((h - h.mean()) ** 2).sum()) * dof / (HISTORY_PAIRS - 1)
            # its mean too: the runner's assess chooses the mixture's width from it
            lent[(f"env{i}", "w", f"p={i}")] = Borrowed(dof, ss, "sim", center=float(h.mean()))
    cells: list[CellRecord] = []
    used = [0] * len(seqs)

    def add(i: int, rep: int) -> None:
        cells.append(_cell("native", i, rep, 100.0, secs))
        cells.append(_cell(f"env{i}", i, rep, 100.0 * math.exp(draws[i][used[i]]), secs))
        used[i] += 1

    for rep in range(1, fixed + 1):
        for i in range(len(seqs)):
            add(i, rep)
    rounds = 0
    spent = 0.0
    while True:
        p = sequential.assess(cells, "native", _margin, fixed, cap, borrowed=lent)
        decision = sequential.next_round(p, "native", cap, room_s - spent)
        if decision.ended is not None:
            return p, rounds
        rounds += 1
        chosen = {int(pt[2].split("=")[1]) for pt in decision.points if pt[0] != "native"}
        for i in sorted(chosen):
            add(i, p.next_repetition)
            spent += 2 * secs


@pytest.mark.parametrize("lend", [False, True])
def test_the_runners_rule_keeps_false_verdicts_at_5_percent_and_its_limits(lend: bool) -> None:
    """A/A ratios on block-resampled real sequences through assess + next_round (minimum 2,
    cap 20, a deadline of 60 cell-seconds of added rounds), without and with spread borrowed
    from a stored run: at most 5% false worse/better (to the simulation's standard error), no
    point past the cap, no added cell past the room."""
    rng = np.random.default_rng(2028)
    false = total = 0
    for _ in range(60):
        seqs = [SEGMENTS[int(i)] for i in rng.integers(0, len(SEGMENTS), 8)]
        p, _ = simulated_run(rng, seqs, [0.0] * 8, MIN_PAIRS, CAP, room_s=60.0, lend=lend)
        assert max(p.measured.values()) <= CAP
        assert p.added_cells <= 60
        false += sum(r.verdict.verdict in (Verdict.WORSE, Verdict.BETTER) for r in p.ratios)
        total += len(p.ratios)
    rate = false / total
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / total), rate


def test_the_runners_rule_chases_what_it_can_decide() -> None:
    """A big true difference (0.5x) is decided at the minimum and gets no added round; the
    rounds go to the others."""
    rng = np.random.default_rng(4)
    quiet = sorted(SEGMENTS, key=lambda segs: float(whole(segs).std()))
    p, _ = simulated_run(rng, [quiet[0], quiet[1]], [math.log(0.5), 0.0], 3, CAP,
                         room_s=40.0)
    big = next(r for r in p.ratios if r.environment == "env0")
    assert big.verdict.verdict is Verdict.BETTER or big.verdict.verdict is Verdict.WORSE
    assert p.measured[("env0", "w", "p=0")] == 3


def rates() -> None:
    """The table for the docs and the closing note."""
    sims = 4000
    for shape, lend in (("gaussian", False), ("blocks", False), ("blocks", True)):
        false = aa_false_rates(shape, sims, lend=lend)
        print(f"A/A {shape}{' + borrowed' if lend else ''}: false worse/better mean "
              f"{np.mean(false):.4f}, max {max(false):.4f}, {sum(r > 0.05 for r in false)} "
              f"above 5%, over {len(false)} sequences x {sims} runs")
    print("lag-1 of the runs' segments (4 pairs or more): median "
          f"{np.median([lag1(g) for segs in SEGMENTS for g in segs if g.size >= 4]):.2f}")
    for lend in (False, True):
        rng = np.random.default_rng(2028)
        false = total = 0
        for _ in range(300):
            seqs = [SEGMENTS[int(i)] for i in rng.integers(0, len(SEGMENTS), 8)]
            p, _ = simulated_run(rng, seqs, [0.0] * 8, MIN_PAIRS, CAP, room_s=60.0, lend=lend)
            false += sum(r.verdict.verdict in (Verdict.WORSE, Verdict.BETTER)
                         for r in p.ratios)
            total += len(p.ratios)
        print(f"runner's rule, A/A{' + borrowed' if lend else ''}: {false}/{total} = "
              f"{false / total:.4f} false worse/better")


if __name__ == "__main__":
    rates()
