"""The pure parts of benchmarks/design_side_by_side.py and benchmarks/aa_canary.py: verdicts
counted from a run's sequential meta, containers told from the environment registry's declared
isolation, the Clopper-Pearson interval, the A/A plan, and the store readers on a stored run
(no root, no runtime: the scripts' commands are not run)."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
from scipy.stats import binomtest

from isotax import protocols
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.plan import parse_plan
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.sqlite import SQLiteStore

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sbs = _load("design_side_by_side")
aa = _load("aa_canary")


def ratio(env: str, verdict: str, workload: str = "compress") -> dict[str, object]:
    return {"environment": env, "workload": workload, "params": "{}", "metric": "m",
            "verdict": verdict, "ratio": 1.0}


QUICK_KINDS = {"native": "native", "runc": "runc", "runc-host": "runc", "crun": "crun",
               "qemu": "qemu", "native-aa": "native"}


# -- design_side_by_side ------------------------------------------------------------------------

def test_containers_come_from_the_registrys_declared_isolation() -> None:
    isolation = {k: cls.isolation.value for k, cls in protocols.environments().items()}
    assert sbs.container_environments(QUICK_KINDS, isolation) == {"runc", "runc-host", "crun"}


def test_a_kind_is_a_container_only_where_its_isolation_says_so() -> None:
    envs = {"a": "k1", "b": "k2", "c": "unknown", "d": "k3"}
    isolation = {"k1": "container", "k2": "vm", "k3": None}
    assert sbs.container_environments(envs, isolation) == {"a"}
    assert sbs.container_environments(envs, {}) == set()


def test_verdicts_are_counted_with_the_canary_apart() -> None:
    meta = {"decided": 99, "total": 99, "ratios": [  # the counts come from the ratios
        ratio("runc", "worse"), ratio("runc", "undecided", "rr"), ratio("crun", "equivalent"),
        ratio("qemu", "worse"), ratio("qemu", "better", "rr"), ratio("runc-host", "undecided"),
        ratio("native-aa", "worse"), ratio("native-aa", "equivalent", "rr"),
        ratio("native-aa", "undecided", "fio"), ratio("native-aa", "better", "x"),
        ratio("crun", "bogus", "rr"), "not a ratio"]}
    c = sbs.count_verdicts(meta, {"runc", "runc-host", "crun"}, "native-aa")
    assert c.found
    assert (c.decided, c.total) == (4, 7)
    assert (c.container_decided, c.container_total) == (2, 5)
    assert c.canary == {"worse": 1, "equivalent": 1, "undecided": 1, "better": 1}
    assert (c.canary_false, c.canary_total) == (2, 4)


def test_without_a_canary_name_every_ratio_counts() -> None:
    meta = {"ratios": [ratio("native-aa", "worse"), ratio("runc", "equivalent")]}
    c = sbs.count_verdicts(meta, ["runc"], None)
    assert (c.decided, c.total, c.canary_total) == (2, 2, 0)


@pytest.mark.parametrize("meta", [None, "x", {}, {"ratios": "x"}])
def test_a_run_without_stored_verdicts_counts_nothing(meta: object) -> None:
    c = sbs.count_verdicts(meta, {"runc"}, "native-aa")
    assert (c.decided, c.total, c.canary_total) == (0, 0, 0)
    assert c.found == isinstance(meta, dict)


def test_the_canary_is_the_baselines_aa_copy() -> None:
    assert sbs.canary_name("native") == "native-aa"
    assert parse_plan(aa.plan_text(1)).aa_name == sbs.canary_name("native")


def _row(number: int, design: str, c_decided: int, canary: dict[str, int] | None = None,
         wall: float = 540.0, found: bool = True) -> object:
    counts = sbs.Counts(c_decided + 10, 60, c_decided, 45, canary or {}, found)
    return sbs.RunRow(number, design, f"r{number}", wall, 0, "complete", counts)


def test_the_summary_compares_the_designs_mean_container_decisions() -> None:
    rows = [_row(1, "old", 5), _row(2, "new", 12, {"equivalent": 2, "worse": 1}),
            _row(3, "old", 4), _row(4, "new", 6, {"undecided": 3}),
            _row(5, "old", 99, found=False)]  # a run that stored no verdicts: left out
    s = sbs.summary(rows)
    assert s["old"]["runs"] == 2 and s["old"]["mean_container_decided"] == 4.5
    assert s["new"]["mean_container_decided"] == 9.0
    assert s["new_over_old"] == pytest.approx(2.0)
    assert (s["new"]["canary_false"], s["new"]["canary_total"]) == (1, 6)
    lines = sbs.summary_lines(s, {"old": "af67514", "new": "working tree"})
    assert lines[0].startswith("old (af67514): mean decided container ratios 4.50 (5/45, 4/45)")
    assert "canary worse+better 1 of 6" in lines[1]
    assert lines[2].startswith("new/old decided container ratios: 2.00")


def test_the_summary_ratio_when_the_old_design_decided_nothing() -> None:
    assert sbs.summary([_row(1, "old", 0), _row(2, "new", 3)])["new_over_old"] == math.inf
    assert sbs.summary([_row(1, "old", 0), _row(2, "new", 0)])["new_over_old"] is None
    assert sbs.summary([_row(2, "new", 3)])["new_over_old"] is None


def test_the_table_marks_a_run_over_its_budget() -> None:
    rows = [_row(1, "old", 5, wall=541), _row(2, "new", 7, {"equivalent": 3}, wall=700),
            _row(3, "old", 0, found=False)]
    rows[0] = dataclasses.replace(rows[0], run_s=530.4)
    lines = sbs.table(rows, 600).splitlines()
    assert lines[0].split() == ["run", "design", "run", "id", "wall", "stored", "decided",
                                "container", "canary", "w+b", "status"]
    assert lines[1].split()[:8] == ["1", "old", "r1", "9:01", "8:50", "15/60", "5/45", "-"]
    assert lines[2].split()[:8] == ["2", "new", "r2", "11:40!", "-", "17/60", "7/45", "0/3"]
    assert lines[3].split()[5:7] == ["n/a", "n/a"]


def test_the_run_id_is_read_from_isotaxs_first_line() -> None:
    out = "recovery: nothing\nrun 20261126-101010-quick-ab12 plan quick results /x\nround 4\n"
    assert sbs.run_id_from_output(out) == "20261126-101010-quick-ab12"
    assert sbs.run_id_from_output("the run was refused\n") is None


def _store(tmp_path: Path, meta: dict[str, object] | None, plan: str) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r1", "aa-canary", plan, 1, {"hostname": "h"}, created=100.0)
    params = {"corpus_mib": 4, "level": 2, "seed": 1, "threads": 0}
    values = [(10.0, 10.1), (10.3, 10.2), (9.9, 10.0), (10.1, 10.1)]
    for rep, (a, b) in enumerate(values, start=1):
        for env, v in (("native", a), ("native-aa", b)):
            store.commit_cell("r1", CellKey(env, "compress", params, rep), "1",
                              CellOutcome(CellStatus.OK, "",
                                          [Sample("throughput", v, "MB/s", True)]), 0, 1)
    if meta is not None:
        store.put_run_meta("r1", "sequential", meta)
    store.set_run_status("r1", "complete", 102.0)
    return store


def test_the_reader_gives_a_runs_kinds_isolation_and_verdicts(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    from isotax.store.base import EnvRecord

    meta = {"ratios": [ratio("runc", "worse")]}
    store = _store(tmp_path, meta, aa.plan_text(1))
    for name, kind in (("native", "native"), ("runc", "runc")):
        store.put_environment(EnvRecord("r1", name, kind, True, "",
                                        EnvironmentDescription.from_stored({}), {}, {}))
    store.close()
    monkeypatch.setattr(sbs, "PYTHON", Path(sys.executable))
    src = Path(protocols.__file__).resolve().parents[1]
    assert sbs.read_store(src, tmp_path) == {"runs": ["r1"]}
    assert sbs.read_store(src, tmp_path / "none") == {"runs": []}
    info = sbs.read_store(src, tmp_path, "r1")
    assert info["environments"] == {"native": "native", "runc": "runc"}
    assert info["isolation"]["runc"] == "container" and info["isolation"]["native"] == "host"
    assert info["sequential"] == meta and info["baseline"] == "native"
    assert info["status"] == "complete" and info["run_s"] == 2


# -- aa_canary ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("k", "n"), [(0, 60), (1, 60), (3, 20), (20, 20), (7, 9)])
def test_clopper_pearson_is_the_exact_interval(k: int, n: int) -> None:
    want = binomtest(k, n).proportion_ci(0.95, method="exact")
    low, high = aa.clopper_pearson(k, n)
    assert low == pytest.approx(want.low, abs=1e-9) and high == pytest.approx(want.high, abs=1e-9)


def test_clopper_pearson_with_no_false_verdict() -> None:
    low, high = aa.clopper_pearson(0, 60)
    assert low == 0.0
    assert high == pytest.approx(1 - 0.025 ** (1 / 60))  # (1 - high)^n = alpha / 2
    assert aa.clopper_pearson(0, 60, 0.9)[1] < high


@pytest.mark.parametrize(("k", "n"), [(0, 0), (3, 2), (-1, 5)])
def test_clopper_pearson_refuses_a_non_proportion(k: int, n: int) -> None:
    with pytest.raises(ValueError):
        aa.clopper_pearson(k, n)


def test_the_canarys_verdicts_from_the_meta() -> None:
    meta = {"ratios": [ratio("native-aa", "worse"), ratio("runc", "better"),
                       ratio("native-aa", "strange")]}
    assert aa.canary_verdicts(meta, "native-aa") == ["worse", "undecided"]
    assert aa.canary_verdicts({"ratios": [ratio("runc", "worse")]}, "native-aa") is None
    assert aa.canary_verdicts({}, "native-aa") is None
    assert aa.canary_verdicts(None, "native-aa") is None


def test_tally_counts_every_verdict() -> None:
    assert aa.tally(["worse", "worse", "equivalent", "what"]) == {
        "worse": 2, "better": 0, "equivalent": 1, "undecided": 1}


def test_the_aa_plan_is_native_against_its_copy_only() -> None:
    p = parse_plan(aa.plan_text(seed=7))
    assert p.seed == 7 and p.aa and p.baseline == "native"
    assert [e.name for e in p.run_environments] == ["native", "native-aa"]
    assert p.verdicts.margin == "auto" and p.verdicts.deadline_s is not None
    assert p.verdicts.max_repetitions is not None and p.verdicts.max_repetitions > p.repetitions
    assert {w.name for w in p.workloads} == {"compress", "rr", "fio"}
    assert parse_plan(aa.plan_text(seed=8)).seed == 8


def test_the_chased_plan_judges_natives_copy_as_an_ordinary_environment(tmp_path: Path
                                                                        ) -> None:
    """--chased: no canary; the copy is a question like any other, and its verdicts are
    what read_run counts."""
    p = parse_plan(aa.plan_text(seed=3, chased=True))
    assert not p.aa and [e.name for e in p.run_environments] == ["native", aa.COPY]
    store = _store(tmp_path, {"ratios": [ratio(aa.COPY, "equivalent"),
                                         ratio(aa.COPY, "worse")]},
                   aa.plan_text(3, chased=True))
    store.put_environment(EnvRecord("r1", aa.COPY, "native", True, "",
                                    EnvironmentDescription.from_stored({}), {}, {}))
    store.close()
    assert aa.read_run(tmp_path, "r1", 1.0).verdicts == ("equivalent", "worse")


def test_the_chased_plan_takes_its_cap_and_deadline_and_finds_a_run_for_its_margins(
        tmp_path: Path) -> None:
    """--cap and --deadline-s reach the plan; a chased series first needs a stored run with a
    canary (its margins; without one every margin is the minimum): has_aa_run finds it."""
    p = parse_plan(aa.plan_text(seed=2, chased=True, cap=30, deadline_s=300))
    assert p.verdicts.max_repetitions == 30 and p.verdicts.deadline_s == 300
    assert not aa.has_aa_run(tmp_path)  # no store
    _store(tmp_path / "chased", {}, aa.plan_text(1, chased=True)).close()
    assert not aa.has_aa_run(tmp_path / "chased")  # a run, but no canary in its plan
    _store(tmp_path / "canary", {}, aa.plan_text(1)).close()
    assert aa.has_aa_run(tmp_path / "canary")


def test_the_report_states_the_false_rate_and_its_interval() -> None:
    runs = [aa.RunResult("r1", "complete", 80.0, ("equivalent", "worse", "undecided"), "stored",
                         61.4),
            aa.RunResult("r2", "interrupted", 70.0, ("equivalent",) * 3, "recomputed"),
            aa.RunResult(None, "exit 2", 3.0, (), "none")]
    lines = aa.report_lines(runs)
    assert lines[1].split() == ["1", "r1", "80s", "61s", "1", "0", "1", "1", "stored"]
    assert lines[2].split()[-2:] == ["recomputed,", "interrupted"]
    low, high = aa.clopper_pearson(1, 6)
    assert lines[-2] == (f"canary false verdicts (worse or better): 1 of 6 ratios = 16.7%, "
                         f"95% Clopper-Pearson [{low:.1%}, {high:.1%}] over 3 run(s)")
    assert lines[-1] == "  worse 1, better 0, equivalent 4, undecided 1"
    s = aa.summary(runs)
    assert (s["ratios"], s["false"], s["interval"]) == (6, 1, [low, high])
    assert aa.report_lines([])[-1] == "canary: no verdict of native-aa against native in any run"
    assert aa.summary([])["rate"] is None


def test_a_runs_canary_verdicts_stored_or_recomputed(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    _store(tmp_path / "a", {"ratios": [ratio("native-aa", "better")]}, aa.plan_text(1)).close()
    r = aa.read_run(tmp_path / "a", "r1", 5.0)
    assert (r.source, r.verdicts, r.status, r.run_s) == ("stored", ("better",), "complete", 2)
    # A run whose meta judged no canary (the design before issue 28): isotax's own rule again.
    (tmp_path / "b").mkdir()
    _store(tmp_path / "b", {"ratios": []}, aa.plan_text(1)).close()
    r = aa.read_run(tmp_path / "b", "r1", None)
    assert r.source == "recomputed" and len(r.verdicts) == 1
    assert r.verdicts[0] in aa.VERDICTS
    assert aa.run_ids(tmp_path / "b") == ["r1"] and aa.run_ids(tmp_path / "none") == []


# -- benchmarks/soak.py ---------------------------------------------------------------------------

def _soak() -> ModuleType:
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))  # soak imports child.py beside it
    return _load("soak")


def test_the_soak_plan_holds_the_cells_asked() -> None:
    soak = _soak()
    plan = parse_plan(soak.PLAN.format(repetitions=250))
    points = sum(2 if w.name == "compress" else 1 for w in plan.workloads)
    assert points == soak.POINTS and len(plan.environments) == soak.ENVIRONMENTS
    assert {w.name for w in plan.workloads} == {"compress", "rr", "fio"}


def test_the_soak_says_flat_only_when_everything_is() -> None:
    soak = _soak()
    C = soak.Checkpoint

    def run(rss_end: float, fds_end: int, itx: int, bytes_end: int) -> list[C]:
        pts = [C(n, n * 1.0, 100.0 + (rss_end - 100.0) * n / 2000, 40, 1000 * n, 0, 30, 3)
               for n in range(100, 2001, 100)]
        pts[-1] = dataclasses.replace(pts[-1], fds=fds_end, itx_temp=itx,
                                      store_bytes=pts[-2].store_bytes + bytes_end)
        return pts

    flat = soak.verdicts(run(105.0, 40, 3, 100_000), 0, 0)
    assert all(v.startswith("ok") for v in flat), flat
    for bad, which in ((run(115.0, 40, 3, 100_000), "RSS"), (run(105.0, 50, 3, 100_000),
                       "open files"), (run(105.0, 40, 9, 100_000), "temporary"),
                      (run(105.0, 40, 3, 400_000), "bytes per cell")):
        got = soak.verdicts(bad, 0, 0)
        assert [v for v in got if v.startswith("NOT FLAT")] and \
            any(which in v for v in got if v.startswith("NOT FLAT")), (which, got)
    assert soak.verdicts(run(105.0, 40, 3, 100_000), 2, 0)[2].startswith("NOT FLAT")
    assert soak.verdicts([], 0, 0)[0].startswith("NOT FLAT: too few")


# -- benchmarks/decision_ceiling.py ---------------------------------------------------------------

ceiling = _load("decision_ceiling")
CEILING_PLAN = """
name = "two"
repetitions = 2
[verdicts]
max_repetitions = 10
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
[[workloads]]
name = "compress"
params = { corpus_mib = 4 }
[[workloads]]
name = "linpack"
params = { n = 500 }
"""


def _ceiling_store(tmp_path: Path, runs: int = 2) -> SQLiteStore:
    """Stored block-paired runs of CEILING_PLAN: runc at 0.50x on compress (2% pair spread),
    at 1.00x on linpack (a 40% spread: nothing near it can be decided), 3 rounds each."""
    from isotax.analysis import borrowing
    from isotax.store.base import EnvRecord

    store = SQLiteStore(tmp_path / "isotax.db")
    noise = [0.0, 0.02, -0.02]
    for i in range(runs):
        rid = f"r{i}"
        store.create_run(rid, "two", CEILING_PLAN, 1, {"hostname": "h"}, created=100.0 + i)
        for name, kind in (("native", "native"), ("runc", "runc")):
            store.put_environment(EnvRecord(rid, name, kind, True, "",
                                            EnvironmentDescription.from_stored({}), {}, {}))
        for rep, e in enumerate(noise, start=1):
            for wl, params, metric, runc, spread in (
                    ("compress", {"corpus_mib": 4}, "throughput", 0.5, 1.0),
                    ("linpack", {"n": 500}, "hpl", 1.0, 20.0)):
                t = 10.0 * rep
                store.commit_cell(rid, CellKey("native", wl, params, rep), "1",
                                  CellOutcome(CellStatus.OK, "",
                                              [Sample(metric, 100.0, "u", True)]), t, t + 2)
                value = 100.0 * runc * math.exp(spread * e)
                store.commit_cell(rid, CellKey("runc", wl, params, rep), "1",
                                  CellOutcome(CellStatus.OK, "",
                                              [Sample(metric, value, "u", True)]), t + 2, t + 3)
        store.put_run_meta(rid, borrowing.PAIRING, borrowing.BLOCKS)
        store.put_run_meta(rid, "sequential", {"ratios": [
            {"environment": "runc", "workload": w, "params": p, "margin": 0.05}
            for w, p in (("compress", "corpus_mib=4"), ("linpack", "n=500"))]})
        store.set_run_status(rid, "complete", 200.0 + i)
    return store


def test_the_ceiling_reads_each_ratios_spread_mean_margin_and_cell_time(tmp_path: Path) -> None:
    store = _ceiling_store(tmp_path)
    runs = ceiling.block_runs(store, "two", 8)
    assert runs == ["r1", "r0"]  # newest first
    data = ceiling.read_host(store, runs, "native")
    store.close()
    by = {r.workload: r for r in data.ratios}
    assert set(by) == {"compress", "linpack"} and by["compress"].pairs == 6
    assert by["compress"].mean == pytest.approx(math.log(0.5))
    assert by["compress"].sd == pytest.approx(0.02)  # about each run's own mean
    assert by["linpack"].sd == pytest.approx(0.4) and by["compress"].margin == 0.05
    assert data.cell_s[("native", "compress", "corpus_mib=4")] == pytest.approx(2.0)
    assert ceiling.container_names(data.kinds) == {"runc"}


def test_the_ceiling_drives_the_plans_own_rule(tmp_path: Path) -> None:
    """0.50x at a 2% spread is decided in the fixed rounds; 1.00x at 40% never is, and the
    rule does not chase it: the simulated run stops after the fixed rounds, budget or not."""
    import numpy as np

    store = _ceiling_store(tmp_path)
    data = ceiling.read_host(store, ceiling.block_runs(store, "two", 8), "native")
    store.close()
    plan = parse_plan(CEILING_PLAN)
    fixed_s = 2 * (2 + 1) * 2  # 2 rounds x (native 2 s + runc 1 s) x 2 points
    for budget in (0.0, 1000.0):
        out = ceiling.simulate(np.random.default_rng(1), data, plan, budget, {"runc"})
        assert (out.container_decided, out.decided, out.canary_false) == (1, 1, 0)
        assert out.cell_s == pytest.approx(fixed_s)
    s = ceiling.summary([ceiling.Outcome(1, 2, 0, 10.0), ceiling.Outcome(3, 4, 1, 20.0)])
    assert (s["container_decided_mean"], s["container_decided_min"]) == (2, 1)
    assert s["canary_false_mean"] == 0.5
