"""Adaptive repetitions (plan [adaptive], analysis.adaptive): the pure decisions, and real runs
through the Runner on the native environment with a workload whose spread the test sets."""

from __future__ import annotations

import json
import math
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import ClassVar

import pytest
from support import ran

from isotax import protocols
from isotax.analysis import adaptive
from isotax.analysis.adaptive import BUDGET_REACHED, CAP_REACHED, FAILING, TARGET_MET
from isotax.analysis.report_data import analyze
from isotax.analysis.stats import Ratio
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellKey, CellStatus, Sample
from isotax.plan import Adaptive, PlanError, parse_plan
from isotax.protocols import Instance, LoadGen, Params, ParamSpec
from isotax.report import json_report, markdown
from isotax.run.runner import Runner, new_run_id
from isotax.store.base import CellRecord
from isotax.store.sqlite import SQLiteStore
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


_PLAN = """
name = "adapt"
seed = 5
repetitions = 3
warmups = 0
{adaptive}
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "native2"
kind = "native"
[[workloads]]
name = "test-spread"
params = {params}
"""


@pytest.mark.parametrize(("table", "expected"), [
    ("[adaptive]\ntarget = 2", "adaptive.target: 2.0 is not a fraction of the ratio; give e.g."),
    ("[adaptive]\ntarget = 0.02", "[adaptive] needs a budget: set budget_s"),
    ("[adaptive]\ntarget = 0.02\nmax_repetitions = 3",
     "adaptive.max_repetitions (3) leaves no room above repetitions (3)"),
    ("[adaptive]\ntarget = 0.02\nbudget_s = 0", "adaptive.budget_s: 0.0 is no time"),
])
def test_bad_adaptive_tables_get_one_line(table: str, expected: str, spread: None) -> None:
    with pytest.raises(PlanError) as e:
        parse_plan(_PLAN.format(adaptive=table, params="{}"), "p.toml")
    assert expected in str(e.value) and "\n" not in str(e.value)


# -- real runs ---------------------------------------------------------------------------------


class SpreadWorkload:
    """A synthetic metric with a spread the test sets: a value drawn from a seeded normal
    distribution (mean 100, sd = spread x 100) goes through a real command in the instance
    (`sleep; echo`) and back. Not a benchmark: it controls the variance adaptive repetitions
    see, which a real tool on this shared host cannot."""

    name: ClassVar[str] = "test-spread"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "test only: a synthetic value with a set spread"
    params: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("spread", float, 0.01, "relative sd of the value"),
        ParamSpec("sleep_s", float, 0.0, "seconds each run takes"),
    )
    tools: ClassVar[dict[str, tuple[str, ...]]] = {}
    needs_loadgen: ClassVar[bool] = False
    rng = random.Random(0)
    calls = 0
    interrupt_at: int | None = None

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        pass

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        SpreadWorkload.calls += 1
        if SpreadWorkload.calls == SpreadWorkload.interrupt_at:
            raise KeyboardInterrupt
        value = abs(SpreadWorkload.rng.gauss(100.0, 100.0 * params["spread"]))
        out = inst.exec(["sh", "-c", f"sleep {params['sleep_s']}; echo {value!r}"],
                        timeout=30).check()
        return [Sample("value", float(out.stdout), "units")]


@pytest.fixture
def spread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(protocols.WORKLOADS, SpreadWorkload.name, SpreadWorkload)
    SpreadWorkload.rng = random.Random(7)
    SpreadWorkload.calls, SpreadWorkload.interrupt_at = 0, None


def _reps(store: SQLiteStore, run_id: str) -> dict[tuple[str, str], list[int]]:
    """(environment, params key) -> its measured repetition numbers in commit order."""
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for c in store.cells(run_id):
        out[(c.key.environment, c.key.params_key)].append(c.key.repetition)
    return out


def test_small_spread_meets_the_target_before_the_cap(tmp_path: Path, spread: None) -> None:
    text = _PLAN.format(adaptive="[adaptive]\ntarget = 0.02\nmax_repetitions = 40",
                        params="{ spread = 0.04 }")
    with ran(text, ImageArtifacts("t", tmp_path / "i"), tmp_path) as (store, run_id):
        meta = store.run_meta(run_id)["adaptive"]
        reps = _reps(store, run_id)
        md = markdown.render(analyze(store, run_id))
    assert meta["ended"] == TARGET_MET and meta["met"] == 1
    (r,) = meta["ratios"]
    assert r["met"] and r["half_width"] <= 0.02 and r["environment"] == "native2"
    # more than the 3 fixed repetitions were needed, far fewer than the cap
    assert 3 < r["n"] < 40 and r["n"] == r["n_baseline"]
    for got in reps.values():  # the baseline ran alongside; numbers continue 1, 2, 3, 4, ...
        assert sorted(got) == list(range(1, r["n"] + 1))
    assert meta["rounds"] == r["n"] - 3 and meta["added_cells"] == 2 * (r["n"] - 3)
    assert "## Repetitions" in md and "**Ended: target met.**" in md
    assert "1 of 1 ratios met the target" in md


def test_large_spread_ends_at_the_cap_and_says_not_met(tmp_path: Path, spread: None) -> None:
    text = _PLAN.format(adaptive="[adaptive]\ntarget = 0.02\nmax_repetitions = 8",
                        params="{ spread = [0.002, 0.3] }")
    with ran(text, ImageArtifacts("t", tmp_path / "i"), tmp_path) as (store, run_id):
        meta = store.run_meta(run_id)["adaptive"]
        reps = _reps(store, run_id)
        d = analyze(store, run_id)
    assert meta["ended"] == CAP_REACHED
    by_spread = {r["params"]: r for r in meta["ratios"]}
    tight, wide = by_spread["sleep_s=0.0,spread=0.002"], by_spread["sleep_s=0.0,spread=0.3"]
    # tight enough after the fixed rounds, but met only once both sides have
    # min_repetitions (5 by default): two rounds were added for it, then no more
    assert tight["met"] and tight["n"] == 5
    assert not wide["met"] and wide["n"] == wide["n_baseline"] == 8
    assert Counter(len(v) for v in reps.values()) == Counter({5: 2, 8: 2})
    # the report's own interval is the one adaptive repetitions judged
    row = next(r for r in d.rows if r.params_key == wide["params"])
    rr = d.cells[(row, "native2")].ratio
    assert rr is not None and adaptive.half_width(rr) == pytest.approx(wide["half_width"])
    md = markdown.render(d)
    section = md.split("## Repetitions")[1].split("\n## ")[0]
    assert "**Ended: repetition cap reached.**" in section and "**not met**" in section
    assert "1 of 2 ratios met the target" in section
    doc = json.loads(json_report.render(d))
    assert doc["adaptive"]["ended"] == CAP_REACHED and len(doc["adaptive"]["ratios"]) == 2


def test_the_time_budget_ends_it_with_rounds_kept_balanced(tmp_path: Path,
                                                           spread: None) -> None:
    text = _PLAN.format(adaptive="[adaptive]\ntarget = 0.02\nbudget_s = 1.5",
                        params="{ spread = 0.3, sleep_s = 0.1 }")
    with ran(text, ImageArtifacts("t", tmp_path / "i"), tmp_path) as (store, run_id):
        meta = store.run_meta(run_id)["adaptive"]
        cells = store.cells(run_id)
    assert meta["ended"] == BUDGET_REACHED and meta["added_cells"] >= 2
    longest = max(c.ended - c.started for c in cells)
    assert meta["spent_s"] <= 1.5 + longest  # no cell started once the budget was spent
    n = Counter(c.key.environment for c in cells)
    assert abs(n["native"] - n["native2"]) <= 1


def test_resume_of_an_interrupted_adaptive_run_goes_on(tmp_path: Path, spread: None) -> None:
    text = _PLAN.format(adaptive="[adaptive]\ntarget = 0.02\nmax_repetitions = 6",
                        params="{ spread = 0.3 }")
    plan = parse_plan(text)
    store = SQLiteStore(tmp_path / "isotax.db")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, text, plan.seed, {"hostname": "h"})
    image = ImageArtifacts("t", tmp_path / "i")
    try:
        SpreadWorkload.interrupt_at = 6 + 3  # in the second added round
        assert Runner(plan, text, store, image, log=lambda m: None).run(run_id) == "interrupted"
        first = store.cells(run_id)
        assert len(first) == 8 and store.run_meta(run_id)["adaptive"]["ended"] is None
        assert markdown.render(analyze(store, run_id)).count("**Not finished**") == 1
        SpreadWorkload.interrupt_at = None
        assert Runner(plan, text, store, image, log=lambda m: None).run(run_id) == "complete"
        after = store.cells(run_id)
        meta = store.run_meta(run_id)["adaptive"]
    finally:
        store.close()
    assert [c.id for c in after[:8]] == [c.id for c in first]  # kept as they were
    assert len({c.key.ident for c in after}) == len(after) == 12
    assert meta["ended"] == CAP_REACHED and meta["rounds"] == 3
    assert all(sorted(v) == list(range(1, 7)) for v in _reps_of(after).values())


def _reps_of(cells: list[CellRecord]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for c in cells:
        out[c.key.environment].append(c.key.repetition)
    return out


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
