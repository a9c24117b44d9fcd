"""benchmarks/variance_components.py and variance_parts.py: the pure statistics (spreads of log
values, adjacent spread, autocorrelation and its time scale, the intervals), on series whose
answer is known."""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    path = ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


vp = _load("variance_parts")  # the pure statistics and the shared parts
vc = _load("variance_components")  # the command: its table


def _ar1(n: int, phi: float, rng: random.Random) -> list[float]:
    x, out = 0.0, []
    for _ in range(n):
        x = phi * x + rng.gauss(0, 1)
        out.append(x)
    return out


def test_log_values_refuses_what_has_no_log():
    assert vp.log_values([1.0, math.e]) == pytest.approx([0.0, 1.0])
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError):
            vp.log_values([1.0, bad])


def test_sd_log_is_the_sd_of_the_logs():
    assert vp.sd_log([1.0, math.e, math.e ** 2]) == pytest.approx(1.0)
    # Scale-free: the same spread in MB/s or in GB/s.
    xs = [3.0, 4.5, 2.2, 3.9]
    assert vp.sd_log(xs) == pytest.approx(vp.sd_log([1000 * x for x in xs]))
    assert math.isnan(vp.sd_log([2.0]))


def test_adjacent_spread_ignores_a_drift_that_sd_sees():
    # A steady drift of 10% a run: the sd of the logs is large, neighbours differ alike.
    drift = [math.exp(0.1 * i) for i in range(20)]
    assert vp.sd_log(drift) > 0.5
    assert vp.adjacent_spread(drift) == pytest.approx(0.0, abs=1e-12)
    # Alternating values: the adjacent spread is the step over sqrt 2 (its sd about 0.06
    # given the mean of the differences is taken out).
    alt = [1.0, math.e] * 10
    diffs = [1.0, -1.0] * 9 + [1.0]
    m = sum(diffs) / len(diffs)
    want = math.sqrt(sum((d - m) ** 2 for d in diffs) / (len(diffs) - 1)) / math.sqrt(2)
    assert vp.adjacent_spread(alt) == pytest.approx(want)


def test_adjacent_spread_equals_the_sd_for_independent_values():
    rng = random.Random(7)
    xs = [math.exp(rng.gauss(0, 0.1)) for _ in range(4000)]
    assert vp.adjacent_spread(xs) == pytest.approx(0.1, rel=0.05)
    assert vp.sd_log(xs) == pytest.approx(0.1, rel=0.05)


def test_adjacent_spread_is_smaller_where_neighbours_move_together():
    rng = random.Random(3)
    xs = [math.exp(0.05 * v) for v in _ar1(3000, 0.8, rng)]
    # AR(1): var = s^2/(1 - phi^2), var of a difference = 2 var (1 - phi).
    assert vp.adjacent_spread(xs) / vp.sd_log(xs) == pytest.approx(math.sqrt(0.2), rel=0.1)


def test_adjacent_df():
    assert math.isnan(vp.adjacent_df(2))
    assert vp.adjacent_df(3) == pytest.approx(8 / 5)
    assert vp.adjacent_df(10_000) / 9_999 == pytest.approx(2 / 3, rel=1e-3)


def test_pair_log_ratios():
    assert vp.pair_log_ratios([2.0, 3.0], [1.0, 3.0]) == pytest.approx([math.log(2), 0.0])
    with pytest.raises(ValueError):
        vp.pair_log_ratios([1.0], [1.0, 2.0])


def test_autocorrelation_of_known_series():
    rng = random.Random(11)
    assert vp.autocorrelation(_ar1(5000, 0.7, rng), 1) == pytest.approx(0.7, abs=0.04)
    assert vp.autocorrelation(_ar1(5000, 0.7, rng), 2) == pytest.approx(0.49, abs=0.05)
    assert vp.autocorrelation([rng.gauss(0, 1) for _ in range(5000)], 1) == pytest.approx(
        0.0, abs=0.04)
    # Alternating: -1, less the estimator's (n - lag)/n shrinkage.
    assert vp.autocorrelation([0.0, 1.0] * 10, 1) == pytest.approx(-19 / 20)
    assert math.isnan(vp.autocorrelation([1.0] * 10, 1))  # no variance
    assert math.isnan(vp.autocorrelation([1.0, 2.0, 3.0], 2))  # one lagged pair
    assert math.isnan(vp.autocorrelation([1.0, 2.0, 3.0], 0))


def test_time_scale_of_known_series():
    rng = random.Random(5)
    # AR(1) 0.9: phi^L < 1/e from L = 10 (1/-ln 0.9 = 9.5).
    ts = vp.time_scale(_ar1(20_000, 0.9, rng), spacing_s=2.0, lags=40)
    assert ts.lag in (9, 10, 11)
    assert ts.seconds == pytest.approx(2.0 * ts.lag)
    white = vp.time_scale([rng.gauss(0, 1) for _ in range(500)], spacing_s=1.5)
    assert white.lag == 1
    assert white.words() == "below 1/e at lag 1 (< 1.5 s)"
    # Two regimes: r_k = (40 - 3k)/40, above 1/e up to lag 8.
    step = [0.0] * 20 + [1.0] * 20
    assert vp.time_scale(step, spacing_s=1.0).lag == 9  # 13/40 < 1/e
    slow = vp.time_scale(step, spacing_s=1.0, lags=5)
    assert slow.lag is None and slow.checked == 5
    assert slow.words() == "above 1/e up to lag 5 (> 5 s)"
    assert vp.time_scale([1.0, 2.0], spacing_s=1.0).lag is None  # too few values


def test_chi2_sd_interval_known_values():
    lo, hi = vp.chi2_sd_interval(1.0, 10)
    # chi2(10): 2.5% 3.247, 97.5% 20.483
    assert lo == pytest.approx(math.sqrt(10 / 20.483), rel=1e-3)
    assert hi == pytest.approx(math.sqrt(10 / 3.247), rel=1e-3)
    assert all(math.isnan(x) for x in vp.chi2_sd_interval(1.0, 0))
    assert all(math.isnan(x) for x in vp.chi2_sd_interval(math.nan, 5))


@pytest.mark.parametrize("adjacent", [False, True])
def test_sd_intervals_cover_the_true_spread(adjacent: bool):
    """95% of intervals hold the true sd, for the plain sd and the adjacent spread with its
    approximate degrees of freedom, on independent normal log values (n = 12)."""
    rng = random.Random(2)
    n, trials, hits = 12, 3000, 0
    for _ in range(trials):
        xs = [math.exp(rng.gauss(0, 0.2)) for _ in range(n)]
        row = (vp.adjacent_row("g", "x", xs) if adjacent else vp.sd_log_row("g", "x", xs))
        hits += row.low <= 0.2 <= row.high
    assert 0.92 <= hits / trials <= 0.975


def test_mean_interval():
    m, lo, hi = vp.mean_interval([1.0, 2.0, 3.0])
    # t(2) 97.5% = 4.303, sd 1
    assert m == 2.0
    assert (lo, hi) == pytest.approx((2 - 4.303 / math.sqrt(3), 2 + 4.303 / math.sqrt(3)),
                                     rel=1e-3)
    m1, lo1, hi1 = vp.mean_interval([5.0])
    assert m1 == 5.0 and math.isnan(lo1) and math.isnan(hi1)


def test_fisher_interval():
    lo, hi = vp.fisher_interval(0.5, 50)
    assert -1 < lo < 0.5 < hi < 1
    assert hi - 0.5 < 0.5 - lo  # skewed towards 0
    assert all(math.isnan(x) for x in vp.fisher_interval(0.5, 3))
    assert all(math.isnan(x) for x in vp.fisher_interval(math.nan, 30))


def test_per_second_spread_is_flat_for_white_noise():
    # White noise: a cell 4 times longer has half the spread, and costs 4 times more.
    assert vp.per_second_spread(0.10, 1.0) == pytest.approx(vp.per_second_spread(0.05, 4.0))
    assert vp.per_second_spread(0.10, 4.0) > vp.per_second_spread(0.10, 1.0)


def test_lag_for_gap():
    times = [10.0 * i for i in range(21)]
    assert vp.lag_for_gap(times, 50.0, 3) == 5
    assert vp.lag_for_gap(times, 0.0, 3) == 0
    # Asked more than the series spans: the largest lag that leaves min_pairs pairs.
    assert vp.lag_for_gap(times, 1000.0, 7) == 21 - 7


def test_balanced_blocks():
    rng = random.Random(1)
    got = vp.balanced_blocks(["a", "b", "c"], 10, rng)
    assert len(got) == 10
    for i in range(0, 9, 3):
        assert sorted(got[i:i + 3]) == ["a", "b", "c"]


def test_table_has_one_row_per_component():
    rows = [vp.sd_row("within", "native: sd", [0.0, 0.1, -0.1, 0.05]),
            vp.mean_row("isotax", "telemetry", [0.01, 0.02, 0.0]),
            vp.Component("load generator", "sharing", "note", 0, math.nan, note="none")]
    text = vc.table(rows).splitlines()
    assert len(text) == 2 + len(rows)
    assert text[2].startswith("| within: native: sd | 8.54% | [")
    assert text[2].endswith("| 4 |  |")
    assert "| +1.00% |" in text[3]
    assert text[4] == "| load generator: sharing |  |  |  | none |"


# -- the interleave phase (benchmarks/interleave.py) ----------------------------------------------

def _interleave():
    path = ROOT / "benchmarks" / "interleave.py"
    spec = importlib.util.spec_from_file_location("interleave", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_units_runs_are_blocked_or_alternated():
    il = _interleave()
    assert il.sequence("blocked", "a", "b", 3) == ["a", "a", "a", "b", "b", "b"]
    assert il.sequence("alternated", "b", "a", 2) == ["b", "a", "b", "a"]
    assert il.probe_s(1000) > 0


def test_the_interleave_rows_find_a_covariate_that_explains_the_pairs():
    """Synthetic units: the env's runs are slowed by the probe's load, so the pair moves
    with the covariate (r near 1), and the alternated units are made quieter than the
    blocked ones: the rows must say both."""
    il = _interleave()
    rng = random.Random(3)
    runs, t = [], 0.0
    for unit in range(60):
        design = il.DESIGNS[unit % 2]
        noise = 0.02 if design == "alternated" else 0.10
        for i, env in enumerate(il.sequence(design, "native", "runc", 2)):
            load = rng.gauss(0, 0.1) if env == "runc" else 0.0
            value = 100 * math.exp(rng.gauss(0, noise) - (load if env == "runc" else 0))
            runs.append(vp.Run(il.PHASE, env, {}, value, t, t, t + 1.0,
                               {"unit": unit, "design": design, "index": i,
                                "probe": 0.01 * math.exp(load)}))
            t += 1.0
    rows = {r.name: r for r in il.analyse_interleave(runs, "native", "runc", 2)}
    assert rows["alternated: pair sd"].estimate < rows["blocked: pair sd"].estimate
    assert rows["alternated: pair sd"].n == 30 and rows["blocked: pair sd"].n == 30
    r = rows["host-load probe vs pair: correlation"]
    assert r.estimate < -0.5 and r.high < 0  # the load slows the env: pair falls as it rises
    # An incomplete unit (a failed run) is left out.
    assert len(il.units(runs[:-1], "native", "runc", "alternated")) == 29


def test_kalibera_jones_puts_runs_in_a_cell_only_where_the_variance_is_within_it():
    """Blocked cells of 4 runs: when the noise is run to run, runs per cell pay (optimum
    above 1); when it comes cell by cell, one run per cell is enough (optimum near 0)."""
    il = _interleave()
    rng = random.Random(5)

    def runs(run_sd: float, cell_sd: float) -> list:
        out, t = [], 0.0
        for unit in range(40):
            for env in ("native", "runc"):
                shift = rng.gauss(0, cell_sd)
                t += 0.5  # the cell's own cost: 0.5 s
                for i in range(4):
                    start = t - 0.5 if i == 0 else t
                    out.append(vp.Run(il.PHASE, env, {}, 100 * math.exp(shift + rng.gauss(
                        0, run_sd)), start, t, t + 0.25, {"unit": unit, "design": "blocked",
                                                          "index": i, "probe": 0.01}))
                    t += 0.25
        return out

    def best(rows: list, env: str) -> float:
        return next(r.estimate for r in rows if r.group.endswith(env)
                    and r.name == "optimal runs per cell")

    white = il.kalibera_jones(runs(0.15, 0.01), "native", "runc", 4)
    lumpy = il.kalibera_jones(runs(0.01, 0.15), "native", "runc", 4)
    assert best(white, "native") > 2 and best(lumpy, "native") < 0.5
    assert next(r for r in white if r.name.startswith("within")).estimate == \
        pytest.approx(0.15, rel=0.2)
