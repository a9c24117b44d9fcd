"""NUMA placement (the plan's numa_node) in every environment kind beside native, nothing
started: the CPU list helpers on real and synthetic sysfs trees (tests/data/numa), and each
kind's spec or command line with the node set and unset."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import DATA

from isotax import protocols
from isotax.environments.oci.bundle import bundle_config
from isotax.environments.vm.qemu_tuning import (
    HostFacts,
    KnobError,
    node_nr_hugepages,
    resolve_knobs,
)
from isotax.environments.vm.qemu_vm import VmConfig, qemu_argv
from isotax.host.facts import numa
from isotax.host.facts.numa import format_cpulist, node_cpulist, node_cpuset, placement_words

REAL = DATA / "numa" / "sysfs-this-host"  # captured from this host: one node, CPUs 0-1
TWO = DATA / "numa" / "synthetic-2node"  # hand-written: see tests/data/numa/SYNTHETIC.md


# -- the CPU list of a node ------------------------------------------------------------------

def test_node_cpulist_of_this_hosts_real_sysfs() -> None:
    assert node_cpulist(0, REAL) == "0-1"
    assert node_cpuset(0, None, REAL) == "0-1"
    assert node_cpuset(0, 1, REAL) == "0"  # the plan's vcpus: the node's first CPUs
    assert node_cpuset(0, 8, REAL) == "0-1"  # more than the node has: all of its CPUs
    with pytest.raises(ValueError, match="NUMA node 1 does not exist here"):
        node_cpulist(1, REAL)


def test_node_cpulist_of_a_synthetic_two_node_host() -> None:
    assert node_cpulist(0, TWO) == "0-3,8-11"
    assert node_cpulist(1, TWO) == "4-7,12-15"
    assert node_cpuset(1, 6, TWO) == "4-7,12-13"
    with pytest.raises(ValueError, match="NUMA node 2 has no CPUs"):
        node_cpulist(2, TWO)  # a memory-only node


def test_format_cpulist_round_trips_the_kernels_syntax() -> None:
    assert format_cpulist([5, 0, 1, 2]) == "0-2,5"
    assert format_cpulist([3]) == "3" and format_cpulist([]) == ""
    for text in ("0-3,8-11", "4-7,12-15", "0", "0-1", "1,3,5"):
        assert format_cpulist(numa.parse_cpulist(text)) == text


def test_placement_words() -> None:
    assert placement_words(None, "cpuset", "0-1") == "scheduler"
    assert placement_words(1, "cpuset", "4-7") == "CPUs 4-7 and memory on node 1 (cpuset)"
    assert placement_words(0, "numactl") == "CPUs and memory on node 0 (numactl)"


def test_every_kind_that_binds_says_so() -> None:
    kinds = protocols.environments()
    for kind in ("native", "runc", "crun", "gvisor", "docker", "podman", "qemu", "microvm",
                 "vm9p", "nspawn"):
        assert getattr(kinds[kind], "supports_numa", False), kind
    for kind in ("firecracker", "cloud-hypervisor"):  # not driven: nothing to bind
        assert not getattr(kinds[kind], "supports_numa", False), kind


# -- specs and command lines, node set and unset -------------------------------------------

def test_oci_spec_cpuset_of_a_node() -> None:
    def cpu(**kw: object) -> object:
        cfg = bundle_config(root=Path("/r"), args=["a"], hostname="h", cgroups_path="/c",
                            network=None, **kw)  # type: ignore[arg-type]
        return cfg["linux"]["resources"].get("cpu")

    assert cpu() is None  # unset: the scheduler's
    assert cpu(cpuset=("4-7,12-15", "1")) == {"cpus": "4-7,12-15", "mems": "1"}
    # The node's list replaces vcpus' 0-based one (node_cpuset already took the first vcpus).
    assert cpu(vcpus=2, cpuset=("4-5", "1")) == {"cpus": "4-5", "mems": "1"}
    assert cpu(vcpus=2) == {"cpus": "0-1", "mems": "0"}


def test_qemu_runs_under_numactl_only_when_bound() -> None:
    base = dict(accel="tcg", vcpus=2, memory_mib=1024, kernel=Path("k"), initrd=None,
                backing=Path("d"))
    free = qemu_argv(VmConfig(**base))  # type: ignore[arg-type]
    bound = qemu_argv(VmConfig(**base, numa_node=1))  # type: ignore[arg-type]
    assert free[0] == "qemu-system-x86_64" and "numactl" not in free
    assert bound[:4] == ["numactl", "--cpunodebind=1", "--membind=1", "qemu-system-x86_64"]
    assert bound[3:] == free


BIG = HostFacts(cpus=tuple(range(16)), threads_per_core=2, cores_per_socket=4, numa_nodes=2,
                vhost_net=True, node_cpus=((0, tuple(range(8))), (1, tuple(range(8, 16)))))


def test_pinning_stays_on_the_node_and_vnuma_is_off() -> None:
    k = resolve_knobs({"pin": True}, "tcg", "pc", 4, BIG, numa_node=1)
    assert k.pin == (8, 9, 10, 11) and "CPUs of NUMA node 1 only" in k.notes["pin"]
    assert resolve_knobs({"pin": True}, "tcg", "pc", 4, BIG).pin == (0, 1, 2, 3)
    assert resolve_knobs({"pin": True, "pin_cpus": "12,13"}, "tcg", "pc", 2, BIG,
                         numa_node=1).pin == (12, 13)
    with pytest.raises(KnobError, match="not usable on NUMA node 1"):
        resolve_knobs({"pin": True, "pin_cpus": "0,1"}, "tcg", "pc", 2, BIG, numa_node=1)
    tuned = resolve_knobs({"profile": "tuned"}, "tcg", "pc", 4, BIG, numa_node=0)
    assert not tuned.vnuma and tuned.numa == () and "binds the whole VM" in tuned.notes["vnuma"]
    assert tuned.pin == (0, 1, 2, 3)
    assert resolve_knobs({"profile": "tuned"}, "tcg", "pc", 4, BIG).vnuma  # unset: mirrored


def test_hugepages_of_a_bound_vm_come_from_its_node() -> None:
    assert node_nr_hugepages(1, Path("/s")) == Path(
        "/s/node1/hugepages/hugepages-2048kB/nr_hugepages")
