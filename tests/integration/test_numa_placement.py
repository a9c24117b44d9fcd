"""NUMA placement (the plan's numa_node) for real, in every environment kind beside native:
containers and one VM, bound, checked from inside (or, for the VM, on the QEMU process).

This host has one node (0, every CPU): bound to it, a container's CPU and memory lists are
the same as unbound. The container tests therefore also point isotax's node root at a
hand-written tree (tests/data/numa/synthetic-node0-cpu1) in which node 0 owns CPU 1 only, so
that a binding that did not happen shows. numactl (QEMU) reads the kernel's own node table;
its binding shows in the memory policy of QEMU's mappings (/proc/PID/numa_maps "bind:0")."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import DATA, ours, why_not_root_and

from isotax import protocols
from isotax.environments.vm.qemu import QemuInstance
from isotax.host.facts import numa
from isotax.host.facts.numa import node_cpulist
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec, Instance, Unavailable

TWO = DATA / "numa" / "synthetic-2node"  # hand-written: see tests/data/numa/SYNTHETIC.md
CPU1 = DATA / "numa" / "synthetic-node0-cpu1"  # hand-written: node 0 owns CPU 1 only


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
    assert ours("t-numa") == []


@pytest.mark.integration
def test_runc_on_this_hosts_node_0_and_unbound(image: ImageArtifacts, tmp_path: Path,
                                               stopped: list[Instance]) -> None:
    """The real node: the spec's cpuset is node 0's list; unset leaves the scheduler's."""
    bound = start("runc", image, tmp_path / "b", 0)
    stopped.append(bound)
    free = start("runc", image, tmp_path / "f", None)
    stopped.append(free)
    spec = (tmp_path / "b" / f"bundle-{bound.facts().display()['container']}" / "config.json")
    assert f'"cpus": "{node_cpulist(0)}"' in spec.read_text()
    assert status_lists(bound.exec(["cat", "/proc/self/status"], 30).check().stdout) == (
        node_cpulist(0), "0")
    assert bound.facts().display()["numa"] == \
        f"CPUs {node_cpulist(0)} and memory on node 0 (cpuset)"
    assert free.facts().display()["numa"] == "scheduler"
    assert '"cpu"' not in (tmp_path / "f" / f"bundle-{free.facts().display()['container']}"
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
    assert inst.facts().display()["numa"] == "CPUs 1 and memory on node 0 (cpuset)"
    assert inst.facts().display()["cpus"] == "1 (cpuset)"


@pytest.mark.integration
def test_vm_bound_to_node_0_with_pinned_vcpus(image: ImageArtifacts, tmp_path: Path,
                                              stopped: list[Instance]) -> None:
    """One TCG boot: QEMU's threads on node 0's CPUs, its memory bound to node 0, each vCPU
    pinned to one CPU of the node."""
    vm = start("qemu", image, tmp_path, 0, network="none", accel="tcg", pin=True)
    stopped.append(vm)
    assert isinstance(vm, QemuInstance)
    d = vm.facts().display()
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
    assert ours("t-numa") == []


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
    assert vm.facts().display()["numa"].endswith("; virtiofsd too")
