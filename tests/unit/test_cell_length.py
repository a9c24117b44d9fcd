"""Cell length (isotax.analysis.cell_length, isotax.run.cell_runs): short points hold several
runs per cell, the count is fixed per environment and point and stored, and spreads and A/A
floors are borrowed only from runs whose cells held the same counts."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from isotax.analysis import borrowing, cell_length, margins
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.plan import parse_plan
from isotax.run.cell_runs import CellRuns, per_run
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.run_meta import RunMeta
from isotax.store.sqlite import SQLiteStore

HOST = {"hostname": "h", "kernel": "k", "cpu_model": "c", "cpus": 2, "memory_mib": 1}


def test_runs_fill_the_cell_within_the_plans_bound() -> None:
    assert cell_length.runs_for(0.24, 1.0, 8) == 5
    assert cell_length.runs_for(0.5, 1.0, 8) == 2
    assert cell_length.runs_for(1.2, 1.0, 8) == 1  # long enough alone
    assert cell_length.runs_for(0.01, 1.0, 8) == 8  # capped
    assert cell_length.runs_for(0.1, 0.0, 8) == 1  # off
    assert cell_length.runs_for(0.1, 1.0, 1) == 1


def test_a_cells_value_is_the_mean_of_its_runs_metric_by_metric() -> None:
    runs = [
        [Sample("tput", 10.0, "MB/s", True, {"wall_s": 0.2}),
         Sample("lat", 2.0, "us", False, {"p": 50}), Sample("once", 1.0, "x")],
        [Sample("tput", 14.0, "MB/s", True, {"wall_s": 0.3}),
         Sample("lat", 4.0, "us", False, {"p": 50})],
    ]
    got = {s.metric: s for s in cell_length.mean_of_runs(runs)}
    assert got["tput"].value == 12.0 and got["tput"].unit == "MB/s"
    # A run's own labels differ from run to run: the first run's are kept, with the count.
    assert got["tput"].labels == {"wall_s": 0.2, cell_length.RUNS_LABEL: 2}
    assert got["lat"].value == 3.0 and not got["lat"].higher_is_better
    assert "once" not in got  # not every run reported it: no cell value


def test_a_metric_reported_twice_per_run_is_averaged_occurrence_by_occurrence() -> None:
    runs = [[Sample("v", 1.0, "u"), Sample("v", 5.0, "u")],
            [Sample("v", 3.0, "u"), Sample("v", 7.0, "u")]]
    assert [s.value for s in cell_length.mean_of_runs(runs)] == [2.0, 6.0]


def _key(env: str, rep: int = 1, warmup: bool = False) -> CellKey:
    return CellKey(env, "w", {"p": 1}, rep, warmup)


def test_the_count_is_fixed_by_the_first_measured_cell_and_stored(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r", "p", 'name = "p"\n', 1, HOST)
    values = itertools.count(1)
    calls = []

    def run() -> list[Sample]:
        calls.append(1)
        return [Sample("tput", float(next(values)), "u")]

    cr = CellRuns(store, "r", cell_s=10.0, most=3, meta={})
    assert cr.measure(_key("native", warmup=True), run)[1] == 1  # a warm-up runs once
    samples, runs = cr.measure(_key("native"), run)  # a fast run: the cap, 3
    assert runs == 3 and samples[0].value == (2 + 3 + 4) / 3
    key = cell_length.key("native", "w", "p=1")
    assert store.run_meta("r")[cell_length.META_KEY] == {key: 3}
    # A resumed run reads the count, whatever its first run takes then.
    again = CellRuns(store, "r", cell_s=10.0, most=8, meta=store.run_meta("r"))
    assert again.measure(_key("native", 2), run)[1] == 3
    assert cell_length.of(store.run_meta("r"), "native", "w", "p=1") == 3
    assert cell_length.of(store.run_meta("r"), "runc", "w", "p=1") == 1  # not recorded


def test_a_run_without_samples_ends_the_cell_empty(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r", "p", 'name = "p"\n', 1, HOST)
    answers = iter([[Sample("tput", 1.0, "u")], []])
    cr = CellRuns(store, "r", cell_s=10.0, most=4, meta={})
    samples, _ = cr.measure(_key("native"), lambda: next(answers))
    assert samples == []


def test_the_environments_cpu_is_one_runs_share() -> None:
    s = Sample("env_cpu_s", 0.9, "s", False, {"by_program": {"runc": 0.6, "shim": 0.3}})
    got = per_run(s, 3)
    assert got is not None and got.value == pytest.approx(0.3)
    assert got.labels["by_program"] == {"runc": 0.2, "shim": 0.1}
    assert per_run(s, 1) is s and per_run(None, 3) is None


def test_the_plan_bounds_cell_length() -> None:
    base = 'name = "p"\n[[environments]]\nname = "native"\nkind = "native"\n' \
           '[[workloads]]\nname = "compress"\n'
    assert parse_plan(base).verdicts.cell_s == 0.0
    plan = parse_plan(base + "[verdicts]\ncell_s = 1.5\nruns_per_cell = 4\n")
    assert (plan.verdicts.cell_s, plan.verdicts.runs_per_cell) == (1.5, 4)


# -- borrowing only from cells of the same length -------------------------------------------------

def _stored(store: SQLiteStore, run: str, ratios: list[float], runs_per_cell: int | None,
            aa: bool = False) -> None:
    store.create_run(run, "p", 'name = "p"\naa = true\n' if aa else 'name = "p"\n', 1, HOST)
    envs = ["native", "runc"] + (["native-aa"] if aa else [])
    for env in envs:
        store.put_environment(EnvRecord(run, env, "native" if "native" in env else "runc",
                                        True, "", EnvironmentDescription.from_stored({}), {}, {}))
    for rep, r in enumerate(ratios, 1):
        for env in envs:
            value = 100.0 if env == "native" else 100.0 * r
            store.commit_cell(run, CellKey(env, "w", {"p": 1}, rep, False), "1",
                              CellOutcome(CellStatus.OK, "",
                                          [Sample("tput", value, "u")]), 0.0, 1.0)
    store.put_run_meta(run, borrowing.PAIRING, borrowing.BLOCKS)
    if runs_per_cell is not None:
        store.put_run_meta(run, cell_length.META_KEY,
                           {cell_length.key(e, "w", "p=1"): runs_per_cell for e in envs})
    store.set_run_status(run, "complete", 1.0)


def test_a_spread_is_lent_only_to_cells_that_held_as_many_runs(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    _stored(store, "one", [1.0, 1.2, 0.8], None)  # before cell length: one run per cell
    _stored(store, "five", [1.0, 1.02, 0.98, 1.01], 5)
    stored = borrowing.from_store(store, HOST, "now", "native")
    kinds = {"native": "native", "runc": "runc"}
    today = {cell_length.META_KEY: {cell_length.key(e, "w", "p=1"): 5
                                    for e in ("native", "runc")}}
    five = borrowing.for_run(stored, kinds, today, "native")[("runc", "w", "p=1")]
    assert five.dof == 3 and "five" in five.source
    one = borrowing.for_run(stored, kinds, {}, "native")[("runc", "w", "p=1")]
    assert one.dof == 2 and "one" in one.source
    # Runs per cell differing on the baseline's side only: nothing lent.
    half = {cell_length.META_KEY: {cell_length.key("runc", "w", "p=1"): 5}}
    assert ("runc", "w", "p=1") not in borrowing.for_run(stored, kinds, half, "native")


def test_a_stored_aa_floor_is_used_only_for_cells_of_the_same_length(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    _stored(store, "aa", [1.0, 1.02, 0.98], 1, aa=True)
    row = ("w", "p=1", "tput")
    assert row in margins.stored_aa_floors(store, HOST, "now", {})[0]
    today = {cell_length.META_KEY: {cell_length.key("native", "w", "p=1"): 4}}
    assert margins.stored_aa_floors(store, HOST, "now", today) == ({}, None)


def test_the_report_says_which_points_held_several_runs() -> None:
    meta = {cell_length.META_KEY: {cell_length.key("native", "linpack", "n=1"): 5,
                                   cell_length.key("runc", "linpack", "n=1"): 6,
                                   cell_length.key("native", "compress", "x=1"): 2,
                                   cell_length.key("native", "rr", "s=1"): 1}}
    got = cell_length.words(RunMeta(meta).cell_runs)
    assert got.startswith("short points held several runs of their workload per cell: "
                          "compress ×2, linpack ×5-6")
    assert "rr" not in got
    assert cell_length.words(RunMeta({}).cell_runs) == "" and cell_length.words(
        {cell_length.key("native", "rr", "s=1"): 1}) == ""


def test_a_stored_aa_floor_is_its_baselines(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    _stored(store, "aa", [1.0, 1.02, 0.98], 1, aa=True)  # baseline native
    assert margins.stored_aa_floors(store, HOST, "now", baseline="native")[1] is not None
    assert margins.stored_aa_floors(store, HOST, "now", baseline="runc") == ({}, None)
