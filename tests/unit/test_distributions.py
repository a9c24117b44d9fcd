"""isotax.parsers.distributions: thinning keeps the quantiles that matter, pooling weighs every run
the same, and a stored label is checked before it is drawn."""

from __future__ import annotations

import math
import random

import pytest

from isotax.parsers import distributions as d


def test_thin_keeps_min_max_and_the_tail() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(4, 0.3) for _ in range(100_000)]
    cdf = d.from_values(values)
    assert d.valid(cdf) and len(cdf) <= 80
    ordered = sorted(values)
    assert cdf[0][0] == pytest.approx(ordered[0], rel=1e-3)
    assert cdf[-1] == [pytest.approx(ordered[-1], rel=1e-3), 1.0]
    # The body's 1/32 steps and the tail's decades survive thinning exactly.
    for q in (0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 0.9999):
        want = ordered[math.ceil(round(q * len(ordered), 9)) - 1]  # smallest with F >= q
        assert d.quantile(cdf, q) == pytest.approx(want, rel=1e-3), q


def test_small_histogram_is_kept_whole() -> None:
    assert d.thin([(4.0, 1), (1.0, 1), (2.0, 2), (3.0, 0)]) == [[1.0, 0.25], [2.0, 0.75],
                                                                   [4.0, 1.0]]
    assert d.thin([(1.0, 0)]) == [] and d.from_values([]) == []


def test_at_and_quantile() -> None:
    cdf = [[1.0, 0.25], [2.0, 0.75], [4.0, 1.0]]
    assert [d.at(cdf, x) for x in (0.5, 1.0, 3.0, 9.0)] == [0.0, 0.25, 0.75, 1.0]
    assert [d.quantile(cdf, q) for q in (0.1, 0.25, 0.5, 1.0)] == [1.0, 1.0, 2.0, 4.0]
    with pytest.raises(ValueError):
        d.quantile([], 0.5)


def test_pooled_weighs_runs_equally() -> None:
    fast = [[1.0, 1.0]]
    slow = [[10.0, 0.5], [20.0, 1.0]]
    assert d.pooled([fast, slow]) == [[1.0, 0.5], [10.0, 0.75], [20.0, 1.0]]
    assert d.pooled([fast]) == fast and d.pooled([[], []]) == []


@pytest.mark.parametrize("bad", [None, [], [[1.0]], [[2.0, 0.5], [1.0, 1.0]],
                                 [[1.0, 0.6], [2.0, 0.5]], [[1.0, 1.5]], [["a", 1.0]],
                                 [[1.0, 0.0]]])
def test_valid_refuses_what_is_not_a_cdf(bad: object) -> None:
    assert not d.valid(bad)


def test_pooled_many_runs_is_thinned_again() -> None:
    rng = random.Random(3)
    runs = [d.from_values(rng.gauss(100 + k, 5) for _ in range(20_000)) for k in range(8)]
    pool = d.pooled(runs)
    assert d.valid(pool) and len(pool) <= 80 < len({v for c in runs for v, _ in c})
    # The median of the mixture lies between the runs' medians.
    medians = [d.quantile(c, 0.5) for c in runs]
    assert min(medians) <= d.quantile(pool, 0.5) <= max(medians)
