"""Adaptive repetitions (plan [adaptive], analysis.adaptive): the pure decisions and the
plan's checks."""

from __future__ import annotations

import math

import pytest
from support import ADAPTIVE_PLAN

from isotax.analysis import adaptive
from isotax.analysis.adaptive import BUDGET_REACHED, CAP_REACHED, FAILING, TARGET_MET
from isotax.analysis.stats import Ratio
from isotax.model import CellKey, CellStatus, Sample
from isotax.plan import Adaptive, PlanError, parse_plan
from isotax.store.base import CellRecord
from isotax.telemetry import envcpu

# -- pure decisions ----------------------------------------------------------------------------

_ids = iter(range(1, 1 << 30))


def _cell(env: str, rep: int, values: dict[str, float], status: CellStatus = CellStatus.OK,
          secs: float = 1.0, point: int = 1, warmup: bool = False) -> CellRecord:
    samples = tuple(Sample(m, v, "u", m != "latency") for m, v in values.items())
    return CellRecord(next(_ids), CellKey(env, "w", {"p": point}, rep, warmup), "1", status,
                      "" if status is CellStatus.OK else "broke", 100.0, 100.0 + secs,
                      samples if status is CellStatus.OK else ())


def _both(rep: int, env_value: float, base_value: float, point: int = 1,
          secs: float = 1.0) -> list[CellRecord]:
    return [_cell("native", rep, {"tput": base_value, envcpu.METRIC: 0.0}, point=point, secs=secs),
            _cell("runc", rep, {"tput": env_value, envcpu.METRIC: 0.3}, point=point, secs=secs)]


def test_half_width_is_half_the_interval_as_a_fraction_of_the_ratio() -> None:
    assert adaptive.half_width(Ratio(0.5, 0.48, 0.52, True)) == pytest.approx(0.04)
    assert math.isnan(adaptive.half_width(Ratio(0.5, math.nan, math.nan, True)))


def test_assess_counts_only_passing_measured_cells_and_skips_what_has_no_ratio() -> None:
    cells = [_cell("native", 1, {"tput": 100, "errors": 0}, warmup=True),
             _cell("runc", 1, {"tput": 1, "errors": 5}, warmup=True)]
    for rep, (e, b) in enumerate([(90, 100), (91, 101), (89, 99)], start=1):
        cells += [_cell("native", rep, {"tput": b, "errors": 0, envcpu.METRIC: 0.1}),
                  _cell("runc", rep, {"tput": e, "errors": 2, envcpu.METRIC: 0.4})]
    cells += [_cell("runc", 4, {}, CellStatus.FAILED, secs=2.0),
              _cell("native", 4, {"tput": 100}, secs=3.0)]
    p = adaptive.assess(cells, "native", 0.02, fixed=3, seed=1)
    # one ratio: tput (errors has a baseline mean of 0; the environment's own CPU is no ratio)
    assert [(w.environment, w.metric) for w in p.widths] == [("runc", "tput")]
    w = p.widths[0]
    assert (w.n, w.n_baseline) == (3, 4) and w.ratio == pytest.approx(90 / 100, rel=0.01)
    assert w.met == (w.half_width <= 0.02)
    assert p.repetitions == {("native", "w", "p=1"): 4, ("runc", "w", "p=1"): 4}
    assert (p.spent_s, p.added_cells) == (5.0, 2)
    assert p.added_failures == {("runc", "w", "p=1"): 1, ("native", "w", "p=1"): 0}


def test_next_round_chases_unmet_points_with_their_baseline_until_the_cap() -> None:
    cells = [c for rep, (e, b) in enumerate([(80, 100), (95, 101), (88, 99)], start=1)
             for c in _both(rep, e, b)]
    cells += [c for rep in (1, 2, 3) for c in _both(rep, 50.0, 100.0, point=2)]  # exact: met
    settings = Adaptive(target=0.02, max_repetitions=4)
    p = adaptive.assess(cells, "native", 0.02, 3, 1)
    d = adaptive.next_round(p, "native", settings)
    assert d.ended is None
    assert sorted(d.points) == [("native", "w", "p=1"), ("runc", "w", "p=1")]
    cells += _both(4, 90, 100)
    d = adaptive.next_round(adaptive.assess(cells, "native", 0.02, 3, 1), "native", settings)
    assert d == adaptive.Decision((), CAP_REACHED)


def test_next_round_ends_when_every_ratio_meets_the_target() -> None:
    cells = [c for rep in (1, 2, 3) for c in _both(rep, 90.0 + rep / 100, 100.0)]
    p = adaptive.assess(cells, "native", 0.02, 3, 1)
    assert all(w.met for w in p.widths)
    assert adaptive.next_round(p, "native", Adaptive(target=0.02, budget_s=60)).ended == \
        TARGET_MET


def test_the_budget_goes_to_the_points_farthest_from_the_target_first() -> None:
    cells = []
    for rep in (1, 2, 3):
        cells += _both(rep, [80, 95, 88][rep - 1], 100, point=1, secs=2.0)  # very wide
        cells += _both(rep, [90, 92, 91][rep - 1], 100, point=2, secs=2.0)  # a little wide
    p = adaptive.assess(cells, "native", 0.005, 3, 1)
    assert not any(w.met for w in p.widths)
    # room for one pair (runc + native, 2 s each): the widest point
    d = adaptive.next_round(p, "native", Adaptive(target=0.005, budget_s=5))
    assert sorted(d.points) == [("native", "w", "p=1"), ("runc", "w", "p=1")]
    d = adaptive.next_round(p, "native", Adaptive(target=0.005, budget_s=9))
    assert len(d.points) == 4
    d = adaptive.next_round(p, "native", Adaptive(target=0.005, budget_s=3))
    assert d == adaptive.Decision((), BUDGET_REACHED)
    cells += _both(4, 90, 100, secs=2.5)  # 5 s of the budget spent
    d = adaptive.next_round(adaptive.assess(cells, "native", 0.005, 3, 1), "native",
                            Adaptive(target=0.005, budget_s=6))
    assert d.ended == BUDGET_REACHED


def test_a_point_whose_added_cells_keep_failing_is_not_chased() -> None:
    cells = [c for rep, (e, b) in enumerate([(80, 100), (95, 101), (88, 99)], start=1)
             for c in _both(rep, e, b)]
    cells += [_cell("runc", 4, {}, CellStatus.FAILED), _cell("native", 4, {"tput": 100}),
              _cell("runc", 5, {}, CellStatus.FAILED), _cell("native", 5, {"tput": 100})]
    p = adaptive.assess(cells, "native", 0.02, 3, 1)
    assert adaptive.next_round(p, "native", Adaptive(target=0.02, budget_s=600)).ended == FAILING


def test_rounds_are_shuffled_with_the_seed() -> None:
    pts = [(e, "w", f"p={i}") for e in ("a", "b") for i in range(5)]
    one = adaptive.round_order(pts, 1, 1)
    assert one == adaptive.round_order(list(reversed(pts)), 1, 1) and sorted(one) == sorted(pts)
    assert len({tuple(adaptive.round_order(pts, 1, n)) for n in range(1, 6)}) > 1


def test_the_budget_gate_closes_once_the_budget_is_spent() -> None:
    assert adaptive.budget_gate(0.0, None)()
    assert adaptive.budget_gate(10.0, 60.0)()
    assert not adaptive.budget_gate(60.0, 60.0)()


@pytest.mark.parametrize(("table", "expected"), [
    ("[adaptive]\ntarget = 2", "adaptive.target: 2.0 is not a fraction of the ratio; give e.g."),
    ("[adaptive]\ntarget = 0.02", "[adaptive] needs a budget: set budget_s"),
    ("[adaptive]\ntarget = 0.02\nmax_repetitions = 3",
     "adaptive.max_repetitions (3) leaves no room above repetitions (3)"),
    ("[adaptive]\ntarget = 0.02\nbudget_s = 0", "adaptive.budget_s: 0.0 is no time"),
])
def test_bad_adaptive_tables_get_one_line(table: str, expected: str, spread: None) -> None:
    with pytest.raises(PlanError) as e:
        parse_plan(ADAPTIVE_PLAN.format(adaptive=table, params="{}"), "p.toml")
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_budget_goes_first_to_ratios_that_only_lack_runs() -> None:
    """Under a budget that holds one pair: a point already within the target at n=3 (short of
    min_repetitions) is confirmed before a point far from it is chased."""
    def w(pkey: str, hw: float) -> adaptive.RatioWidth:
        return adaptive.RatioWidth("runc", "wl", pkey, "m", 1.0, hw, 3, 3, False)

    points = [("runc", "wl", "a"), ("native", "wl", "a"), ("runc", "wl", "b"),
              ("native", "wl", "b")]
    progress = adaptive.Progress(
        (w("a", 0.30), w("b", 0.015)), dict.fromkeys(points, 3), dict.fromkeys(points, 1.0),
        0.0, 0, {})
    d = adaptive.next_round(progress, "native", Adaptive(target=0.02, budget_s=2.5))
    assert sorted(d.points) == [("native", "wl", "b"), ("runc", "wl", "b")]
    roomy = adaptive.next_round(progress, "native", Adaptive(target=0.02, budget_s=10))
    assert len(roomy.points) == 4
