from __future__ import annotations

import math

import pytest

from isotax.analysis.stats import ratio, summarize


def test_summary_matches_textbook_t_interval() -> None:
    s = summarize([10.0, 11.0, 12.0])
    assert s.n == 3 and s.mean == 11.0 and s.sd == pytest.approx(1.0)
    # t(0.975, 2) = 4.302653; half-width = 4.302653 * 1 / sqrt(3)
    assert s.ci_high - s.mean == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)


def test_single_value_has_no_interval() -> None:
    s = summarize([5.0])
    assert s.sd == 0.0 and math.isnan(s.ci_low)


def test_clear_slowdown_is_worse_not_noise() -> None:
    r = ratio([80, 81, 79, 80.5], [100, 101, 99, 100.5], higher_is_better=True, seed=1)
    assert r.ratio == pytest.approx(0.80, abs=0.01)
    assert r.ci_low < r.ratio < r.ci_high < 1.0
    assert r.within_noise is False and r.verdict == "worse"
    assert r.delta_pct == pytest.approx(-20, abs=1)


def test_overlap_is_within_noise() -> None:
    r = ratio([99, 102, 100, 98], [100, 101, 99, 100.5], seed=1)
    assert r.within_noise is True and r.verdict == "within noise"


def test_lower_is_better_direction() -> None:
    r = ratio([2.0, 2.1, 1.9], [1.0, 1.05, 0.95], higher_is_better=False, seed=1)
    assert r.verdict == "worse" and r.ratio == pytest.approx(2.0)


def test_bootstrap_is_reproducible_with_seed() -> None:
    a, b = [1.0, 1.2, 0.9, 1.1], [1.0, 1.05, 0.97, 1.02]
    # repr: a Ratio holds NaNs (no noise floor here), and Python 3.13's dataclass == compares
    # field by field, where NaN != NaN.
    assert repr(ratio(a, b, seed=7)) == repr(ratio(a, b, seed=7))


def test_too_few_runs() -> None:
    r = ratio([1.0], [1.0, 1.1])
    assert r.within_noise is None and r.verdict == "too few runs"


def test_outliers_by_modified_z_score() -> None:
    from isotax.analysis.stats import modified_z_scores, outliers

    # the 5th repetition of a real STREAM triad A/A run here (MB/s): one slow run
    triad = [60.0, 60.4, 60.2, 59.4, 47.1]
    (hit,) = outliers(triad)
    assert hit[0] == 4 and hit[1] < -3.5
    assert outliers([60.0, 60.4, 60.2, 59.4, 59.9]) == []
    assert outliers([1.0, 100.0]) == []  # two values: neither can stand out
    # most values equal (MAD 0): the mean absolute deviation stands in, finite
    z = modified_z_scores([5.0, 5.0, 5.0, 5.0, 9.0])
    assert z[:4] == [0.0] * 4 and 3.5 < z[4] < 10
    assert modified_z_scores([2.0, 2.0, 2.0]) == [0.0, 0.0, 0.0]
