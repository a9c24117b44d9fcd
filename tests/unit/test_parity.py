"""Parity: the probe's real output in each environment and the differences it finds."""

from __future__ import annotations

import json

import pytest
from support import DATA

from isotax.facts import Facts, Reach, stored_facts
from isotax.host.facts.description import EnvironmentDescription, parity_problems
from isotax.host.facts.parity import (
    Resources,
    parse_ethtool_features,
    parse_probe,
    problems,
)


def all_problems(described: dict[str, EnvironmentDescription], baseline: str) -> list[str]:
    return [p for _, p in parity_problems(described, baseline)]


def as_stored(d: EnvironmentDescription) -> EnvironmentDescription:
    """d as a report reads it back from the store."""
    return EnvironmentDescription.from_stored(json.loads(json.dumps(d.to_stored())))


def _probe(name: str, hugepages: str = "none") -> Resources:
    return parse_probe((DATA / "parity" / f"probe-{name}.txt").read_text(), hugepages)


def test_ethtool_features_top_level_only() -> None:
    f = parse_ethtool_features((DATA / "parity" / "ethtool-k-eth0-virtio.txt").read_text())
    assert f["rx-checksumming"] == "on" and f["large-receive-offload"] == "off"
    assert "tx-checksum-ipv4" not in f  # an indented sub-feature
    veth = parse_ethtool_features((DATA / "parity" / "ethtool-k-veth.txt").read_text())
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
    assert "runc-limited has 512 MiB of memory, native has 24105 MiB of memory" in said
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
    described = {"native": EnvironmentDescription(NATIVE, resources=native),
                 "runc": EnvironmentDescription(LIMITED, resources=limited),
                 "crun": EnvironmentDescription(
                     stored_facts({"kind": "crun"}),
                     resources_error="the parity probe failed (127): sh: not found")}
    found = all_problems(described, "native")
    assert len(found) == 3 and any("could not be probed" in p for p in found)
    # The same problems from what the store keeps, and the same typed description back.
    back = {name: as_stored(d) for name, d in described.items()}
    assert all_problems(back, "native") == found
    assert back == described


# Facts as a run stored before they were typed words them (read by isotax.facts.stored_facts)
NATIVE = stored_facts({"kind": "native"})
QEMU = stored_facts({"kind": "qemu", "memory_mib": "2048"})
LIMITED_WORDS = {"kind": "runc", "memory": "2048 MiB (limit)"}
LIMITED = stored_facts(LIMITED_WORDS)


def _memory(mib: int, template: str = "qemu-matched-guest") -> Resources:
    """A probe's resources with only the memory changed (cgroup limit or guest MemTotal)."""
    r = _probe(template)
    return Resources(r.cpus, mib, r.thp, r.mtu, r.offloads, r.hugepages)


def test_vm_against_the_whole_host_is_told_what_would_work() -> None:
    vm, native = _probe("qemu-matched-guest"), _probe("native")
    (said,) = [p for p in problems("qemu", vm, "native", native, QEMU, NATIVE) if "MiB" in p]
    assert said.startswith(f"qemu was given memory_mib = 2048 (its guest sees {vm.memory_mib} "
                           "MiB), native has all of the host's 24105 MiB: a VM cannot be given "
                           "all of its host's memory (with parity = \"flag\" the run goes on "
                           "and its report lists this); or make the baseline")
    assert "run with parity" not in said  # true as well where the plan says "flag" already
    assert "memory_mib = 2048, named in baseline" in said
    assert "set memory_mib" not in said  # it is set; no value it can take would make them equal


def test_vm_memory_mib_equal_to_a_containers_limit_is_no_difference() -> None:
    # A 1 GiB guest's kernel keeps more than the tolerance: its MemTotal alone would differ.
    vm, small = _memory(950), Facts("qemu", Reach.TAP, guest_memory_mib=1024)
    limit = Facts("runc", Reach.BRIDGE, memory_limit_mib=1024)
    assert [p for p in problems("qemu", vm, "runc", _memory(1024)) if "MiB" in p]
    assert problems("qemu", vm, "runc", _memory(1024), small, limit) == []
    # The other way round too, and through the descriptions the runner stores.
    described = {"runc": as_stored(EnvironmentDescription(limit, resources=_memory(1024))),
                 "qemu": as_stored(EnvironmentDescription(small, resources=vm))}
    assert all_problems(described, "runc") == all_problems(described, "qemu") == []


def test_two_limited_environments_are_told_the_concrete_value() -> None:
    small = stored_facts({"kind": "qemu", "memory_mib": "1024"})
    (said,) = problems("qemu", _memory(980), "runc", _memory(2048), small, LIMITED)
    assert said.startswith("qemu was given memory_mib = 1024 (its guest sees 980 MiB), runc is "
                           "limited to 2048 MiB (memory_mib = 2048): set memory_mib = 2048 for "
                           "qemu")
    (said,) = problems("crun", _memory(512), "qemu", _memory(1966), stored_facts(
        LIMITED_WORDS | {"memory": "512 MiB (limit)"}), QEMU)
    assert ": set memory_mib = 2048 for crun" in said  # the VM's memory_mib, not its MemTotal


def test_a_limited_container_against_native_drops_its_limit() -> None:
    # As a run stored them before facts were typed: display words and the probe's lines.
    stored = {"native": {"kind": "native", **_probe("native").as_describe()},
              "runc": {"kind": "runc", "memory": "512 MiB (limit)",
                       **_probe("runc-limited").as_describe()},
              "crun": {"kind": "crun", "memory": "no limit",
                       **_probe("runc-bridge").as_describe()}}
    described = {name: EnvironmentDescription.from_stored(d) for name, d in stored.items()}
    found = parity_problems(described, "native")
    mem = [(env, p) for env, p in found if "MiB" in p]
    assert mem == [("runc", "runc is limited to 512 MiB (memory_mib = 512), native has all of "
                    "the host's 24105 MiB: remove memory_mib from runc (a container without a "
                    "limit has all of the host's memory)")]
    assert [p for _, p in found] == all_problems(described, "native")


def test_native_against_a_limited_baseline_is_not_told_to_limit_native() -> None:
    runc = _memory(2048, "runc-limited")  # 1 CPU
    (cpus, mem) = problems("native", _probe("native"), "runc", runc, NATIVE, LIMITED)
    assert "set vcpus = 2 for runc" in cpus and "set vcpus = 1 for native" not in cpus
    assert "native runs as host processes and cannot be limited; remove memory_mib from runc" \
        in mem and "for native" not in mem


def test_probe_refuses_other_text() -> None:
    with pytest.raises(ValueError, match="not the parity probe"):
        parse_probe((DATA / "parity" / "ethtool-k-lo.txt").read_text())


def test_the_probe_reads_its_cgroups_limits_on_v1() -> None:
    """A shell in a v1 memory group of 512 MiB and a cpu group of 50 ms per 100 ms, below
    this host's unlimited groups (probe captured here, 2026-11-28)."""
    r = _probe("native-v1-cgroup-limited")
    assert (r.cgroup, r.memory_mib, r.cpu_quota) == ("v1", 512, 0.5)
    free = _probe("native-v1-walk")
    assert (free.cgroup, free.cpu_quota) == ("v1", None) and free.memory_mib > 20000
    said = problems("limited", r, "native", free)
    assert any("limited's cgroup allows 0.5 CPUs of time (cpu.max), native has no CPU quota"
               in p for p in said), said
    assert Resources.from_describe(r.as_describe()) == r


def test_cgroup_limits_takes_the_lowest_of_every_level() -> None:
    from isotax.host.facts.parity import cgroup_limits
    v2 = ["memory.max=max", "cpu.max=max 100000", "memory.max=1073741824",
          "cpu.max=150000 100000", "memory.max=2147483648", "cpu.max=300000 100000"]
    assert cgroup_limits(v2) == (1073741824, 1.5)
    assert cgroup_limits(["memory.max=max", "cpu.max=max 100000"]) == (None, None)
    assert cgroup_limits(["memory.limit_in_bytes=9223372036854771712",
                          "cpu.cfs_quota_us=-1", "cpu.cfs_period_us=100000"]) == (None, None)


def test_the_probe_reads_its_cgroups_limits_on_v2() -> None:
    """The probe on a systemd host on cgroup v2 (the guest room's Debian 13 guest,
    2026-11-28): natively, and in a transient scope with MemoryMax=512M and CPUQuota=50%."""
    native, scoped = _probe("native-v2-trixie"), _probe("scope-limited-v2-trixie")
    assert (native.cgroup, native.cpu_quota) == ("v2", None) and native.memory_mib > 9000
    assert (scoped.cgroup, scoped.memory_mib, scoped.cpu_quota) == ("v2", 512, 0.5)


def test_a_small_dev_shm_on_one_side_is_a_difference_and_half_or_all_of_memory_is_not() -> None:
    runc, pod = _probe("runc-host-shm"), _probe("pod-host-shm")
    small = _probe("pod-host-shm64")  # containerd's default 64 MB, before pods got half
    native = _probe("native")  # an older probe: no /dev/shm line, so nothing to compare
    assert (runc.shm_mib, pod.shm_mib, small.shm_mib, native.shm_mib) == (12052, 12052, 64,
                                                                          None)
    assert problems("pod", pod, "runc", runc) == []
    said = problems("pod", small, "runc", runc)
    assert len(said) == 1 and said[0].startswith("/dev/shm is 64 MiB in pod (of 24105 MiB), "
                                                 "12052 MiB in runc")
    assert problems("native", native, "pod", small) == []
    # The host's tmpfs may be all of memory (this host's is): no difference from half.
    whole = Resources(2, 24105, "madvise", 1400, shm_mib=24105)
    assert problems("runc", runc, "native", whole) == []
    assert Resources.from_describe(pod.as_describe()) == pod
