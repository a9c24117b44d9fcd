"""Sequential verdicts (plan [verdicts], analysis.sequential and analysis.margins): the pure
decisions on committed cells, the margins, and the plan's checks."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats as scipy_stats

from isotax.analysis import margins, sequential
from isotax.analysis.margins import Margin, Margins
from isotax.analysis.verdicts import MIN_MARGIN, Verdict
from isotax.model import CellKey, CellStatus, Sample
from isotax.plan import PlanError, parse_plan
from isotax.store.base import CellOutcome, CellRecord
from isotax.store.sqlite import SQLiteStore
from isotax.telemetry import envcpu

_ids = iter(range(1, 1 << 30))


def _cell(env: str, rep: int, value: float | None, point: int = 1, secs: float = 1.0,
          status: CellStatus = CellStatus.OK, warmup: bool = False, wl: str = "w"
          ) -> CellRecord:
    samples = () if value is None or status is not CellStatus.OK else (
        Sample("tput", value, "u", True), Sample("lat", 1 / value, "s", False),
        Sample(envcpu.METRIC, 0.1, "CPU-s", False))
    return CellRecord(next(_ids), CellKey(env, wl, {"p": point}, rep, warmup), "1", status,
                      "" if status is CellStatus.OK else "broke", 100.0, 100.0 + secs, samples)


def _two_percent(row: tuple[str, str, str], environment: str = "") -> Margin:
    return Margin(0.02, "plan")


def _rounds(env: str, values: list[float], base: list[float], point: int = 1, start: int = 1,
            secs: float = 1.0) -> list[CellRecord]:
    out = []
    for i, (v, b) in enumerate(zip(values, base, strict=True)):
        out += [_cell("native", start + i, b, point, secs), _cell(env, start + i, v, point, secs)]
    return out


def test_a_big_difference_is_decided_from_three_paired_rounds_and_headline_only() -> None:
    cells = [_cell("native", 1, 50.0, warmup=True), _cell("vm", 1, 1.0, warmup=True)]
    cells += _rounds("vm", [0.41, 0.40, 0.42], [100.0, 101.0, 99.0])
    p = sequential.assess(cells, "native", _two_percent, fixed=3, cap=10)
    assert len(p.ratios) == 1  # the headline (first metric), not lat nor the env's own CPU
    r = p.ratios[0]
    assert (r.metric, r.verdict.verdict, r.verdict.n) == ("tput", Verdict.WORSE, 3)
    assert r.verdict.ratio == pytest.approx(0.0041, rel=0.05)
    assert p.counts() == {"worse": 1, "better": 0, "equivalent": 0, "undecided": 0}
    assert sequential.next_round(p, "native", 10, 100.0).ended == sequential.ALL_DECIDED


def test_values_pair_by_round_and_unpaired_or_failed_ones_are_left_out() -> None:
    cells = _rounds("runc", [100.0, 102.0, 98.0], [100.0, 101.0, 99.0])
    cells += [_cell("native", 4, 100.0), _cell("runc", 4, None, status=CellStatus.FAILED),
              _cell("native", 5, 100.0)]  # the baseline ran for another environment
    p = sequential.assess(cells, "native", _two_percent, fixed=3, cap=10)
    r = p.ratios[0]
    assert r.verdict.n == 3 and r.verdict.verdict is Verdict.UNDECIDED and r.verdict.reason
    assert p.measured[("native", "w", "p=1")] == 5 and p.measured[("runc", "w", "p=1")] == 4
    assert p.next_repetition == 6
    assert (p.added_cells, p.spent_s) == (3, 3.0)
    assert p.added_failures[("runc", "w", "p=1")] == 1


def test_the_next_round_chases_undecided_ratios_cheapest_first_with_their_baseline() -> None:
    # point 1: runc 1.10x with a small spread: a few more pairs decide it (cheap cells)
    # point 2: runc ~1.0 with a large spread: cannot be decided within the cap
    # point 3: crun decided already
    cells = _rounds("runc", [110.0, 105.0, 114.0], [100.0, 100.0, 100.0], point=1)
    cells += _rounds("runc", [100.0, 130.0, 80.0], [100.0, 100.0, 100.0], point=2)
    cells += _rounds("crun", [10.0, 10.1, 9.9], [100.0, 100.0, 100.0], point=3)
    p = sequential.assess(cells, "native", _two_percent, fixed=3, cap=10)
    by = {(r.environment, r.params_key): r for r in p.ratios}
    assert by[("crun", "p=3")].verdict.verdict is Verdict.WORSE
    assert by[("runc", "p=1")].projected is not None and by[("runc", "p=1")].projected <= 10
    assert by[("runc", "p=2")].projected is None
    d = sequential.next_round(p, "native", 10, room_s=100.0)
    assert d.ended is None and set(d.points) == {("runc", "w", "p=1"), ("native", "w", "p=1")}
    # no room for a pair of cells: the time is spent
    assert sequential.next_round(p, "native", 10, room_s=1.5).ended == sequential.TIME_SPENT
    # the cap reached: nothing more can decide them
    assert sequential.next_round(p, "native", 3, room_s=100.0).ended == \
        sequential.CANNOT_DECIDE
    meta = sequential.to_meta({}, 3, 10, p, sequential.TIME_SPENT, 0)
    assert (meta["decided"], meta["total"]) == (1, 2 + 1)
    reasons = {(r["environment"], r["params"]): r["reason"] for r in meta["ratios"]}
    assert "time ran out" in reasons[("runc", "p=1")]
    assert "even 10 pairs would not decide it" in reasons[("runc", "p=2")]
    assert reasons[("crun", "p=3")] == ""


def test_nothing_to_compare_and_failing_points_stop() -> None:
    # (the A/A canary is judged and chased like the others: test_pairing_design)
    cells = [_cell("native", rep, 100.0) for rep in (1, 2, 3)]
    p = sequential.assess(cells, "native", _two_percent, fixed=3, cap=10)
    assert p.ratios == ()
    assert sequential.next_round(p, "native", 10, 100.0).ended == sequential.NOTHING_TO_COMPARE
    cells = _rounds("runc", [110.0, 105.0, 114.0], [100.0, 100.0, 100.0])
    cells += [_cell("native", 4, 100.0), _cell("runc", 4, None, status=CellStatus.FAILED),
              _cell("native", 5, 100.0), _cell("runc", 5, None, status=CellStatus.FAILED)]
    p = sequential.assess(cells, "native", _two_percent, fixed=3, cap=10)
    assert sequential.next_round(p, "native", 10, 100.0).ended == sequential.FAILING


def test_round_order_is_seeded() -> None:
    pts = [("a", "w", "p=1"), ("b", "w", "p=1"), ("c", "w", "p=2")]
    assert sequential.round_order(pts, 1, 4) == sequential.round_order(list(reversed(pts)), 1, 4)
    assert sorted(sequential.round_order(pts, 1, 4)) == sorted(pts)


# -- margins ---------------------------------------------------------------------------------

def test_margins_come_from_the_plan_or_the_aa_floor_never_below_two_percent() -> None:
    row = ("w", "p=1", "tput")
    assert Margins(0.05, {}, {}, None)(row) == Margin(0.05, "plan")
    assert Margins("auto", {}, {}, None)(row).value == MIN_MARGIN
    assert Margins("auto", {row: 0.07}, {}, None)(row) == Margin(0.07, "this run's A/A canary")
    assert Margins("auto", {row: 0.01}, {}, None)(row).value == MIN_MARGIN
    # another point of the same workload and metric stands in
    other = ("w", "p=2", "tput")
    assert Margins("auto", {other: 0.04, ("w", "p=3", "tput"): 0.09}, {}, None)(row).value \
        == 0.09
    # a stored A/A run of this host comes first: it was fixed when the run started
    assert Margins("auto", {row: 0.03}, {row: 0.06}, "r0")(row) == Margin(0.06, "A/A run r0")
    # never wider than MAX_AUTO_MARGIN, and the source says the floor was above it
    wide = Margins("auto", {row: 0.3}, {}, None)(row)
    assert wide.value == margins.MAX_AUTO_MARGIN and "30%" in wide.source
    # the canary is never judged against its own floor
    canary = Margins("auto", {row: 0.07}, {}, None, canary="native-aa")
    assert canary(row, "native-aa").value == MIN_MARGIN and canary(row, "runc").value == 0.07


def test_the_aa_floor_is_the_far_end_of_the_paired_t_interval() -> None:
    cells = _rounds("native-aa", [100.0, 104.0, 97.0, 101.0], [100.0, 101.0, 99.0, 100.0])
    d = [math.log(a / b) for a, b in zip([100.0, 104.0, 97.0, 101.0],
                                          [100.0, 101.0, 99.0, 100.0], strict=True)]
    mean, sd = statistics.mean(d), statistics.stdev(d)
    half = scipy_stats.t.ppf(0.975, 3) * sd / 2
    want = max(abs(math.expm1(mean - half)), abs(math.expm1(mean + half)))
    assert margins.aa_floors(cells, "native", "native-aa")[("w", "p=1", "tput")] == \
        pytest.approx(want)
    # two pairs are too few for a floor
    two = _rounds("native-aa", [100.0, 104.0], [100.0, 101.0])
    assert margins.aa_floors(two, "native", "native-aa") == {}


def test_the_aa_floor_is_read_from_the_run_or_a_stored_run_of_the_same_host(tmp_path) -> None:
    cells = _rounds("native-aa", [100.0, 104.0, 97.0], [100.0, 101.0, 99.0])
    floors = margins.aa_floors(cells, "native", "native-aa")
    assert floors[("w", "p=1", "tput")] > 0.01 and ("w", "p=1", "lat") in floors
    store = SQLiteStore(tmp_path / "isotax.db")
    host = {"hostname": "h", "kernel": "k", "cpu_model": "c", "cpus": 2, "memory_mib": 1}
    store.create_run("aa1", "a", 'name = "a"\naa = true\n', 1, host)
    for c in cells:
        store.commit_cell("aa1", c.key, "1",
                          CellOutcome(c.status, c.reason,
                                      list(c.samples), None), c.started, c.ended)
    store.set_run_status("aa1", "complete", 1.0)
    got, run = margins.stored_aa_floors(store, host, exclude="other")
    assert run.startswith("aa1 (") and got == floors  # named and dated
    assert margins.stored_aa_floors(store, {**host, "cpus": 4}, exclude="other") == ({}, None)


# -- the plan ----------------------------------------------------------------------------------

PLAN = """
name = "p"
repetitions = 3
{extra}
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "compress"
"""


def test_the_plan_checks_verdicts_and_refuses_the_old_adaptive_table() -> None:
    p = parse_plan(PLAN.format(extra="[verdicts]\nmax_repetitions = 8\ndeadline_s = 60"))
    assert p.verdicts.max_repetitions == 8 and p.verdicts.margin == "auto"
    assert parse_plan(PLAN.format(extra="")).verdicts.max_repetitions is None
    with pytest.raises(PlanError, match="below repetitions"):
        parse_plan(PLAN.format(extra="[verdicts]\nmax_repetitions = 2"))
    with pytest.raises(PlanError, match="margin"):
        parse_plan(PLAN.format(extra="[verdicts]\nmargin = 1.5"))
    with pytest.raises(PlanError, match=r"\[adaptive\] was replaced by \[verdicts\]"):
        parse_plan(PLAN.format(extra="[adaptive]\ntarget = 0.02\nbudget_s = 60"))
    assert not math.isnan(parse_plan(PLAN.format(extra="[verdicts]\nmargin = 0.05"))
                          .verdicts.confidence)
