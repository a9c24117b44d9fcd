"""isotax fleet report's analysis: each host's isolation tax side by side, which hosts differ
beyond the margin from the reference host (the verdicts' confidence sequences), the
fingerprint facts that differ, hosts without a run, and runs of different plans refused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from isotax.analysis.fleet import (
    DIFFERS,
    FEW,
    ONE_HOST,
    WITHIN,
    Fleet,
    FleetError,
    NotSideBySide,
    fleet_hosts,
    hosts_of_runs,
    known_fleets,
    side_by_side,
    tax_over_reference,
    to_json,
)
from isotax.analysis.report_data import analyze
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.sqlite import SQLiteStore

PLAN = """name = "fleetplan"
repetitions = 5
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
params = { corpus_mib = 16 }
"""
PARAMS = {"corpus_mib": 16, "level": 2, "seed": 1, "threads": 0}
BASE_HOST = {"kernel": "6.1.0", "cpu_model": "EPYC 7302", "smt": "on", "thp_enabled": "madvise",
             "cpus": 16}
JITTER = (-1.0, 0.0, 1.0, 0.5, -0.5)  # percent

# Per host: its fingerprint changes, the native throughput, and each environment's tax.
# h3's runc costs 30% where h1's and h2's cost 10%; crun costs 5% everywhere.
HOSTS: dict[str, tuple[dict[str, object], float, dict[str, float]]] = {
    "h1": ({}, 100.0, {"runc": 0.90, "crun": 0.95}),
    "h2": ({"kernel": "6.6.0", "cpu_model": "EPYC 9354"}, 130.0, {"runc": 0.90, "crun": 0.95}),
    "h3": ({}, 100.0, {"runc": 0.70, "crun": 0.95}),
}


def put_run(store: SQLiteStore, run_id: str, host: str, native: float,
            taxes: Mapping[str, float], fp: Mapping[str, object], fleet: str | None = "f1",
            plan: str = PLAN, reps: Sequence[float] = JITTER,
            points: Sequence[Mapping[str, object]] = (PARAMS,)) -> None:
    store.create_run(run_id, "fleetplan", plan, 7, {**BASE_HOST, **fp, "hostname": host})
    for env in ("native", *taxes):
        store.put_environment(EnvRecord(run_id, env, env, True, "",
                                        EnvironmentDescription.from_stored({}), {}, {}))
    for rep, jitter in enumerate(reps, start=1):
        for params in points:
            for env, k in (("native", 1.0), *taxes.items()):
                v = native * k * (1 + jitter / 100)
                store.commit_cell(run_id, CellKey(env, "compress", params, rep), "1",
                                  CellOutcome(CellStatus.OK, "",
                                              [Sample("throughput", v, "MB/s"),
                                   Sample("cpu_per_mb", 1000 / v, "CPU-ms/MB", False)]), 0, 1)
    store.set_run_status(run_id, "complete", 2)
    if fleet:
        store.put_run_meta(run_id, "fleet", {"id": fleet, "host": host,
                                             "address": f"10.0.0.{run_id[-1]}"})


def fleet_store(tmp_path: Path, points: Sequence[Mapping[str, object]] = (PARAMS,)
                ) -> SQLiteStore:
    """Fleet f1: h1, h2, h3 as HOSTS says, all complete."""
    store = SQLiteStore(tmp_path / "isotax.db")
    for i, (name, (fp, native, taxes)) in enumerate(HOSTS.items(), start=1):
        put_run(store, f"r{i}", name, native, taxes, fp, points=points)
    return store


def build(store: SQLiteStore, fleet: str = "f1", state: Mapping[str, object] | None = None,
          **kw: object) -> Fleet:
    hosts = fleet_hosts(store, fleet, state)
    data = {h.name: analyze(store, h.run_id) for h in hosts if h.run_id}
    return side_by_side(fleet, hosts, data, **kw)  # type: ignore[arg-type]


def row(f: Fleet, env: str, metric: str = "throughput"):  # type: ignore[no-untyped-def]
    return next(r for r in f.rows if r.environment == env and r.metric == metric)


def test_each_hosts_tax_and_who_differs(tmp_path: Path) -> None:
    f = build(fleet_store(tmp_path))
    assert f.reference == "h1" and f.compared == ["h1", "h2", "h3"]
    assert f.environments == ["runc", "crun"] and f.baseline == "native"
    runc = row(f, "runc")
    assert runc.headline and runc.reference == "h1"
    taxes = {h: t.tax.ratio for h, t in runc.taxes.items() if t.tax}
    assert taxes == pytest.approx({"h1": 0.9, "h2": 0.9, "h3": 0.7})
    # h3's runc tax is 0.7 / 0.9 of h1's, beyond the margin; h2's is the same on other hardware.
    assert runc.differs == ["h3"] and runc.verdict == DIFFERS
    vs3 = runc.taxes["h3"].vs_reference
    assert vs3 is not None and vs3.ratio == pytest.approx(0.7 / 0.9)
    assert vs3.ci_high < 1 and vs3.verdict == "worse"
    vs2 = runc.taxes["h2"].vs_reference
    assert vs2 is not None and vs2.ci_low <= 1 <= vs2.ci_high
    assert runc.taxes["h1"].vs_reference is None  # the reference itself
    # The lower-is-better metric agrees: h3 spends more CPU per MB in runc.
    cpu = row(f, "runc", "cpu_per_mb")
    assert cpu.differs == ["h3"] and not cpu.headline
    crun = row(f, "crun")
    assert crun.verdict == WITHIN and crun.differs == []
    assert all(t.tax and t.tax.verdict == "worse" for t in crun.taxes.values())


def test_fingerprint_differences_against_the_reference(tmp_path: Path) -> None:
    f = build(fleet_store(tmp_path))
    assert f.host_differences == {
        "h2": ["CPU model: EPYC 7302 vs EPYC 9354", "kernel: 6.1.0 vs 6.6.0"], "h3": []}
    # Another reference: the differences and the comparisons turn around it.
    (tmp_path / "b").mkdir()
    g = build(fleet_store(tmp_path / "b"), reference="h3")
    assert g.reference == "h3" and row(g, "runc").differs == ["h1", "h2"]
    assert g.host_differences["h1"] == []
    assert "kernel: 6.1.0 vs 6.6.0" in g.host_differences["h2"]


def test_a_host_with_one_repetition_is_too_few_runs(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    put_run(store, "r1", "h1", 100.0, {"runc": 0.9}, {})
    put_run(store, "r2", "h2", 100.0, {"runc": 0.6}, {}, reps=(0.0,))
    f = build(store)
    runc = row(f, "runc")
    assert runc.verdict == FEW and runc.differs == []
    vs = runc.taxes["h2"].vs_reference
    assert vs is not None and vs.ratio == pytest.approx(0.6 / 0.9) and not vs.has_ci


def test_an_environment_on_one_host_only(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    put_run(store, "r1", "h1", 100.0, {"runc": 0.9, "crun": 0.9}, {})
    put_run(store, "r2", "h2", 100.0, {"runc": 0.9}, {})
    f = build(store)
    assert row(f, "crun").verdict == ONE_HOST and row(f, "runc").verdict == WITHIN


def test_failed_hosts_from_the_state_file_are_listed_in_inventory_order(tmp_path: Path) -> None:
    store = fleet_store(tmp_path)
    store.set_run_status("r3", "interrupted", 3)
    state = {"hosts": {"h0": {"run_id": None, "status": "failed", "reason": "unreachable"},
                       "h2": {"run_id": "r2", "status": "complete"},
                       "h1": {"status": "complete"}, "bad": "not a mapping"},
             "other": 1}
    f = build(store, state=state)
    assert [h.name for h in f.hosts] == ["h0", "h2", "h1", "bad", "h3"]
    assert f.reference == "h2"  # the first in inventory order with a run
    troubled = {h.name: (h.status, h.reason) for h in f.troubled}
    assert troubled == {"h0": ("failed", "unreachable"),
                        "bad": ("no run", "no run of it is in the store"),
                        "h3": ("interrupted", "")}
    assert f.compared == ["h2", "h1", "h3"]  # an unfinished run still shows what it measured
    # Garbage for a state file is no state file.
    assert [h.name for h in fleet_hosts(store, "f1", {"hosts": [1, 2]})] == ["h1", "h2", "h3"]


def test_a_host_that_ran_twice_reports_its_last_complete_run(tmp_path: Path) -> None:
    store = fleet_store(tmp_path)
    put_run(store, "r9", "h3", 100.0, {"runc": 0.9, "crun": 0.95}, {})
    store.set_run_status("r9", "failed", 9)
    put_run(store, "r8", "h3", 100.0, {"runc": 0.9, "crun": 0.95}, {})
    hosts = {h.name: h.run_id for h in fleet_hosts(store, "f1")}
    assert hosts == {"h1": "r1", "h2": "r2", "h3": "r8"}


def test_different_plans_are_refused_unless_forced(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "isotax.db")
    put_run(store, "r1", "h1", 100.0, {"runc": 0.9}, {})
    put_run(store, "r2", "h2", 100.0, {"runc": 0.9}, {}, plan=PLAN.replace("= 5", "= 6"))
    with pytest.raises(NotSideBySide, match=r"different plans .* --force"):
        build(store)
    f = build(store, force=True)
    assert len(f.plans) == 2 and sorted(h for hs in f.plans.values() for h in hs) == ["h1", "h2"]


def test_unknown_reference_and_no_runs(tmp_path: Path) -> None:
    store = fleet_store(tmp_path)
    with pytest.raises(FleetError, match="--reference 'h9' is not a host"):
        build(store, reference="h9")
    assert fleet_hosts(store, "nope") == []
    state = {"hosts": {"x": {"status": "failed", "reason": "ssh: no route"}}}
    with pytest.raises(FleetError, match=r"no host with a run.*x: failed, ssh: no route"):
        build(store, "nope", state)
    assert known_fleets(store) == ["f1"]


def test_any_runs_side_by_side_are_named_by_meta_or_hostname(tmp_path: Path) -> None:
    store = fleet_store(tmp_path)
    put_run(store, "x1", "lab", 100.0, {"runc": 0.9, "crun": 0.95}, {}, fleet=None)
    put_run(store, "x2", "lab", 100.0, {"runc": 0.9, "crun": 0.95}, {}, fleet=None)
    hosts = hosts_of_runs(store, ["r1", "x1", "x2"])
    assert [h.name for h in hosts] == ["h1", "lab", "lab (x2)"]
    assert hosts[0].address == "10.0.0.1"


def test_ratio_of_taxes_interval() -> None:
    a = [90.0, 91.0, 89.0, 90.5]
    base = [100.0, 101.0, 99.0, 100.5]
    same = tax_over_reference(a, base, a, base)
    assert same is not None and same.ratio == pytest.approx(1.0) and same.within_noise
    worse = tax_over_reference([70.0, 71.0, 69.0], base, a, base)
    assert worse is not None and worse.ci_high < 1 and worse.within_noise is False
    flat = tax_over_reference([2.0, 2.0], [4.0, 4.0], [1.0, 1.0], [4.0, 4.0])
    assert flat is not None and (flat.ratio, flat.ci_low, flat.ci_high) == (2.0, 2.0, 2.0)
    assert tax_over_reference(a, [0.0, 0.0], a, base) is None


def test_json_is_versioned_and_carries_every_row(tmp_path: Path) -> None:
    f = build(fleet_store(tmp_path))
    doc = to_json(f)
    assert doc["format_version"] >= 2 and doc["fleet_format_version"] == 2
    assert doc["fleet"] == "f1" and doc["reference"] == "h1" and doc["baseline"] == "native"
    assert [h["name"] for h in doc["hosts"]] == ["h1", "h2", "h3"]
    assert doc["hosts"][1]["fingerprint_differences"][1] == "kernel: 6.1.0 vs 6.6.0"
    assert len({h["plan_hash"] for h in doc["hosts"]}) == 1
    runc = next(r for r in doc["rows"] if r["environment"] == "runc"
                and r["metric"] == "throughput")
    assert runc["verdict"] == DIFFERS and runc["differs"] == ["h3"]
    h3 = runc["hosts"]["h3"]
    assert h3["ratio"] == pytest.approx(0.7) and h3["n"] == 5 and h3["n_baseline"] == 5
    assert h3["vs_reference"]["verdict"] == "worse" and h3["ci_low"] < 0.7 < h3["ci_high"]
    assert runc["hosts"]["h1"]["vs_reference"] is None
    assert len(doc["rows"]) == 4


def test_the_report_says_which_hosts_are_one_machine_and_what_each_run_flagged(
        tmp_path: Path) -> None:
    """Two hosts of one machine (one machine-id, one boot) are said to be one machine; a run
    whose environments got unequal resources (parity = "flag") has that difference repeated
    under its host, in the Markdown, the JSON and on the terminal."""
    from isotax.report import fleet_md

    store = fleet_store(tmp_path)
    one = {"machine_id": "m" * 32, "boot_id": "b-1"}
    for run, host, machine in (("r1", "h1", one), ("r2", "h2", one),
                               ("r3", "h3", {"machine_id": "n" * 32, "boot_id": "b-2"})):
        store.put_run_meta(run, "fleet", {"id": "f1", "host": host, "address": "a",
                                          "machine": machine})
    store.put_environment(EnvRecord("r3", "native", "native", True, "",
                                    EnvironmentDescription.from_stored(
                                        {"parity.cpus": "2", "parity.memory_mib": "4096"}),
                                    {}, {}))
    store.put_environment(EnvRecord("r3", "runc", "runc", True, "",
                                    EnvironmentDescription.from_stored(
                                        {"parity.cpus": "1", "parity.memory_mib": "4096"}),
                                    {}, {}))
    f = build(store)
    assert f.same_machines == [["h1", "h2"]]
    assert f.flagged["h1"] == [] and len(f.flagged["h3"]) == 1
    assert "runc may run on 1 CPU(s), native on 2" in f.flagged["h3"][0]
    md = fleet_md.render(f)
    assert "h1 and h2 are the same machine (one machine-id, same boot)" in md
    assert "## What the runs flagged" in md and "| h3 | unequal resources: runc may" in md
    doc = to_json(f)
    assert doc["same_machine"] == [["h1", "h2"]]
    assert doc["hosts"][2]["flagged"] == f.flagged["h3"]
    # A machine identity the state file holds counts as well as the run's meta; a run
    # without either is no one's twin.
    (tmp_path / "b").mkdir()
    g = build(fleet_store(tmp_path / "b"), state={"hosts": {
        "h1": {"machine": one}, "h2": {"machine": one}, "h3": {}}})
    assert g.same_machines == [["h1", "h2"]]
