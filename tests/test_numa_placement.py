"""NUMA placement (the plan's numa_node) in every environment kind beside native: the CPU list
helpers on real and synthetic sysfs trees, each kind's spec or command line with the node set
and unset, then real containers and one VM, bound, checked from inside (or, for the VM, on
the QEMU process).

This host has one node (0, every CPU): bound to it, a container's CPU and memory lists are
the same as unbound. The container tests therefore also point isotax's node root at a
hand-written tree (tests/data/numa/synthetic-node0-cpu1) in which node 0 owns CPU 1 only, so
that a binding that did not happen shows. numactl (QEMU) reads the kernel's own node table;
its binding shows in the memory policy of QEMU's mappings (/proc/PID/numa_maps "bind:0").
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import why_not_root_and

from isotax import protocols
from isotax.environments.oci.runtime import bundle_config
from isotax.environments.vm.qemu import QemuInstance
from isotax.environments.vm.qemu_tuning import (
    HostFacts,
    KnobError,
    node_nr_hugepages,
    resolve_knobs,
)
from isotax.environments.vm.qemu_vm import VmConfig, qemu_argv
from isotax.host import numa
from isotax.host.numa import format_cpulist, node_cpulist, node_cpuset, placement_words
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec, Instance, Unavailable
from isotax.run.leaks import find_leaks

DATA = Path(__file__).parent / "data" / "numa"
REAL = DATA / "sysfs-this-host"  # captured from this host: one node, CPUs 0-1
TWO = DATA / "synthetic-2node"  # hand-written: see tests/data/numa/SYNTHETIC.md
CPU1 = DATA / "synthetic-node0-cpu1"  # hand-written: node 0 owns CPU 1 only


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


# -- real environments -----------------------------------------------------------------------

def status_lists(text: str) -> tuple[str, str]:
    """(Cpus_allowed_list, Mems_allowed_list) of a /proc/PID/status."""
    got = dict(re.findall(r"^(Cpus_allowed_list|Mems_allowed_list):\s*(\S+)", text, re.M))
    return got["Cpus_allowed_list"], got["Mems_allowed_list"]


@pytest.fixture
def node0_is_cpu1(monkeypatch: pytest.MonkeyPatch) -> None:
    """isotax reads node 0 as owning CPU 1 only (the hand-written tree)."""
    if 1 not in os.sched_getaffinity(0):
        pytest.skip("CPU 1 is not usable here: the synthetic node 0 (CPU 1) cannot be placed")
    monkeypatch.setattr(numa, "NODE_ROOT", CPU1)


def start(kind: str, image: ImageArtifacts, workdir: Path, numa_node: int | None,
          network: str = "host", **options: object) -> Instance:
    # gvisor: available() names the runsc it lacks (isotax's own build, not on PATH)
    tool = {"docker": "dockerd", "qemu": "qemu-system-x86_64", "vm9p": "qemu-system-x86_64",
            "nspawn": "systemd-nspawn", "gvisor": "numactl"}.get(kind, kind)
    if (why := why_not_root_and(tool, "numactl")) is not None:
        pytest.skip(why)
    env = protocols.environments()[kind]()
    avail = env.available()
    if not avail.ok:
        pytest.skip(f"{kind} unavailable here: {avail}")
    return env.start(EnvSpec(name="t-numa", kind=kind, image=image, workdir=workdir,
                             network=network, numa_node=numa_node, options=options))


@pytest.fixture
def stopped() -> Iterator[list[Instance]]:
    """Instances a test started, stopped however it ends; nothing of theirs left."""
    insts: list[Instance] = []
    yield insts
    for i in insts:
        i.stop()
    assert [x for x in find_leaks() if "t-numa" in x] == []


@pytest.mark.integration
def test_runc_on_this_hosts_node_0_and_unbound(image: ImageArtifacts, tmp_path: Path,
                                               stopped: list[Instance]) -> None:
    """The real node: the spec's cpuset is node 0's list; unset leaves the scheduler's."""
    bound = start("runc", image, tmp_path / "b", 0)
    stopped.append(bound)
    free = start("runc", image, tmp_path / "f", None)
    stopped.append(free)
    spec = (tmp_path / "b" / f"bundle-{bound.describe()['container']}" / "config.json")
    assert f'"cpus": "{node_cpulist(0)}"' in spec.read_text()
    assert status_lists(bound.exec(["cat", "/proc/self/status"], 30).check().stdout) == (
        node_cpulist(0), "0")
    assert bound.describe()["numa"] == f"CPUs {node_cpulist(0)} and memory on node 0 (cpuset)"
    assert free.describe()["numa"] == "scheduler"
    assert '"cpu"' not in (tmp_path / "f" / f"bundle-{free.describe()['container']}"
                           / "config.json").read_text()


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["runc", "crun", "gvisor", "docker", "podman", "nspawn"])
def test_container_bound_to_a_node_runs_on_its_cpus_only(
        kind: str, image: ImageArtifacts, tmp_path: Path, node0_is_cpu1: None,
        stopped: list[Instance]) -> None:
    inst = start(kind, image, tmp_path, 0)
    stopped.append(inst)
    if kind == "gvisor":
        # The sandbox's /proc is gVisor's own (no Cpus_allowed_list): the host processes that
        # run it (Sentry, Gofer, systrap stubs) are what the cpuset binds.
        pids = inst.host_pids()
        assert pids
        for pid in pids:
            assert status_lists(Path(f"/proc/{pid}/status").read_text()) == ("1", "0"), pid
    else:
        # A command isotax execs, and the container's PID 1 (for nspawn the image's systemd).
        for pid in ("self", "1"):
            text = inst.exec(["cat", f"/proc/{pid}/status"], 30).check().stdout
            assert status_lists(text) == ("1", "0"), (pid, text)
    assert inst.exec(["nproc"], 30).check().stdout.strip() == "1"
    assert inst.describe()["numa"] == "CPUs 1 and memory on node 0 (cpuset)"
    assert inst.describe()["cpus"] == "1 (cpuset)"


@pytest.mark.integration
def test_vm_bound_to_node_0_with_pinned_vcpus(image: ImageArtifacts, tmp_path: Path,
                                              stopped: list[Instance]) -> None:
    """One TCG boot: QEMU's threads on node 0's CPUs, its memory bound to node 0, each vCPU
    pinned to one CPU of the node."""
    vm = start("qemu", image, tmp_path, 0, network="none", accel="tcg", pin=True)
    stopped.append(vm)
    assert isinstance(vm, QemuInstance)
    d = vm.describe()
    pid = int(d["qemu_pid"])
    cpus = node_cpulist(0)
    assert (tmp_path / "qemu.cmdline").read_text().startswith(
        "numactl --cpunodebind=0 --membind=0 qemu-system-x86_64 ")
    assert status_lists(Path(f"/proc/{pid}/status").read_text())[0] == cpus
    # Every mapping QEMU has (guest RAM, TCG's code cache, its heap) allocates on node 0.
    maps = Path(f"/proc/{pid}/numa_maps").read_text().splitlines()
    assert maps and all(" bind:0 " in f" {ln} " for ln in maps), maps[:3]
    threads = [tuple(map(int, x.split(":"))) for x in d["vcpu_threads"].split(",")]
    node = numa.parse_cpulist(cpus)
    for _, tid in threads:
        got = os.sched_getaffinity(tid)
        assert len(got) == 1 and got <= set(node), (tid, got)
    assert d["numa"].startswith(f"CPUs {cpus} and memory on node 0 (numactl around QEMU")
    assert "CPUs of NUMA node 0 only" in vm.knobs.notes["pin"]


@pytest.mark.integration
def test_a_node_without_cpus_is_refused_in_one_line(image: ImageArtifacts, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numa, "NODE_ROOT", TWO)
    with pytest.raises(Unavailable, match="runc: NUMA node 2 has no CPUs"):
        start("runc", image, tmp_path, 2)
    assert [x for x in find_leaks() if "t-numa" in x] == []


@pytest.mark.integration
def test_virtiofsd_of_a_bound_vm_is_bound_too(image: ImageArtifacts, tmp_path: Path,
                                              stopped: list[Instance]) -> None:
    """The Kata-shaped VM's virtiofsd copies the guest's file data: it is bound with QEMU."""
    # machine pc: virtio-fs over microvm's virtio-mmio does not start under TCG
    vm = start("vm9p", image, tmp_path, 0, network="none", share="virtiofs", machine="pc")
    stopped.append(vm)
    assert isinstance(vm, QemuInstance)
    daemons = [d.proc.pid for d in vm._daemons if d.proc is not None]
    assert daemons
    for pid in daemons:
        maps = Path(f"/proc/{pid}/numa_maps").read_text().splitlines()
        assert maps and all(" bind:0 " in f" {ln} " for ln in maps), maps[:3]
    assert vm.describe()["numa"].endswith("; virtiofsd too")
