"""One typed record per environment (isotax.host.facts.description): what the runner builds, what
the store keeps of it, and what a report reads back, older runs' rows included."""

from __future__ import annotations

import dataclasses
import json

import pytest

from isotax.environments.kube.pod import PodInstance
from isotax.environments.native import NativeInstance
from isotax.facts import FACTS_KEY, Facts, Reach
from isotax.host.facts.description import RECORD_KEY, RECORD_VERSION, EnvironmentDescription
from isotax.host.facts.parity import Resources
from isotax.protocols import ElsewhereNode, Evidence, Isolation, NodeIdentity, OwnCpuGroup

RUNC = Facts("runc", Reach.BRIDGE, memory_limit_mib=512)
# Every field set, so that a field the record drops fails the round trip.
PROBED = Resources(2, 512, "madvise", 1500, {"generic-receive-offload": "on"}, "2M",
                   cpu_quota=1.5, cgroup="v2", shm_mib=64)


SHOWN = Evidence(boot_id="0f1e2d3c-aaaa", pidns="pid:[4026532301]", release="6.12.0",
                 version="#1 SMP Debian", dmesg="", cgroup="0::/")


def built() -> EnvironmentDescription:
    return EnvironmentDescription(RUNC, loadgen_path="veth itx-lg0 -> bridge itx-br0",
                                  resources=PROBED, host_memory="3.1 MiB (runc 3.1)",
                                  isolation=Isolation.CONTAINER, evidence=SHOWN,
                                  node=NodeIdentity("6.12.0", "9a8b7c6d"))


def test_the_stored_row_reads_back_as_the_same_record() -> None:
    d = built()
    row = json.loads(json.dumps(d.to_stored()))  # as describe_json keeps it
    back = EnvironmentDescription.from_stored(row)
    assert back == d
    assert back.resources == PROBED and back.facts == RUNC
    assert back.isolation is Isolation.CONTAINER and back.evidence == SHOWN
    assert back.node == NodeIdentity("6.12.0", "9a8b7c6d")
    assert back.identity == "container: kernel 6.12.0 #1 SMP Debian, boot 0f1e2d3c, " \
        "pid:[4026532301]"
    assert back.to_stored() == row and row[RECORD_KEY]["version"] == RECORD_VERSION


def test_the_resources_are_read_from_the_record_not_from_the_words() -> None:
    row = json.loads(json.dumps(built().to_stored()))
    row["parity.cpus"] = "words a person may change"  # the report's line only
    assert EnvironmentDescription.from_stored(row).resources == PROBED


def test_the_reports_lines_are_the_facts_words_then_the_runners_own() -> None:
    lines = built().lines()
    assert FACTS_KEY not in lines and RECORD_KEY not in lines
    keys = list(lines)
    assert keys[:len(RUNC.display())] == list(RUNC.display())
    assert keys.index("loadgen_path") < keys.index("parity.cpus") < keys.index("identity")
    assert lines["parity.cgroup"] == "v2" and lines["host_memory"].startswith("3.1 MiB")


def test_an_older_runs_row_is_kept_verbatim() -> None:
    # Stored before facts were typed: display words only, no typed facts.
    old = {"kind": "qemu", "memory_mib": "2048", "parity.cpus": "2",
           "parity.memory_mib": "1966", "identity": "vm: kernel 6.1 (its own boot)"}
    d = EnvironmentDescription.from_stored(old)
    assert d.facts.kind == "qemu" and d.facts.guest_memory_mib == 2048
    assert d.resources is not None and d.resources.memory_mib == 1966
    assert d.identity.startswith("vm:")  # its words, kept: no evidence to type
    assert d.isolation is None and d.evidence is None and d.node is None
    assert d.to_stored() == old  # copied to another store as it was: no facts key added
    assert d.lines() == old


def test_an_environment_that_never_started_is_stored_as_nothing() -> None:
    d = EnvironmentDescription.unstarted()
    assert d.to_stored() == {} and d.lines() == {}
    assert d.facts.kind == "?" and d.resources is None and not d.resources_error


def test_what_the_telemetry_and_identity_check_ask_is_declared_not_guessed() -> None:
    # The instance capabilities the runner and telemetry ask by protocol, not by getattr.
    assert issubclass(NativeInstance, OwnCpuGroup)
    assert issubclass(PodInstance, ElsewhereNode)
    assert not issubclass(PodInstance, OwnCpuGroup)
    assert not issubclass(NativeInstance, ElsewhereNode)


@pytest.mark.parametrize(("stored", "words"), [
    ({"kind": "runc", "parity.cpus": "two", "parity.memory_mib": "1"},
     "its parity lines do not hold the probe's resources"),
    ({"kind": "runc", RECORD_KEY: []}, "'record' is not an object"),
    ({"kind": "runc", RECORD_KEY: {"version": "1"}}, "record.version is '1'"),
    ({"kind": "runc", RECORD_KEY: {"version": 1, "evidence": {"boot_id": 1}}},
     "record.evidence is not an object of the strings boot_id, pidns"),
    ({"kind": "runc", RECORD_KEY: {"version": 2, "resources": {"cpus": "2"}}},
     "record.resources.cpus is '2', not what the parity probe gives"),
    ({"kind": "runc", RECORD_KEY: {"version": 2, "resources": {
        **dataclasses.asdict(PROBED), "shm_mib": "64"}}},
     "record.resources.shm_mib is '64', not what the parity probe gives"),
])
def test_a_row_that_does_not_hold_a_record_is_refused_naming_the_field(
        stored: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace("[", r"\[")):
        EnvironmentDescription.from_stored(stored)


def test_a_record_stored_before_the_shm_probe_reads_its_size_as_unknown() -> None:
    row = json.loads(json.dumps(built().to_stored()))
    del row[RECORD_KEY]["resources"]["shm_mib"]
    back = EnvironmentDescription.from_stored(row).resources
    assert back == dataclasses.replace(PROBED, shm_mib=None)
