"""Parity: the probe's real output in each environment, the differences it finds, and a plan
that asks for unequal resources refused before it measures anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import requires_root_and

from isotax.parity import (
    Resources,
    all_problems,
    parse_ethtool_features,
    parse_probe,
    problems,
)

DATA = Path(__file__).parent / "data" / "parity"


def _probe(name: str, hugepages: str = "none") -> Resources:
    return parse_probe((DATA / f"probe-{name}.txt").read_text(), hugepages)


def test_ethtool_features_top_level_only() -> None:
    f = parse_ethtool_features((DATA / "ethtool-k-eth0-virtio.txt").read_text())
    assert f["rx-checksumming"] == "on" and f["large-receive-offload"] == "off"
    assert "tx-checksum-ipv4" not in f  # an indented sub-feature
    veth = parse_ethtool_features((DATA / "ethtool-k-veth.txt").read_text())
    assert veth["generic-receive-offload"] in ("on", "off")
    assert parse_ethtool_features("netlink error: No such device") == {}


def test_native_probe() -> None:
    r = _probe("native")
    # An unlimited v1 memory cgroup reads ~2^63: MemTotal stands.
    assert (r.cpus, r.memory_mib, r.thp, r.mtu) == (2, 24105, "madvise", 1400)
    assert r.offloads["tcp-segmentation-offload"] == "on"


def test_limited_container_and_vm_differ_and_say_how() -> None:
    native, limited = _probe("native"), _probe("runc-limited")
    vm = _probe("qemu-stock-guest", "2048 kB")  # before isotax passed THP and MTU to guests
    assert (limited.cpus, limited.memory_mib) == (1, 512)
    said = " | ".join(problems("runc-limited", limited, "native", native))
    assert "1 CPU(s), native on 2: set vcpus = 2" in said
    assert "512 MiB of memory, native 24105 MiB" in said
    said = " | ".join(problems("qemu", vm, "native", native))
    assert "transparent hugepages are 'always' in qemu, 'madvise'" in said
    assert "MTU 1500, native's 1400" in said and "2048 kB hugepages" in said
    assert "offloads" not in said  # no ethtool in that guest: unknown, not "different"


def test_guest_booted_with_the_hosts_thp_and_mtu() -> None:
    vm, native = _probe("qemu-matched-guest"), _probe("native")
    said = problems("qemu", vm, "native", native)
    assert (vm.thp, vm.mtu) == ("madvise", 1400)
    assert len(said) == 1 + bool(vm.offloads != native.offloads) and "MiB of memory" in said[0]


def test_bridged_container_gets_the_uplinks_mtu_and_offloads() -> None:
    assert _probe("runc-bridge").offloads["generic-receive-offload"] == "on"  # a veth: off
    assert problems("runc", _probe("runc-bridge"), "native", _probe("native")) == []


def test_describe_round_trip_and_all_problems() -> None:
    native, limited = _probe("native"), _probe("runc-limited")
    assert Resources.from_describe(native.as_describe()) == native
    assert Resources.from_describe({"kind": "x"}) is None
    described = {"native": native.as_describe(), "runc": limited.as_describe(),
                 "crun": {"parity.error": "the parity probe failed (127): sh: not found"}}
    found = all_problems(described, "native")
    assert len(found) == 3 and any("could not be probed" in p for p in found)


def test_probe_refuses_other_text() -> None:
    with pytest.raises(ValueError, match="not the parity probe"):
        parse_probe((DATA / "ethtool-k-lo.txt").read_text())


REFUSED = """
name = "unequal"
repetitions = 1
warmups = 0
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc-small"
kind = "runc"
vcpus = 1
[[workloads]]
name = "compress"
params = { corpus_mib = 1, threads = 1 }
"""


@pytest.mark.integration
@requires_root_and("runc", "debootstrap")
def test_unequal_plan_is_refused_before_measuring(tmp_path: Path) -> None:
    from isotax.leaks import find_leaks

    plan = tmp_path / "plan.toml"
    plan.write_text(REFUSED)
    p = subprocess.run([sys.executable, "-m", "isotax", "run", str(plan), "--results",
                        str(tmp_path / "r")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 2, p.stdout[-2000:] + p.stderr[-2000:]
    assert "runc-small may run on 1 CPU(s), native on 2" in p.stdout + p.stderr
    last = [ln for ln in p.stderr.splitlines() if ln.strip()][-1]
    assert last.startswith("isotax: refused:") and 'parity = "flag"' in last
    from isotax.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "r" / "isotax.db")
    (run,) = store.list_runs()
    assert run.status == "refused" and store.cells(run.id) == []
    store.close()
    assert not [x for x in find_leaks() if "runc-small" in x]
