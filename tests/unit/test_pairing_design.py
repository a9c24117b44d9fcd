"""Issue 28's design: pairs close in time (blocked rounds), borrowed spread from stored runs,
warm-ups from history, verdicts fixed when the run ends, the budget and what it can decide,
e-BH across ratios."""

from __future__ import annotations

import itertools
import math
import statistics
from pathlib import Path

import pytest

from isotax.analysis import borrowing, ebh, reach, sequential, warmups
from isotax.analysis.margins import Margin
from isotax.analysis.report_data import ReportWarning, analyze
from isotax.analysis.verdicts import (
    NOTHING_BORROWED,
    Borrowed,
    Verdict,
    bayes_factor,
    confidence_sequence,
    radius,
)
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.plan import parse_budget, parse_plan, with_budget
from isotax.run.schedule import schedule
from isotax.store.base import CellOutcome, CellRecord, EnvRecord
from isotax.store.sqlite import SQLiteStore

HOST = {"hostname": "h", "kernel": "k", "cpu_model": "c", "cpus": 2, "memory_mib": 1}
PLAN = """
name = "p"
repetitions = 3
{extra}
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
[[environments]]
name = "crun"
kind = "crun"
[[workloads]]
name = "compress"
params = {{ threads = [1, 2] }}
[[workloads]]
name = "rr"
"""


# -- pairs close in time --------------------------------------------------------------------------

def test_each_round_runs_a_points_environments_back_to_back_in_a_random_order() -> None:
    plan = parse_plan(PLAN.format(extra="warmups = 0"))
    cells = schedule(plan, ["native", "runc", "crun"])
    assert cells == schedule(plan, ["native", "runc", "crun"])  # seeded
    assert len(cells) == 3 * 3 * 3
    orders = []
    for rep in (1, 2, 3):
        round_ = [c for c in cells if c.repetition == rep]
        blocks = [list(g) for _, g in itertools.groupby(
            round_, key=lambda c: (c.workload, c.params_key))]
        assert len(blocks) == 3  # each point once, contiguous
        assert all(sorted(c.environment for c in b) == ["crun", "native", "runc"]
                   for b in blocks)
        orders += [tuple(c.environment for c in b) for b in blocks]
    assert len(set(orders)) > 1  # the order within a block is drawn, not fixed


def test_added_rounds_keep_a_points_cells_together() -> None:
    pts = [("runc", "w", "p=1"), ("native", "w", "p=2"), ("native", "w", "p=1"),
           ("crun", "w", "p=2")]
    order = sequential.round_order(pts, 1, 4)
    assert sorted(order) == sorted(pts)
    assert {order[0][2], order[1][2]} == {order[0][2]} and order[2][2] == order[3][2]
    assert order == sequential.round_order(list(reversed(pts)), 1, 4)


# -- borrowed spread ------------------------------------------------------------------------------

_ids = itertools.count(1)


def _commit(store: SQLiteStore, run: str, env: str, rep: int, value: float, point: int = 1,
            warmup: bool = False) -> None:
    store.commit_cell(run, CellKey(env, "w", {"p": point}, rep, warmup), "1",
                      CellOutcome(CellStatus.OK, "", [Sample("tput", value, "u", True)]), 0.0, 1.0)


def _stored_run(store: SQLiteStore, run: str, ratios: list[float], host: dict = HOST,
                blocks: bool = True, kind: str = "runc") -> None:
    store.create_run(run, "p", 'name = "p"\n', 1, host)
    store.put_environment(EnvRecord(run, "native", "native", True, "",
                                    EnvironmentDescription.from_stored({}), {}, {}))
    store.put_environment(EnvRecord(run, "runc", kind, True, "",
                                    EnvironmentDescription.from_stored({}), {}, {}))
    for rep, r in enumerate(ratios, 1):
        _commit(store, run, "native", rep, 100.0)
        _commit(store, run, "runc", rep, 100.0 * r)
    if blocks:
        store.put_run_meta(run, borrowing.PAIRING, borrowing.BLOCKS)
    store.set_run_status(run, "complete", 1.0)


def test_spread_is_borrowed_from_this_hosts_block_paired_runs_only(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    _stored_run(store, "a", [1.0, 1.1, 0.9, 1.05])  # 3 dof
    _stored_run(store, "b", [1.0, 1.02, 0.98])  # 2 dof
    _stored_run(store, "old", [1.0, 1.5, 0.5], blocks=False)  # shuffled rounds: not lent
    _stored_run(store, "other", [1.0, 1.5, 0.5], host={**HOST, "cpus": 4})
    _stored_run(store, "gvisor", [1.0, 1.5, 0.5], kind="runsc")  # same name, other kind
    lent = borrowing.for_run(borrowing.from_store(store, HOST, "now", "native"),
                             {"native": "native", "runc": "runc"})
    b = lent[("runc", "w", "p=1")]
    want = [math.log(x) for x in (1.0, 1.1, 0.9, 1.05)], [math.log(x) for x in (1.0, 1.02, 0.98)]
    ss = sum(sum((x - sum(d) / len(d)) ** 2 for x in d) for d in want)
    # Lent discounted: the history's sd 1.25 times what it measured.
    assert b.dof == 5 and b.ss == pytest.approx(ss * borrowing.DISCOUNT**2)
    assert borrowing.DISCOUNT == 1.25
    assert "2 stored run(s)" in b.source and sorted(b.runs) == ["a", "b"]


def test_borrowed_dof_stop_at_the_cap(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    for i in range(5):
        _stored_run(store, f"r{i}", [1.0, 1.1, 0.9, 1.05, 0.95])  # 4 dof each
    b = borrowing.for_run(borrowing.from_store(store, HOST, "now", "native"),
                          {"runc": "runc"})[("runc", "w", "p=1")]
    assert b.dof == borrowing.MAX_DOF


def test_a_spread_unlike_todays_is_not_borrowed() -> None:
    hist = Borrowed(12, 12 * 0.01**2, "h")  # a 1% spread
    assert borrowing.usable(hist, 0.012, 5) == hist
    # repr: the empty Borrowed's center is NaN, and Python 3.13's dataclass == compares field
    # by field (3.11 compared tuples, where the same NaN object equals itself).
    assert repr(borrowing.usable(hist, 0.10, 5)) == repr(NOTHING_BORROWED)  # today is noisier
    noisy = Borrowed(12, 12 * 0.2**2, "loaded day")  # a 20% spread
    assert repr(borrowing.usable(noisy, 0.01, 8)) == repr(NOTHING_BORROWED)  # it would only widen


def test_borrowing_narrows_the_interval_and_the_run_records_it() -> None:
    cells = []
    for rep, (b, e) in enumerate([(100, 104), (100, 97), (100, 103)], 1):
        cells += [CellRecord(next(_ids), CellKey(env, "w", {"p": 1}, rep), "1", CellStatus.OK,
                             "", 0, 1, (Sample("tput", v, "u", True),))
                  for env, v in (("native", b), ("runc", e))]

    def two(row: tuple[str, str, str], env: str = "") -> Margin:
        return Margin(0.2, "plan")

    alone = sequential.assess(cells, "native", two, 3, 10).ratios[0]
    lent = Borrowed(12, 12 * 0.03**2, "stored")
    helped = sequential.assess(cells, "native", two, 3, 10,
                               borrowed={("runc", "w", "p=1"): lent}).ratios[0]
    assert alone.verdict.verdict is Verdict.UNDECIDED
    assert helped.verdict.verdict is Verdict.EQUIVALENT and helped.borrowed == lent
    fields = sequential.ratio_fields(helped, None, 10, 3)
    assert fields["borrowed_dof"] == 12 and fields["borrowed_from"] == "stored"


def test_two_pairs_decide_only_with_borrowed_spread() -> None:
    assert math.isinf(radius(2, 0.05))
    assert math.isfinite(radius(2, 0.05, borrowed=Borrowed(4, 4 * 0.05**2, "h")))
    cs = confidence_sequence([0.5, 0.52], borrowed=Borrowed(4, 4 * 0.05**2, "h"))
    assert cs.low > 0.3


# -- warm-ups from history ------------------------------------------------------------------------

def test_warmups_are_skipped_only_where_the_newest_stored_one_did_not_differ(
        tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    _stored_run(store, "older", [1.0, 1.0, 1.0])
    _commit(store, "older", "native", 1, 10.0, warmup=True)  # differed: cold
    _stored_run(store, "newer", [1.0, 1.01, 0.99])
    _commit(store, "newer", "native", 1, 100.0, warmup=True)  # same as measured
    _commit(store, "newer", "runc", 1, 30.0, warmup=True)  # differed
    got = warmups.unneeded(store, HOST, "now", {"native": "native", "runc": "runc"})
    assert set(got) == {("native", "w")} and "newer" in got[("native", "w")]
    assert warmups.unneeded(store, {**HOST, "cpus": 4}, "now", {"native": "native"}) == {}
    plan = parse_plan(PLAN.format(extra=""))
    cells = schedule(plan, ["native", "runc"], no_warmup={("native", "compress")})
    warm = {(c.environment, c.workload) for c in cells if c.warmup}
    assert ("native", "compress") not in warm and ("runc", "compress") in warm


# -- the budget, what it can decide ---------------------------------------------------------------

def test_budget_words_and_what_it_sets() -> None:
    assert parse_budget("60m") == 3600 and parse_budget("1h") == 3600
    assert parse_budget("600") == 600 and parse_budget("90s") == 90
    for bad in ("soon", "10s", "9d"):
        with pytest.raises(ValueError, match="--budget"):
            parse_budget(bad)
    plan = parse_plan(PLAN.format(extra="[verdicts]\nmax_repetitions = 10\ndeadline_s = 600"))
    longer = with_budget(plan, 3600)
    assert longer.verdicts.deadline_s == 3600 and longer.verdicts.max_repetitions == 60
    assert with_budget(plan, 60).verdicts.max_repetitions == 10  # never below the plan's


def test_reach_says_the_smallest_tax_and_the_budget_for_five_percent() -> None:
    def noise(env: str, sd: float, pairs: int, dof: float = 0.0) -> reach.RatioNoise:
        return reach.RatioNoise((env, "w", "p=1"), sd, pairs, 0.02,
                                Borrowed(dof, dof * sd * sd, "h") if dof else NOTHING_BORROWED)

    cell_s = {("native", "w", "p=1"): 1.0, ("runc", "w", "p=1"): 2.0,
              ("crun", "w", "p=1"): 3.0}
    got = reach.reach([noise("runc", 0.05, 10), noise("crun", 0.10, 4)], cell_s, "native")
    assert got is not None and got.pairs == 7 and got.sd == pytest.approx(0.075)
    from isotax.analysis.verdicts import pairs_for_half_width, smallest_decidable
    assert got.smallest == pytest.approx(statistics.median(
        [smallest_decidable(0.05, 10, 0.02), smallest_decidable(0.10, 4, 0.02)]))
    runc, crun = pairs_for_half_width(0.05, 0.05), pairs_for_half_width(0.10, 0.05)
    assert got.budget_5pct_s == runc * 2.0 + crun * 3.0 + max(runc, crun) * 1.0
    # borrowed spread lets fewer pairs decide a smaller tax
    lent = reach.reach([noise("runc", 0.05, 3, dof=12)], cell_s, "native")
    alone = reach.reach([noise("runc", 0.05, 3)], cell_s, "native")
    assert lent is not None and alone is not None and lent.smallest < alone.smallest
    assert "decide a tax of about" in got.words() and "±5%" in got.words()
    hopeless = reach.Reach(0.3, 2, math.inf, None)
    assert "decide no tax of any size;" in hopeless.words()
    assert reach.reach([noise("runc", math.nan, 1)], cell_s, "native") is None
    # Three pairs, nothing borrowed: "437% or more" is true and useless; said in words.
    gross = reach.Reach(0.1, 3, 4.37, 600.0)
    assert "437%" not in gross.words() and "several times" in gross.words()


def test_reach_names_the_budget_per_workload() -> None:
    """The ±5% budget per group of ratios a user would give more time to (a workload), and
    which group no budget reaches, beside the whole run's."""
    def noise(env: str, wl: str, sd: float) -> reach.RatioNoise:
        return reach.RatioNoise((env, wl, "p=1"), sd, 3, 0.02, NOTHING_BORROWED)

    cell_s = {(e, w, "p=1"): 1.0 for e in ("native", "runc") for w in ("xz", "rr", "fio")}
    got = reach.reach([noise("runc", "xz", 0.02), noise("runc", "rr", 0.08)], cell_s,
                      "native")
    assert got is not None and [w for w, _ in got.by_workload] == ["xz", "rr"]
    xz, rr = (s for _, s in got.by_workload)
    assert xz is not None and rr is not None and xz < rr
    assert got.budget_5pct_s == pytest.approx(xz + rr)
    assert f"xz {reach._duration(xz)}, rr {reach._duration(rr)}" in got.words()
    # A spread no budget brings within ±5% makes its workload unreachable, not the others.
    wild = reach.reach([noise("runc", "xz", 0.02), noise("runc", "fio", 5.0)], cell_s,
                       "native")
    assert wild is not None and wild.budget_5pct_s is None
    assert dict(wild.by_workload)["fio"] is None and dict(wild.by_workload)["xz"] is not None
    assert "fio unreachable" in wild.words()


# -- across ratios ---------------------------------------------------------------------------------

def test_ebh_keeps_the_strong_evidence_and_controls_the_rate() -> None:
    assert ebh.ebh([1000.0, 900.0, 1.0, 0.5]) == [0, 1]  # 4 / (0.05 * 2) = 40 <= 900
    assert ebh.ebh([30.0, 1.0]) == []  # 2 / 0.05 = 40 > 30
    assert ebh.e_value(5, 0.01, 0.02, 0.02, NOTHING_BORROWED) == 1.0  # inside the margin
    strong = ebh.e_value(10, math.log(0.7), 0.02, 0.02, NOTHING_BORROWED)
    assert strong > 1e6
    assert strong == bayes_factor(10, math.log(0.7), 0.02, -math.log1p(0.02))



def test_an_e_values_ceiling_is_what_no_effect_can_pass() -> None:
    """One pair with a little history gives at most c^((n + dof - 1) / 2), however large the
    effect (the report says so where e-BH leaves out a 50-fold slowdown); two pairs lift it."""
    lent = Borrowed(3.0, 0.01, "h", g=10.0)
    top = ebh.ceiling(1, lent)
    assert top == pytest.approx(11 ** 1.5)
    huge = ebh.e_value(1, math.log(0.02), math.nan, 0.02, lent)
    assert top * 0.95 < huge <= top  # a 50-fold slowdown: near the ceiling, never past it
    assert ebh.ceiling(1, lent) < ebh.bar(75, 23) < ebh.ceiling(2, lent)
    assert ebh.ceiling(1, NOTHING_BORROWED) == 1.0  # one pair alone proves nothing

# -- verdicts fixed when the run ends --------------------------------------------------------------

def test_the_report_shows_the_verdict_the_run_ended_with(tmp_path: Path) -> None:
    """The run judged runc equivalent within its stored 10% margin; a later A/A run in the
    store would give another margin: the report keeps the run's. Cells added since: the
    report says the verdict was judged again."""
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r", "p", 'name = "p"\nrepetitions = 3\n', 1, HOST)
    store.put_environment(EnvRecord("r", "native", "native", True, "",
                                    EnvironmentDescription.from_stored({}), {}, {}))
    store.put_environment(EnvRecord("r", "runc", "runc", True, "",
                                    EnvironmentDescription.from_stored({}), {}, {}))
    for rep, r in enumerate([1.0, 1.01, 0.99, 1.0, 1.005, 0.995], 1):
        _commit(store, "r", "native", rep, 100.0)
        _commit(store, "r", "runc", rep, 100.0 * r)

    def ten(row: tuple[str, str, str], env: str = "") -> Margin:
        return Margin(0.10, "A/A run x (2026-11-26)")

    p = sequential.assess(store.cells("r"), "native", ten, 3, 10)
    store.put_run_meta("r", "sequential", sequential.to_meta({}, 3, 10, p, "done", 1))
    store.set_run_status("r", "complete", 1.0)
    d = analyze(store, "r")
    v = d.sequential.ratios[0]
    assert v.verdict.verdict is Verdict.EQUIVALENT and v.margin_source.startswith("A/A run x")
    assert not d.rejudged
    _commit(store, "r", "native", 7, 100.0)
    _commit(store, "r", "runc", 7, 300.0)
    d = analyze(store, "r")
    assert d.rejudged and "equivalent -> " in d.rejudged[0]
    assert any(w.kind is ReportWarning.REJUDGED for w in d.warnings)


def test_the_first_screen_says_the_canary_the_reach_and_the_false_verdicts_to_expect(
        tmp_path: Path) -> None:
    from isotax.report.decisions import context_lines, counts_line

    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r", "p", 'name = "p"\nrepetitions = 3\naa = true\n', 1, HOST)
    for env, kind in (("native", "native"), ("native-aa", "native"), ("runc", "runc")):
        store.put_environment(EnvRecord("r", env, kind, True, "",
                                        EnvironmentDescription.from_stored({}), {}, {}))
    # five pairs: at three, no Bayes factor reaches 2 / 0.05 (it is bounded by c at n = 3)
    for rep, (aa, r) in enumerate([(1.0, 0.5), (1.01, 0.51), (0.99, 0.49), (1.0, 0.5),
                                   (1.005, 0.505)], 1):
        _commit(store, "r", "native", rep, 100.0)
        _commit(store, "r", "native-aa", rep, 100.0 * aa)
        _commit(store, "r", "runc", rep, 100.0 * r)
    store.put_run_meta("r", "reach", {"words": "at this host's noise ... about 7% or more"})
    store.set_run_status("r", "complete", 1.0)
    d = analyze(store, "r")
    assert counts_line(d) == ("Verdicts: 1 of 1 headline ratios to native decided (1 worse); "
                              "0 undecided.")  # the canary is not one of the questions
    assert not any(w.kind is ReportWarning.UNDECIDED for w in d.warnings)
    lines = context_lines(d)
    assert lines[0].startswith("A/A canary (native-aa, native measured twice): ")
    assert "none worse or better" in lines[0]
    # Nothing stored before this run: it says it stood on its own pairs, and what comes next.
    assert lines[1].startswith("No history: no stored run of this host lent these ratios")
    # What standing on its own pairs means: nothing below 3 pairs, and how many got there.
    assert "none could be decided with fewer than 3 (1 of 1 reached 3)" in lines[1]
    assert lines[2] == "This host: at this host's noise ... about 7% or more."
    # Each guarantee with the set it is about.
    assert lines[3].startswith("Per ratio: each verdict holds at 95% on its own, so of 1 "
                               "ratios up to 0.1 false worse/better")
    assert "As one set: e-BH keeps 1 of the 1 worse/better" in lines[3]
    from dataclasses import replace

    from isotax.report.decisions import history_line
    assert d.sequential is not None
    asked = [r for r in d.sequential.ratios if r.environment == "runc"]
    lent = [replace(r, borrowed=Borrowed(12.0, 0.1, "run 20261128-x")) for r in asked]
    assert history_line(lent + asked) == (
        "History: 1 of 2 ratios borrowed a spread from this host's stored runs "
        "(run 20261128-x); the others stood on their own pairs.")
    # With the runs named, each is said once, newest first, however many ratios it lent to.
    runs = ("20261130-0555-quick", "20261130-0357-studies"), ("20261130-0555-quick",)
    lent = [replace(r, borrowed=Borrowed(12.0, 0.1, "words", runs=rs))
            for r, rs in zip(asked * 2, runs, strict=True)]
    assert history_line(lent) == (
        "History: 2 of 2 ratios borrowed a spread from this host's stored runs (2 of them, "
        "newest 20261130-0555-quick, 20261130-0357-studies); the others stood on their own "
        "pairs.")
    # A worse verdict decided on one pair with a little history cannot be kept by e-BH
    # across the run's ratios whatever its effect, and the line says so, with what would.
    assert "decided on one pair" not in lines[3]  # five pairs: e-BH kept it
    one = [replace(r, borrowed=Borrowed(3.0, 0.01, "h", g=10.0),
                   verdict=replace(r.verdict, n=1)) for r in asked]
    same = [replace(r, verdict=replace(r.verdict, verdict=Verdict.EQUIVALENT)) for r in one]
    d.sequential = replace(d.sequential, ratios=one * 10 + same * 30)
    d.ebh_kept = []
    capped = context_lines(d)[-1]
    assert "e-BH keeps 0 of the 10 worse/better" in capped
    assert "10 of the 10 were decided on one pair, too few for any effect to give the " \
           "evidence e-BH asks across 40 ratios (an e-value of 80); more fixed rounds" in capped


def test_a_run_starts_by_saying_what_this_hosts_last_run_could_decide(tmp_path: Path) -> None:
    from isotax.run.clock import PhaseClock
    from isotax.run.rounds import AddedRounds

    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("first", "p", 'name = "p"\n', 1, HOST)
    said: list[str] = []
    AddedRounds(parse_plan(PLAN.format(extra="")), store, PhaseClock(), said.append) \
        .say_history("first")
    assert len(said) == 1 and said[0].startswith("no history: this store holds no earlier run")
    assert "none with fewer than 3" in said[0]
    _stored_run(store, "last", [1.0, 1.1, 0.9])
    store.put_run_meta("last", "reach", {"words": "a tax of about 12% or more", "budget_s": 540})
    _stored_run(store, "elsewhere", [1.0, 1.1, 0.9], host={**HOST, "hostname": "other"})
    store.put_run_meta("elsewhere", "reach", {"words": "another host's", "budget_s": 9})
    store.create_run("now", "p", 'name = "p"\n', 1, HOST)
    said.clear()
    AddedRounds(parse_plan(PLAN.format(extra="")), store, PhaseClock(), said.append) \
        .say_history("now")
    assert said == ["this host's last run of this plan (last): a tax of about 12% or more"]
    # a newer run of another plan: named as such, and only where this plan has none
    store.create_run("k8s", "kubernetes", 'name = "kubernetes"\n', 1, HOST)
    store.set_run_status("k8s", "complete", 1.0)
    store.put_run_meta("k8s", "reach", {"words": "a pod's words", "budget_s": 9})
    said.clear()
    AddedRounds(parse_plan(PLAN.format(extra="")), store, PhaseClock(), said.append) \
        .say_history("now")
    assert said == ["this host's last run of this plan (last): a tax of about 12% or more"]
    said.clear()
    AddedRounds(parse_plan(PLAN.format(extra="").replace('name = "p"', 'name = "q"')), store,
                PhaseClock(), said.append).say_history("now")
    assert said == ["this host's last run (k8s, plan kubernetes): a pod's words"]


def test_the_canary_is_chased_to_the_pairs_its_floor_needs_first() -> None:
    """The canary (2 pairs, hopeless against its 2% margin) still gets a third pair before
    the others, cheap or not: the next run's margins come from its floor."""
    cells = []
    for rep, (aa, runc) in enumerate([(1.3, 1.05), (0.7, 1.06)], 1):
        cells += [CellRecord(next(_ids), CellKey(env, "w", {"p": 1}, rep), "1", CellStatus.OK,
                             "", 0, 1, (Sample("tput", v, "u", True),))
                  for env, v in (("native", 100.0), ("native-aa", 100 * aa),
                                 ("runc", 100 * runc))]

    def two(row: tuple[str, str, str], env: str = "") -> Margin:
        return Margin(0.02, "plan")

    p = sequential.assess(cells, "native", two, 2, 10)
    aa = next(r for r in p.ratios if r.environment == "native-aa")
    assert aa.projected is None  # on its own merits it would not be chased
    assert sequential.chased(p, "native", 10)[0].environment == "runc"
    first = sequential.chased(p, "native", 10, canary="native-aa")[0]
    assert first.environment == "native-aa"
    decision = sequential.next_round(p, "native", 10, 100.0, canary="native-aa")
    assert ("native-aa", "w", "p=1") in decision.points


def test_one_fixed_round_stops_an_obvious_ratio_and_gives_the_rest_a_second_pair() -> None:
    """repetitions = 1: with this host's spread borrowed, one pair decides an emulated VM at
    0.01x (no second pair for it), while an undecided ratio gets its second pair first,
    even where its projection says it cannot be decided (one pair has no spread of its
    own) and even beside a cheaper one; without history nothing is decided at one pair."""
    cells = []
    for point, env, v in ((1, "qemu", 1.0), (2, "runc", 97.0), (3, "crun", 99.0)):
        cells += [CellRecord(next(_ids), CellKey(e, "w", {"p": point}, 1), "1", CellStatus.OK,
                             "", 0, secs, (Sample("tput", x, "u", True),))
                  for e, x, secs in (("native", 100.0, 1.0), (env, v, 9.0 if env == "runc"
                                                                 else 1.0))]

    def two(row: tuple[str, str, str], env: str = "") -> Margin:
        return Margin(0.02, "plan")

    history = Borrowed(12.0, 12 * 0.10**2, "stored")  # a 10% pair spread, 12 dof
    lent = {(e, "w", f"p={p}"): history for p, e in ((1, "qemu"), (2, "runc"), (3, "crun"))}
    p = sequential.assess(cells, "native", two, 1, 10, borrowed=lent)
    by = {r.environment: r for r in p.ratios}
    assert by["qemu"].verdict.verdict is Verdict.WORSE and by["qemu"].verdict.n == 1
    assert not by["runc"].verdict.verdict.decided and not by["crun"].verdict.verdict.decided
    assert by["runc"].projected is None  # hopeless on its projection alone
    assert [r.environment for r in sequential.chased(p, "native", 10)] == ["crun", "runc"]
    decision = sequential.next_round(p, "native", 10, 100.0)
    assert ("qemu", "w", "p=1") not in decision.points
    assert {("runc", "w", "p=2"), ("crun", "w", "p=3")} <= set(decision.points)
    bare = sequential.assess(cells, "native", two, 1, 10)
    assert not any(r.verdict.verdict.decided for r in bare.ratios)
    assert {r.environment for r in sequential.chased(bare, "native", 10)} == \
        {"qemu", "runc", "crun"}


def test_a_long_shot_is_chased_after_the_projected_ones_and_a_lost_cause_not_at_all() -> None:
    """At 2 pairs a ratio reading 1.09 against a ±10% margin projects "never" (its interval
    would have to fit between 1.09 and 1.10), but a ratio one standard error nearer 1 would
    be decided: a long shot, chased after a ratio whose projection decides it; at a 60%
    spread no ratio near it could be decided within the cap: never chased."""
    cells = []
    for rep, (near, edge, wild) in enumerate([(1.01, 1.03, 1.5), (1.03, 1.15, 0.7)], 1):
        cells += [CellRecord(next(_ids), CellKey(env, "w", {"p": point}, rep), "1",
                             CellStatus.OK, "", 0, 1, (Sample("tput", v, "u", True),))
                  for point, v in ((1, near), (2, edge), (3, wild))
                  for env, v in (("native", 100.0), ("runc", 100 * v))]

    def ten(row: tuple[str, str, str], env: str = "") -> Margin:
        return Margin(0.10, "plan")

    lent = {("runc", "w", f"p={p}"): Borrowed(12.0, 12 * sd**2, "stored")
            for p, sd in ((1, 0.05), (2, 0.08), (3, 0.6))}
    p = sequential.assess(cells, "native", ten, 2, 40, borrowed=lent)
    by = {r.params_key: r for r in p.ratios}
    assert not any(r.verdict.verdict.decided for r in p.ratios)
    assert by["p=1"].projected is not None
    assert by["p=2"].projected is None and by["p=2"].long_shot is not None
    assert by["p=3"].projected is None and by["p=3"].long_shot is None
    assert [r.params_key for r in sequential.chased(p, "native", 40)] == ["p=1", "p=2"]
    meta = sequential.to_meta({}, 2, 40, p, sequential.TIME_SPENT, 1)
    reasons = {r["params"]: r["reason"] for r in meta["ratios"]}
    assert "one standard error nearer a decision" in reasons["p=2"]
    assert "the time ran out" in reasons["p=2"]
    assert "even 40 pairs would not decide it" in reasons["p=3"]


def test_each_round_reads_only_the_cells_committed_since_the_last(tmp_path: Path) -> None:
    """A run of thousands of cells must not re-read (and re-allocate) its whole history after
    every round: the runner keeps what it read, slimmed, and asks the store for the new ones;
    its verdicts are those of the whole store read afresh."""
    from isotax.run.clock import PhaseClock
    from isotax.run.rounds import AddedRounds

    read: list[tuple[int, int]] = []

    class Counting(SQLiteStore):
        def cells(self, run_id: str, after: int = 0) -> list[CellRecord]:
            got = super().cells(run_id, after)
            read.append((after, len(got)))
            return got

    store = Counting(tmp_path / "isotax.db")
    _stored_run(store, "now", [0.8, 0.82, 0.79])
    plan = parse_plan(PLAN.format(extra='[verdicts]\nmargin = 0.05'))
    rounds = AddedRounds(plan, store, PhaseClock(), lambda _: None)
    first = rounds.assess("now", ["native", "runc"])
    for rep, r in ((4, 0.81), (5, 0.8)):
        store.commit_cell("now", CellKey("native", "w", {"p": 1}, rep), "1",
                          CellOutcome(CellStatus.OK, "",
                                      [Sample("tput", 100.0, "u", True, {"tool": "x" * 500})]),
                                      0.0, 1.0)
        _commit(store, "now", "runc", rep, 100.0 * r)
    again = rounds.assess("now", ["native", "runc"])
    assert read[0] == (0, 6) and read[1][1] == 4 and read[1][0] >= 6
    assert first.ratios[0].verdict.n == 3 and again.ratios[0].verdict.n == 5
    whole = sequential.assess(store.cells("now"), "native",
                              lambda row, env="": Margin(0.05, "plan"), 3, 3)
    assert again.ratios[0].verdict == whole.ratios[0].verdict
    assert all(not s.labels for c in rounds._committed("now") for s in c.samples)


@pytest.mark.parametrize(("extra", "warned"), [
    ("repetitions = 1\n[verdicts]\nmax_repetitions = 40", False),  # quick's one fixed round
    ("repetitions = 1", True),  # one value per cell, and nothing will add rounds
])
def test_one_fixed_round_is_too_few_repetitions_only_without_added_rounds(
        tmp_path: Path, extra: str, warned: bool) -> None:
    plan = f'name = "p"\n{extra}\n[[environments]]\nname = "native"\nkind = "native"\n' \
           '[[workloads]]\nname = "compress"\n'
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r1", "p", plan, 1, HOST)
    store.put_environment(EnvRecord("r1", "native", "native", True, "",
                                    EnvironmentDescription.from_stored({}), {}, {}))
    store.commit_cell("r1", CellKey("native", "compress", {}, 1), "1",
                      CellOutcome(CellStatus.OK, "",
                                  [Sample("throughput", 10.0, "MB/s", True)]), 0, 1)
    store.set_run_status("r1", "complete", 2)
    said = [w.kind for w in analyze(store, "r1").warnings]
    assert (ReportWarning.FEW_REPETITIONS in said) is warned, said
