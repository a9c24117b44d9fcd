"""Typed facts (isotax.facts, issue 30): an instance's facts round-trip through the store as a
versioned object; a run stored before they were typed (real describe() words from this
host's store, tests/data/facts) reads back as the same facts; the report renders the words
and reads the typed facts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import DATA

from isotax.analysis.report_data import analyze
from isotax.facts import (
    FACTS_KEY,
    FACTS_VERSION,
    Facts,
    Isolation,
    Reach,
    stored_description,
    stored_facts,
)
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.report import json_report, markdown
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.sqlite import SQLiteStore

OLD = json.loads((DATA / "facts" / "stored-before-facts.json").read_text())["environments"]
VM = Facts("qemu", Reach.TAP, runtime="QEMU emulator version 7.2.11", bridge="itx-brq1",
           guest_memory_mib=2048, vcpus=2, emulated=True, accelerator="tcg",
           accelerator_reason="no KVM here", words={"network": "bridge itx-brq1, tap itx-tq1",
                                                     "machine": "pc"})
ENGINE = Facts("docker", Reach.PUBLISHED, isolation=Isolation.SANDBOX, runtime="runsc 1",
               published="10.213.7.1", container_address="172.17.0.2", memory_limit_mib=512)


@pytest.mark.parametrize("facts", [VM, ENGINE, Facts("native", Reach.HOST)])
def test_facts_round_trip_through_their_stored_form(facts: Facts) -> None:
    stored = json.loads(json.dumps(stored_description(facts)))  # as the store keeps it
    assert stored[FACTS_KEY]["version"] == FACTS_VERSION
    back = stored_facts(stored)
    assert back == facts.__class__(**{**facts.__dict__, "words": {}})  # words: display only
    assert FACTS_KEY not in EnvironmentDescription.from_stored(stored).lines()


def test_the_display_is_rendered_from_the_facts_and_the_kinds_words() -> None:
    d = VM.display()
    assert list(d)[:2] == ["kind", "runtime"] and d["kind"] == "qemu"
    assert d["network"] == "bridge itx-brq1, tap itx-tq1"  # the kind's own words win
    assert (d["accelerator"], d["emulated"]) == ("tcg", "yes")
    e = ENGINE.display()
    assert (e["network"], e["published"], e["container_address"]) == \
        ("published", "10.213.7.1", "172.17.0.2")
    assert "emulated" not in Facts("native", Reach.HOST).display()  # no accelerator: no line


def test_a_run_stored_before_facts_were_typed_reads_as_its_facts() -> None:
    """Real describe() words of a quick run of this host (2026-11-27), read once, here."""
    facts = {name: stored_facts(e["describe"]) for name, e in OLD.items()}
    assert {n: f.kind for n, f in facts.items()} == {n: e["kind"] for n, e in OLD.items()}
    qemu = facts["qemu"]
    assert (qemu.reach, qemu.emulated, qemu.accelerator) == (Reach.TAP, True, "tcg")
    assert (qemu.guest_memory_mib, qemu.vcpus, qemu.memory_limit_mib) == (2048, 2, None)
    assert qemu.bridge == "" and qemu.runtime == ""  # not worded then
    assert facts["runc"].reach is Reach.BRIDGE and facts["runc-host"].reach is Reach.HOST
    assert facts["native"].reach is Reach.HOST and not facts["native"].emulated
    assert all(f.isolation is None for f in facts.values())  # the kind's, then
    assert facts["crun"].memory_limit_mib is None  # "no limit"
    limited = stored_facts({**OLD["runc"]["describe"], "memory": "512 MiB (limit)"})
    assert limited.memory_limit_mib == 512
    assert stored_facts({}).kind == "?" and stored_facts({}).reach is Reach.NONE


def _store(tmp_path: Path) -> SQLiteStore:
    """A run with one environment stored the old way and one the new way."""
    plan = ('name = "p"\nrepetitions = 2\n[[environments]]\nname = "native"\nkind = "native"\n'
            '[[environments]]\nname = "qemu"\nkind = "qemu"\n[[workloads]]\nname = "compress"\n')
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r1", "p", plan, 1, {"hostname": "h", "cpus": 2})
    store.put_environment(EnvRecord("r1", "native", "native", True, "",
                                    EnvironmentDescription.from_stored(OLD["native"]["describe"]),
                                    {}, {}))
    store.put_environment(EnvRecord("r1", "qemu", "qemu", True, "",
                                    EnvironmentDescription.from_stored(
                                        {**stored_description(VM), "loadgen_path": "x"}),
                                    {}, {}))
    for rep in (1, 2):
        for env, v in (("native", 100.0), ("qemu", 20.0)):
            store.commit_cell("r1", CellKey(env, "compress", {}, rep), "1",
                              CellOutcome(CellStatus.OK, "",
                                          [Sample("throughput", v + rep, "MB/s", True)]), 0, 1)
    store.set_run_status("r1", "complete", 2)
    return store


def test_the_report_reads_the_typed_facts_and_shows_the_words(tmp_path: Path) -> None:
    d = analyze(_store(tmp_path), "r1")
    assert d.emulated("qemu") and not d.emulated("native")
    envs = {e["name"]: e for e in json.loads(json_report.render(d))["environments"]}
    assert envs["qemu"]["facts"]["guest_memory_mib"] == 2048
    assert envs["native"]["facts"]["reach"] == "host"  # read from the old words
    assert FACTS_KEY not in envs["qemu"]["describe"]
    assert envs["qemu"]["describe"]["loadgen_path"] == "x"
    md = markdown.render(d)
    assert "EMULATED" in md and "'version'" not in md
