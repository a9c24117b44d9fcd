"""The added rounds go where the seconds left can finish a decision, the canary stops at the
pairs its floor needs, and the confidence sequence's mixture width comes from this host's
stored runs of the point (issue 28: the budget goes where it decides something)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest

from isotax.analysis import borrowing, sequential
from isotax.analysis.margins import IN_RUN, Margin
from isotax.analysis.verdicts import (
    MIN_PRIOR_G,
    NOTHING_BORROWED,
    PRIOR_G,
    Borrowed,
    confidence_sequence,
    prior_width,
    radius,
)
from isotax.model import CellKey, CellStatus, Sample
from isotax.store.base import CellRecord

_ids = itertools.count(1)


def _cells(values: dict[str, list[float]], point: int, secs: float = 1.0) -> list[CellRecord]:
    """One point's cells: per environment its values, one per round (native at 100)."""
    out = []
    for env, vs in values.items():
        for rep, v in enumerate(vs, 1):
            out.append(CellRecord(next(_ids), CellKey(env, "w", {"p": point}, rep), "1",
                                  CellStatus.OK, "", 0.0, secs,
                                  (Sample("tput", v, "u", True),)))
    return out


def _margin(value: float, source: str = "plan") -> Callable[..., Margin]:
    def rules(row: tuple[str, str, str], env: str = "") -> Margin:
        return Margin(value, source)
    return rules


def _two_ratios() -> sequential.Progress:
    """Two undecided ratios at 4 pairs against ±10%: 'near' (about 1.00, 5% spread: a few
    more pairs decide it) and 'far' (about 1.06, 8% spread: dozens more)."""
    near = [100 * math.exp(x) for x in (0.06, -0.06, 0.04, -0.05)]
    far = [100 * math.exp(x) for x in (0.14, -0.02, 0.12, -0.01)]
    cells = _cells({"native": [100.0] * 4, "near": near}, 1) + \
        _cells({"native": [100.0] * 4, "far": far}, 2)
    return sequential.assess(cells, "native", _margin(0.10), 1, 80)


def test_the_rounds_go_to_what_the_seconds_left_can_finish() -> None:
    p = _two_ratios()
    by = {r.environment: r for r in p.ratios}
    assert not by["near"].verdict.verdict.decided and not by["far"].verdict.verdict.decided
    near_s = 2.0 * (by["near"].projected - 4)  # a pair is two 1-second cells
    far_s = 2.0 * ((by["far"].projected or by["far"].long_shot) - 4)
    assert near_s < far_s
    # room for the near one's decision, not for both: only the near one runs
    tight = sequential.next_round(p, "native", 80, near_s + 2.0)
    assert set(tight.points) == {("near", "w", "p=1"), ("native", "w", "p=1")}
    # room for both: both run
    both = sequential.next_round(p, "native", 80, near_s + far_s + 4.0)
    assert {("near", "w", "p=1"), ("far", "w", "p=2")} <= set(both.points)
    # room for neither's decision: still the cheapest, never nothing while a round fits
    least = sequential.next_round(p, "native", 80, 2.0)
    assert set(least.points) == {("near", "w", "p=1"), ("native", "w", "p=1")}
    assert sequential.next_round(p, "native", 80, 1.0).ended == sequential.TIME_SPENT


def test_the_canary_stops_at_the_pairs_its_floor_needs() -> None:
    """Below MIN_AA_PAIRS the canary runs first; at them, undecided and chasable, no more."""
    aa = [100 * math.exp(x) for x in (0.03, -0.02, 0.04, -0.03)]
    for pairs in (2, 3):
        cells = _cells({"native": [100.0] * pairs, "native-aa": aa[:pairs]}, 1)
        p = sequential.assess(cells, "native", _margin(0.03), 1, 80)
        (r,) = p.ratios
        assert not r.verdict.verdict.decided
        chased = sequential.chased(p, "native", 80, canary="native-aa")
        if pairs < 3:
            assert [c.environment for c in chased] == ["native-aa"]
        else:
            assert sequential.chasable(r) and chased == []
            assert sequential.next_round(p, "native", 80, 100.0, "native-aa").ended == \
                sequential.CANNOT_DECIDE


def test_prior_width_is_the_squared_distance_to_the_margin_in_spreads() -> None:
    assert prior_width(0.0, 0.10, 0.05) == pytest.approx(math.log1p(0.05) ** 2 / 0.01)
    assert prior_width(math.log(0.3), 0.05, 0.05) == PRIOR_G  # far away: the widest
    assert prior_width(math.log1p(0.05), 0.10, 0.05) == MIN_PRIOR_G  # on the edge
    assert prior_width(math.nan, 0.10, 0.05) == PRIOR_G  # no history
    # tightest where the decision is made: at 30 pairs narrower than PRIOR_G's
    g = prior_width(0.0, 0.10, 0.05)
    assert radius(30, 0.10, borrowed=Borrowed(0.0, 0.0, "", g=g)) < 0.92 * radius(30, 0.10)


def test_the_width_comes_from_the_history_never_from_this_runs_canary() -> None:
    stored = Borrowed(12.0, 12 * 0.10**2, "stored", center=0.0)
    fixed = borrowing.with_prior(stored, Margin(0.05, "A/A run r1"))
    assert fixed.g == pytest.approx(prior_width(0.0, 0.10, 0.05)) and fixed.g < PRIOR_G
    assert borrowing.with_prior(stored, Margin(0.05, IN_RUN)).g == PRIOR_G
    assert borrowing.with_prior(NOTHING_BORROWED, Margin(0.05, "plan")) == NOTHING_BORROWED
    kept = Borrowed(12.0, 0.12, "a stored verdict", g=0.7)  # no center: as it was stored
    assert borrowing.with_prior(kept, Margin(0.05, "plan")).g == 0.7
    # today's pairs refuse the spread (F test): the width stays, the history chose it
    refused = borrowing.usable(fixed, 0.60, 6)
    assert refused.dof == 0 and refused.g == fixed.g


def test_the_runner_uses_the_width_the_history_chose() -> None:
    """assess with a stored mean at 1.00 and a stored A/A margin: the interval is the one of
    the narrower mixture (and the verdict record keeps its width for the report)."""
    d = [0.01, -0.02, 0.03, -0.01, 0.0, 0.02]
    cells = _cells({"native": [100.0] * 6, "runc": [100 * math.exp(x) for x in d]}, 1)
    stored = Borrowed(12.0, 12 * 0.02**2, "stored", center=0.0)
    lent = {("runc", "w", "p=1"): stored}
    p = sequential.assess(cells, "native", _margin(0.05, "A/A run r1"), 1, 80, borrowed=lent)
    (r,) = p.ratios
    g = prior_width(0.0, stored.sd, 0.05)
    assert r.borrowed.g == pytest.approx(g)
    want = confidence_sequence(d, borrowed=Borrowed(12.0, stored.ss, "", g=g))
    assert r.verdict.low == pytest.approx(math.exp(want.low))
    assert sequential.ratio_fields(r, None, 80, 1)["prior_g"] == pytest.approx(g)
