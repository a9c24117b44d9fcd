"""Claims as data (isotax.analysis.claims) judged against stored runs (claim_verdicts), and
`isotax claims`. The runs are test_gate's seeded scenario: runc clearly slower than native
(0.80), crun the same within a tight spread, gvisor a little slower with a wide spread. Each
verdict is checked against the interval the analysis itself gives, so a test fails if a claim
is judged on the wrong side of its edge."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from isotax.analysis.claim_verdicts import ClaimVerdict, Outcome, judge
from isotax.analysis.claims import (
    ClaimsError,
    Relation,
    builtin_files,
    builtin_source,
    parse_claims,
)
from isotax.analysis.report_data import ReportData, analyze
from isotax.cli import main
from isotax.store.sqlite import SQLiteStore

from .test_gate import SCENARIO, _store_run

HEAD = 'version = 1\n[source]\nstudy = "test"\n'


def _claim(body: str, cid: str = "c1") -> str:
    return f'[[claim]]\nid = "{cid}"\nfinding = "a finding"\n{body}\n'


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("claims")
    store = SQLiteStore(d / "isotax.db")
    _store_run(store, "r1", SCENARIO)
    store.close()
    return d


@pytest.fixture(scope="module")
def data(results: Path) -> ReportData:
    store = SQLiteStore(results / "isotax.db")
    try:
        return analyze(store, "r1")
    finally:
        store.close()


def _judged(data: ReportData, body: str) -> list[ClaimVerdict]:
    return judge(parse_claims(HEAD + _claim(body), "t.toml"), data)


def _one(data: ReportData, body: str) -> ClaimVerdict:
    got = [v for v in _judged(data, body) if "level=6" not in v.point]
    assert len(got) == 1, got
    return got[0]


COMPRESS = 'workload = "compress"\nparams = { level = 2 }\n'


def test_a_clearly_slower_environment_fails_equivalence_and_holds_a_cost(
        data: ReportData) -> None:
    eq = _one(data, f'environment = "runc"\n{COMPRESS}relation = {{ equivalent_pct = 5 }}')
    assert eq.outcome is Outcome.FAILS, eq
    assert eq.high is not None and eq.high < 1 / 1.05  # wholly outside ±5%: the evidence
    cost = _one(data, f'environment = "runc"\n{COMPRESS}'
                      'relation = { worse_by_at_least_pct = 10 }')
    assert cost.outcome is Outcome.HOLDS, cost
    assert cost.high is not None and cost.high <= 0.9
    # The same evidence against a cost it does not reach: does not hold.
    big = _one(data, f'environment = "runc"\n{COMPRESS}'
                     'relation = { worse_by_at_least_pct = 40 }')
    assert big.outcome is Outcome.FAILS and big.low is not None and big.low > 0.6, big
    # A tax of at most 10% is the complement of "worse by at least 10%".
    most = _one(data, f'environment = "runc"\n{COMPRESS}relation = {{ at_most_worse_pct = 10 }}')
    assert most.outcome is Outcome.FAILS, most


def test_an_equal_environment_holds_equivalence(data: ReportData) -> None:
    v = _one(data, f'environment = "crun"\n{COMPRESS}relation = {{ equivalent_pct = 5 }}')
    assert v.outcome is Outcome.HOLDS, v
    assert v.low is not None and v.high is not None and 1 / 1.05 <= v.low <= v.high <= 1.05
    assert v.baseline == "native" and v.pairs == 6


def test_a_wide_spread_is_undecided_and_names_the_pairs_that_would_decide(
        data: ReportData) -> None:
    v = _one(data, f'environment = "gvisor"\n{COMPRESS}relation = {{ equivalent_pct = 5 }}')
    assert v.outcome is Outcome.UNDECIDED, v
    assert v.low is not None and v.high is not None
    assert v.low < 1.05 < v.high or v.low < 1 / 1.05 < v.high  # it reaches across an edge
    assert v.more_pairs is None or v.more_pairs > v.pairs
    assert "pair" in v.why


def test_a_ratio_between_two_environments_pairs_their_rounds(data: ReportData) -> None:
    """runc against crun (not the run's baseline): about 0.8, from the rounds both ran."""
    v = _one(data, f'environment = "runc"\nbaseline = "crun"\n{COMPRESS}'
                   'relation = { within = [0.7, 0.9] }')
    assert v.baseline == "crun" and v.outcome is Outcome.HOLDS, v
    assert v.value is not None and abs(v.value - 0.8) < 0.03


def test_settings_select_environments_and_a_missing_one_is_undecided(
        data: ReportData) -> None:
    v = _one(data, f'environment = {{ kind = "crun" }}\n{COMPRESS}'
                   'relation = { equivalent_pct = 5 }')
    assert v.environment == "crun" and v.outcome is Outcome.HOLDS
    none = _judged(data, f'environment = {{ kind = "qemu" }}\n{COMPRESS}'
                         'relation = { equivalent_pct = 5 }')
    assert [x.outcome for x in none] == [Outcome.UNDECIDED]
    assert "has no environment with kind = qemu" in none[0].why


def test_an_absolute_bound_is_judged_on_the_values_geometric_mean(data: ReportData) -> None:
    # startup's ready_ms in crun: 40 ms each, scaled by the round's noise.
    ok = _one(data, 'environment = "crun"\nworkload = "startup"\nmetric = "ready_ms"\n'
                    'relation = { at_most = 60 }')
    assert ok.outcome is Outcome.HOLDS and ok.value is not None and 35 < ok.value < 45, ok
    no = _one(data, 'environment = "crun"\nworkload = "startup"\nmetric = "ready_ms"\n'
                    'relation = { at_most = 20 }')
    assert no.outcome is Outcome.FAILS, no


def test_what_the_host_cannot_give_is_not_measurable_here(data: ReportData) -> None:
    numa = _one(data, f'environment = "crun"\n{COMPRESS}relation = {{ equivalent_pct = 5 }}\n'
                      'requires = ["numa"]')
    assert numa.outcome is Outcome.NOT_HERE and "NUMA" in numa.why
    never = _judged(data, 'not_measurable = "needs a 44-core host"')
    assert [(v.outcome, v.why) for v in never] == [(Outcome.NOT_HERE, "needs a 44-core host")]
    # kvm: the run's environments are not emulated, so the claim is judged.
    kvm = _one(data, f'environment = "crun"\n{COMPRESS}relation = {{ equivalent_pct = 5 }}\n'
                     'requires = ["kvm"]')
    assert kvm.outcome is Outcome.HOLDS


@pytest.mark.parametrize(("relation", "hib", "low", "high"), [
    ("{ equivalent_pct = 5 }", True, -math.log(1.05), math.log(1.05)),
    ("{ worse_by_at_least_pct = 20 }", True, -math.inf, math.log(0.8)),
    ("{ worse_by_at_least_pct = 20 }", False, math.log(1.2), math.inf),
    ("{ better_by_at_least_pct = 20 }", True, math.log(1.2), math.inf),
    ("{ better_by_at_least_pct = 20 }", False, -math.inf, math.log(0.8)),
    ("{ at_most_worse_pct = 10 }", True, math.log(0.9), math.inf),
    ("{ at_most_worse_pct = 10 }", False, -math.inf, math.log(1.1)),
    ("{ within = [0.5, 2.0] }", True, math.log(0.5), math.log(2.0)),
    ("{ at_most = 125 }", False, -math.inf, math.log(125)),
])
def test_each_relation_allows_the_ratios_it_says(relation: str, hib: bool, low: float,
                                                 high: float) -> None:
    import tomllib

    r = Relation.model_validate(tomllib.loads(f"r = {relation}")["r"])
    got = r.allowed(hib)
    assert got[0] == pytest.approx(low) and got[1] == pytest.approx(high)


@pytest.mark.parametrize(("text", "words"), [
    ("version = 1\n[[claim]\n", "not valid TOML"),
    ('version = 2\n' + _claim('not_measurable = "x"'), "version = 2"),
    (HEAD + _claim('not_measurable = "x"\nrelaton = { equivalent_pct = 5 }'),
     "t.toml:4: relaton is not a claims setting"),
    (HEAD + _claim('environment = "a"\nworkload = "w"\n'
                   'relation = { equivalent_pct = 5, at_most = 3 }'), "exactly one relation"),
    (HEAD + _claim('workload = "w"\nrelation = { equivalent_pct = 5 }'), "needs environment"),
    (HEAD + _claim('environment = "a"\nworkload = "w"\nrelation = { within = [2.0, 1.0] }'),
     "0 < low < high"),
    (HEAD + _claim('not_measurable = "x"') + _claim('not_measurable = "y"'),
     "t.toml:8: id 'c1' is also the id of the claim at t.toml:4"),
    (HEAD, "has no [[claim]] table"),
    (HEAD + _claim('environment = "a"\nworkload = "w"\nbaseline = "b"\n'
                   'relation = { at_most = 3.0 }'), "an absolute relation"),
])
def test_a_bad_claims_file_is_one_line_naming_the_place(text: str, words: str) -> None:
    with pytest.raises(ClaimsError) as e:
        parse_claims(text, "t.toml")
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_built_in_files_parse_with_provenance_and_unique_ids() -> None:
    ids: list[str] = []
    for name, text in builtin_files().items():
        for p in parse_claims(text, builtin_source(name)):
            ids.append(p.id)
            assert p.source is not None and p.source.study, p.where
            assert p.claim.source_figure, f"{p.where}: the source's own figure"
    assert len(ids) == len(set(ids))
    assert len(ids) >= 25


def test_the_gate_fails_on_a_false_gated_claim_in_one_line(results: Path) -> None:
    f = results / "mine.toml"
    f.write_text(HEAD + _claim(f'environment = "runc"\n{COMPRESS}'
                               'relation = { equivalent_pct = 5 }\ngate = true',
                               "runc-equals-native")
                 + _claim(f'environment = "crun"\n{COMPRESS}relation = {{ equivalent_pct = 5 }}'
                          '\ngate = true', "crun-equals-native"))
    r = CliRunner().invoke(main, ["claims", str(f), "--run", "r1", "--results", str(results),
                                  "--gate"])
    assert r.exit_code == 1, r.output
    fails = [x for x in r.stderr.splitlines() if x.startswith("FAIL")]
    assert len(fails) == 1 and "runc-equals-native" in fails[0], r.stderr
    # Without --gate it reports and exits 0; --json carries the same verdicts.
    r = CliRunner().invoke(main, ["claims", str(f), "--run", "r1", "--results", str(results),
                                  "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {c["id"]: c["outcome"] for c in doc["claims"] if "level=2" in c["point"]} == {
        "runc-equals-native": "does not hold", "crun-equals-native": "holds"}


def test_bad_input_is_exit_2_in_one_line(results: Path) -> None:
    r = CliRunner().invoke(main, ["claims", "nosuch", "--run", "r1", "--results",
                                  str(results)])
    assert r.exit_code == 2 and "claims file nosuch not found" in r.stderr
    bad = results / "bad.toml"
    bad.write_text("version = 1\n")
    r = CliRunner().invoke(main, ["claims", str(bad), "--run", "r1", "--results",
                                  str(results)])
    assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def _builtin() -> list:
    out = []
    for name, text in builtin_files().items():
        out += parse_claims(text, builtin_source(name))
    return out


def test_the_built_in_plan_studies_is_what_the_built_in_claims_need() -> None:
    """plans/studies.toml is claims_plan's output for the built-in claims on a host with KVM
    and two NUMA nodes: regenerate it when a claim changes (the message says how)."""
    from importlib import resources

    from isotax.analysis.claims_plan import HostCan, claims_plan

    want = claims_plan(_builtin(), HostCan(kvm=True, numa_nodes=2), "studies")
    got = resources.files("isotax.plans").joinpath("studies.toml").read_text()
    assert got == want, ("plans/studies.toml is stale: write claims_plan(<built-in claims>, "
                         "HostCan(True, 2), 'studies') to it")


def test_the_claims_plan_leaves_out_what_this_host_cannot_measure() -> None:
    from isotax.analysis.claims_plan import HostCan, claims_plan, left_out
    from isotax.plan import parse_plan

    claims = _builtin()
    small = parse_plan(claims_plan(claims, HostCan(kvm=False, numa_nodes=1)), "t")
    big = parse_plan(claims_plan(claims, HostCan(kvm=True, numa_nodes=2)), "t")
    kinds = {e.kind for e in small.environments}
    assert "qemu" not in kinds and "vm9p" not in kinds  # only KVM claims need VMs
    assert {"qemu", "vm9p"} <= {e.kind for e in big.environments}
    # Every claim planned has an environment in the plan that its selector fits.
    planned = [p for p in claims if not left_out(p, HostCan(False, 1))]
    assert planned and all(p.claim.environment is not None for p in planned)
    assert len({(w.name, str(w.params)) for w in small.workloads}) == len(small.workloads)
    numa = next(p for p in claims if p.id == "pacific-numa-local-vm")
    assert "NUMA" in left_out(numa, HostCan(True, 1))
    assert left_out(numa, HostCan(True, 2)) == ""


def test_the_report_carries_a_runs_claims_in_every_format(tmp_path: Path) -> None:
    """A run measured for a claims file keeps it (meta "claims"): the Markdown report's
    section, results.json's "claims" rows (through the schema's model) and claims.csv give
    the same verdicts; a run without a matching claim writes no claims.csv."""
    import csv

    from isotax.report import write_reports

    store = SQLiteStore(tmp_path / "isotax.db")
    _store_run(store, "r1", SCENARIO)
    mine = HEAD + _claim(f'environment = "runc"\n{COMPRESS}relation = {{ equivalent_pct = 5 }}',
                         "runc-equal") + _claim('not_measurable = "needs 44 cores"', "big")
    store.put_run_meta("r1", "claims", {"files": {"mine.toml": mine}})
    out = tmp_path / "out"
    write_reports(analyze(store, "r1"), out)
    md = (out / "report.md").read_text()
    assert "## The studies on this host" in md and "| runc-equal |" in md
    doc = json.loads((out / "results.json").read_text())
    by_id = {(c["id"], c["point"]): c["outcome"] for c in doc["claims"]}
    assert by_id[("runc-equal", next(p for i, p in by_id if i == "runc-equal"
                                     and "level=2" in p))] == "does not hold"
    assert ("big", "") in by_id and by_id[("big", "")] == "not measurable here"
    rows = list(csv.DictReader((out / "claims.csv").open()))
    assert {(r["id"], r["outcome"]) for r in rows} == {(c["id"], c["outcome"])
                                                       for c in doc["claims"]}
    _store_run(store, "r2", SCENARIO)  # no claims kept, none of the built-in ones matches
    write_reports(analyze(store, "r2"), tmp_path / "out2")
    assert not (tmp_path / "out2" / "claims.csv").exists()
    assert "The studies on this host" not in (tmp_path / "out2" / "report.md").read_text()
    store.close()


def test_isotax_check_reads_a_claims_file_as_its_bounds(results: Path) -> None:
    """One format for the CI gate: `isotax check --bounds` takes a claims file; a gate claim
    that does not hold is a FAIL line naming it (exit 1), one that holds says nothing, and a
    claim without gate = true never fails."""
    f = results / "gate-claims.toml"
    f.write_text(HEAD + _claim(f'environment = "runc"\n{COMPRESS}'
                               'relation = { equivalent_pct = 5 }\ngate = true', "runc-equal")
                 + _claim(f'environment = "crun"\n{COMPRESS}relation = {{ equivalent_pct = 5 }}'
                          '\ngate = true', "crun-equal")
                 + _claim(f'environment = "runc"\n{COMPRESS}relation = {{ within = [1.5, 2] }}',
                          "ungated"))
    r = CliRunner().invoke(main, ["check", "r1", "--bounds", str(f), "--results", str(results)])
    assert r.exit_code == 1, r.output
    fails = [x for x in r.stdout.splitlines() if x.startswith("FAIL")]
    assert fails and all("claim runc-equal:" in x for x in fails), r.stdout
    assert "crun-equal" not in r.stdout and "ungated" not in r.stdout
    f.write_text(HEAD + _claim(f'environment = "crun"\n{COMPRESS}'
                               'relation = { equivalent_pct = 5 }\ngate = true', "crun-equal"))
    r = CliRunner().invoke(main, ["check", "r1", "--bounds", str(f), "--results", str(results)])
    assert r.exit_code == 0, r.output


def test_a_claims_parameter_matches_a_points_by_value() -> None:
    from isotax.analysis.claims import same_setting

    assert same_setting(0, 0.0) and same_setting(5, 5.0) and not same_setting(5, 5.5)
    assert same_setting(True, "true") and not same_setting(True, 1)
    assert same_setting("tcp_crr", "tcp_crr") and not same_setting("tcp", "udp")
