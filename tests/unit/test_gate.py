"""isotax check RUN --bounds FILE: the CI gate on stored runs, both ways. Every bound a test
sets is placed against the interval isotax's own analysis gives the stored values (never a
figure written here), so each test fails if the gate judges on the wrong side of it."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from isotax.analysis.between_runs import judge
from isotax.analysis.gate import BoundsError, evaluate, parse_bounds
from isotax.analysis.report_data import ReportData, analyze
from isotax.analysis.sequential import RatioState
from isotax.analysis.verdicts import MIN_MARGIN, Verdict
from isotax.cli import main
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.bundle import export_bundle
from isotax.store.sqlite import SQLiteStore

PLAN = """
name = "gate"
seed = 7
repetitions = 6
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
[[environments]]
name = "crun"
kind = "crun"
[[environments]]
name = "gvisor"
kind = "gvisor"
[[workloads]]
name = "compress"
params = { corpus_mib = 16, level = [2, 6] }
[[workloads]]
name = "startup"
"""
HOST = {"hostname": "h", "kernel": "6.1", "cpu_model": "X", "cpus": 2}
POINTS = [("compress", {"corpus_mib": 16, "level": 2, "seed": 1, "threads": 0}),
          ("compress", {"corpus_mib": 16, "level": 6, "seed": 1, "threads": 0}),
          ("startup", {"count": 1})]
# Per environment: its speed against native and the spread of its own repetitions. runc is
# clearly slower (decided worse), crun the same within a tight spread (equivalent), gvisor a
# little slower with a wide spread (undecided after 6 rounds).
SCENARIO = {"runc": (0.80, 0.01), "crun": (1.0, 0.002), "gvisor": (0.95, 0.15)}


def _store_run(store: SQLiteStore, run_id: str, scenario: Mapping[str, tuple[float, float]],
               seed: int = 1, status: str = "complete") -> None:
    """A run of PLAN whose values come from a seeded generator: throughput and time scaled by
    each environment's speed, every repetition in its own round with native's."""
    rng = random.Random(seed)
    store.create_run(run_id, "gate", PLAN, 7, HOST)
    for env in ("native", *scenario):
        store.put_environment(EnvRecord(run_id, env, env, True, "",
                                        EnvironmentDescription.from_stored({}), {}, {}))
    for rep in range(1, 7):
        for workload, params in POINTS:
            base = 100.0 * (1 + rng.gauss(0, 0.005))
            for env, (speed, spread) in (("native", (1.0, 0.0)), *scenario.items()):
                k = speed * (1 + rng.gauss(0, spread))
                samples = ([Sample("throughput", base * k, "MB/s"),
                            Sample("cpu_per_mb", 50 / k, "CPU-ms/MB", False)]
                           if workload == "compress" else
                           [Sample("ready_ms", 40 * 100 / (base * k), "ms", False)])
                store.commit_cell(run_id, CellKey(env, workload, params, rep), "1",
                                  CellOutcome(CellStatus.OK, "", samples), 0, 1)
    store.set_run_status(run_id, status, 2)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    store = SQLiteStore(tmp_path / "isotax.db")
    _store_run(store, "r1", SCENARIO)
    store.close()
    return tmp_path


def _state(d: ReportData, env: str, workload: str, level: int | None = None) -> RatioState:
    assert d.sequential is not None
    return next(s for s in d.sequential.ratios if s.environment == env
                and s.workload == workload and (level is None or f"level={level}," in
                                                s.params_key))


def _analyzed(results: Path, run_id: str = "r1") -> ReportData:
    store = SQLiteStore(results / "isotax.db")
    try:
        return analyze(store, run_id)
    finally:
        store.close()


def _check(results: Path, bounds: str, run: str = "r1", *more: str) -> Result:
    path = results / "bounds.toml"
    path.write_text(bounds)
    return CliRunner().invoke(main, ["check", run, "--bounds", str(path), "--results",
                                     str(results), *more])


def _kinds(r: Result, kind: str) -> list[str]:
    return [x for x in r.stdout.splitlines() if x.startswith(f"{kind} ")]


def test_loose_bounds_pass_and_tight_bounds_fail_with_one_line_per_violation(
        results: Path) -> None:
    d = _analyzed(results)
    v = _state(d, "runc", "compress", 2).verdict
    assert v.verdict.value == "worse"  # the scenario: a decided ratio to bound
    lowest = min(v.low, _state(d, "runc", "compress", 6).verdict.low)
    loose = _check(results, f"""
[[bound]]
environment = "runc"
workload = "compress"
min_ratio = {lowest * 0.95}
""")
    assert loose.exit_code == 0, loose.output
    assert not _kinds(loose, "FAIL") and "within bounds" in loose.stdout.splitlines()[-1]
    tight = _check(results, f"""# the runc bound
[[bound]]
environment = "runc"
workload = "compress"
params = {{ level = 2 }}
min_ratio = {v.high * 1.02}
""")
    assert tight.exit_code == 1, tight.output
    (line,) = _kinds(tight, "FAIL")
    assert line == (f"FAIL runc compress level=2 throughput: ratio {v.ratio:.3g} "
                    f"[{v.low:.3g}, {v.high:.3g}] below min_ratio {v.high * 1.02:g} "
                    f"({results / 'bounds.toml'}:2)")
    assert tight.stdout.splitlines()[-1].startswith("isotax check r1: 1 violation(s)")
    # Without RUN, the latest run in the store: the same judgement.
    latest = CliRunner().invoke(main, ["check", "--bounds", str(results / "bounds.toml"),
                                       "--results", str(results)])
    assert latest.exit_code == 1 and latest.stdout == tight.stdout


def test_an_interval_across_the_bound_is_not_judged(results: Path) -> None:
    v = _state(_analyzed(results), "runc", "compress", 6).verdict
    r = _check(results, f"""
[[bound]]
environment = "runc"
params = {{ level = 6 }}
max_ratio = {v.ratio}
""")
    assert r.exit_code == 0, r.output
    (note,) = _kinds(r, "NOTE")
    assert "reaches across max_ratio" in note and "not judged" in note


def test_undecided_and_equivalent_never_fail_however_tight_the_bound(results: Path) -> None:
    d = _analyzed(results)
    undecided = _state(d, "gvisor", "compress", 2).verdict
    equivalent = _state(d, "crun", "compress", 2).verdict
    assert undecided.verdict.value == "undecided" and equivalent.verdict.value == "equivalent"
    # Both intervals lie wholly outside these bounds: only a decided verdict may fail.
    r = _check(results, f"""
[[bound]]
environment = "gvisor"
params = {{ level = 2 }}
min_ratio = {undecided.high * 1.01}
[[bound]]
environment = "crun"
params = {{ level = 2 }}
min_ratio = {equivalent.high * 1.001}
""")
    assert r.exit_code == 0, r.output
    notes = _kinds(r, "NOTE")
    assert len(notes) == 2 and not _kinds(r, "FAIL")
    assert any(n.startswith("NOTE gvisor") and "undecided: not decided, not judged" in n
               for n in notes)
    assert any(n.startswith("NOTE crun") and "equivalent: within noise" in n for n in notes)


def test_max_tax_pct_follows_each_metric_direction(results: Path) -> None:
    d = _analyzed(results)
    rate = _state(d, "runc", "compress", 2).verdict  # higher is better: runc's is lower
    time = _state(d, "runc", "startup").verdict  # lower is better: runc's is higher
    assert rate.ratio < 1 < time.ratio and time.verdict.value == "worse"
    rate_tax, time_tax = (1 - rate.high) * 100, (time.low - 1) * 100  # the least tax each has
    r = _check(results, f"""
[[bound]]
environment = "runc"
params = {{ level = 2 }}
max_tax_pct = {rate_tax / 2}
[[bound]]
environment = "runc"
workload = "startup"
max_tax_pct = {time_tax / 2}
""")
    assert r.exit_code == 1, r.output
    fails = _kinds(r, "FAIL")
    assert len(fails) == 2
    assert any("compress level=2 throughput" in f and " below max_tax_pct" in f for f in fails)
    assert any("startup count=1 ready_ms" in f and " above max_tax_pct" in f for f in fails)
    # Just beyond each interval's far end, the same bounds hold.
    ok = _check(results, f"""
[[bound]]
environment = "runc"
params = {{ level = 2 }}
max_tax_pct = {(1 - rate.low) * 100 + 1}
[[bound]]
environment = "runc"
workload = "startup"
max_tax_pct = {(time.high - 1) * 100 + 1}
""")
    assert ok.exit_code == 0 and not _kinds(ok, "FAIL") and not _kinds(ok, "NOTE"), ok.output


def test_a_named_metric_is_judged_as_the_report_words_it(results: Path) -> None:
    """A metric without a sequential verdict: the report's own verdict on runc's and native's
    round pairs (their confidence sequence against the row's margin), not a bootstrap and
    not another judgement than the Results table's."""
    d = _analyzed(results)
    key = ("compress", "corpus_mib=16,level=2,seed=1,threads=0", "cpu_per_mb")
    (row,) = [r for r in d.rows if (r.workload, r.params_key, r.metric) == key]
    v = d.other_verdicts[(row, "runc")]
    assert v.verdict is Verdict.WORSE
    assert d.cells[(row, "runc")].ratio.decided == "worse"  # what the Results table says
    # Paired on its rounds: narrower than the unpaired judgement of the same values.
    cell, base = d.cell("runc", *key), d.cell("native", *key)
    assert cell is not None and base is not None
    unpaired = judge(base.values, cell.values, False, MIN_MARGIN)
    assert unpaired is not None and v.high - v.low < unpaired.high - unpaired.low

    def bound(max_ratio: float) -> str:
        return f"""
[[bound]]
environment = "runc"
params = {{ level = 2 }}
metric = "cpu_per_mb"
max_ratio = {max_ratio}
"""
    r = _check(results, bound(v.low * 0.99))
    assert r.exit_code == 1, r.output
    (line,) = _kinds(r, "FAIL")
    assert f"cpu_per_mb: ratio {v.ratio:.3g} [{v.low:.3g}, {v.high:.3g}] above max_ratio" \
        in line
    # A bound inside the interval is not decided against (a NOTE, not a FAIL).
    inside = _check(results, bound(v.low * 1.01))
    assert inside.exit_code == 0 and _kinds(inside, "NOTE"), inside.output


def test_no_worse_than_another_run_both_ways_and_from_a_bundle(results: Path) -> None:
    store = SQLiteStore(results / "isotax.db")
    _store_run(store, "r2", {"runc": (0.60, 0.01)}, seed=2)  # runc's tax grew
    export_bundle(store, "r1", results / "r1.itx.tar.gz")
    store.close()
    worse = _check(results, """
[[bound]]
environment = "runc"
no_worse_than = "r1"
""", "r2", "--json")
    assert worse.exit_code == 1, worse.output
    doc = json.loads(worse.stdout)
    fails = [f for f in doc["findings"] if f["kind"] == "FAIL"]
    assert doc["violations"] == len(fails) == 3  # both compress points and startup
    # The figure is the ratio of the two runs' taxes, each its sequential verdict's ratio
    # (the geometric mean of its round-paired ratios), from each run's own analysis.
    d1, d2 = _analyzed(results, "r1"), _analyzed(results, "r2")
    key = ("compress", "corpus_mib=16,level=2,seed=1,threads=0", "throughput")

    def tax_of(d: ReportData, env: str) -> float:
        assert d.sequential is not None
        return next(s.verdict.ratio for s in d.sequential.ratios
                    if (s.environment, s.workload, s.params_key, s.metric) == (env, *key))

    tax = tax_of(d2, "runc") / tax_of(d1, "runc")
    got = next(f for f in fails if f["point"] == "level=2" and f["metric"] == "throughput")
    assert got["ratio"] == pytest.approx(tax) and got["high"] < 1
    assert "worse beyond the" in got["text"] and got["limit"] == "no_worse_than r1"
    # The other way round (r1 against r2, the bundle beside the bounds), r1 is better: passes.
    better = _check(results, """
[[bound]]
environment = "runc"
no_worse_than = "r2"
""", str(results / "r1.itx.tar.gz"))
    assert better.exit_code == 0, better.output
    assert not _kinds(better, "FAIL") and not _kinds(better, "NOTE")
    same = _check(results, """
[[bound]]
environment = "runc"
no_worse_than = "r1.itx.tar.gz"
""", "r1")
    assert same.exit_code == 0 and not _kinds(same, "FAIL"), same.output


def test_a_bound_that_matches_nothing_warns_and_does_not_fail(results: Path) -> None:
    r = _check(results, """
[[bound]]
environment = "runcc"
min_ratio = 0.5
[[bound]]
environment = "native"
min_ratio = 0.5
[[bound]]
workload = "compress"
params = { level = 9 }
min_ratio = 0.5
""")
    assert r.exit_code == 0, r.output
    warns = _kinds(r, "WARN")
    assert len(warns) == 3
    assert "no environment 'runcc'" in warns[0]
    assert all(f" {e}" in warns[0] for e in ("runc,", "crun", "gvisor"))
    assert "native is run r1's baseline" in warns[1]
    assert "no point with level=9" in warns[2] and warns[2].endswith("bounds.toml:8)")


@pytest.mark.parametrize(("bounds", "says"), [
    ("[[bound]\nmin_ratio = 1", "not valid TOML"),
    ("[[bound]]\nmin_ratio = 0.9\n[[bound]]\nmax_ration = 1.1\n",
     "bounds.toml:3: max_ration is not a bound setting"),
    ("[bounds]\nmin_ratio = 0.9\n", "bounds is not a bounds setting"),
    ("[[bound]]\nmin_ratio = 1.2\nmax_ratio = 1.1\n", "min_ratio 1.2 is above max_ratio 1.1"),
    ('[[bound]]\nmin_ratio = "0.9"\n', "min_ratio: Input should be a valid number"),
    ('[[bound]]\nenvironment = "runc"\n', "limits nothing"),
    ('[[bound]]\nmin_ratio = 0.9\nmargin = 0.05\n', "margin applies to no_worse_than only"),
    ('[[bound]]\nno_worse_than = "r9"\n', "no_worse_than = 'r9': run 'r9' is not in"),
    ("", "has no [[bound]] table"),
])
def test_bad_input_is_one_line_and_exit_status_2(results: Path, bounds: str, says: str
                                                 ) -> None:
    r = _check(results, bounds)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], lines
    assert r.stdout == ""


def test_an_unknown_run_or_a_missing_bounds_file_is_exit_status_2(results: Path) -> None:
    r = _check(results, "[[bound]]\nmin_ratio = 0.5\n", "nope")
    assert r.exit_code == 2 and "run 'nope' is not in" in r.stderr
    gone = CliRunner().invoke(main, ["check", "r1", "--bounds", str(results / "none.toml"),
                                     "--results", str(results)])
    assert gone.exit_code == 2 and len(gone.stderr.strip().splitlines()) == 1
    assert "bounds file" in gone.stderr and "not found" in gone.stderr


def test_an_incomplete_run_is_a_warning_and_lines_name_their_bound(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    _store_run(store, "r3", SCENARIO, status="interrupted")
    data = analyze(store, "r3")
    store.close()
    high = max(_state(data, "runc", "compress", level).verdict.high for level in (2, 6))
    text = f'\n\n[[bound]]\nworkload = "compress"\nmin_ratio = {high * 1.01}\n'
    got = evaluate(parse_bounds(text, "b.toml"), data, {})
    assert got.exit_status == 1
    assert got.findings[0].kind == "WARN" and "r3 is interrupted" in got.findings[0].text
    fails = got.of("FAIL")
    # runc at both compress points; crun and gvisor are not decided worse, so not judged.
    assert {(f.environment, f.point) for f in fails} == {("runc", "level=2"),
                                                          ("runc", "level=6")}
    assert all(f.where == "b.toml:3" for f in fails)
    with pytest.raises(BoundsError, match=r"^b\.toml bound 1: min_ratio"):
        parse_bounds("bound = [{ min_ratio = -1 }]", "b.toml")
