"""microvm, the container-in-a-VM (vm9p) and the tuned/untuned VM profiles for real: VMs
booted from the workload image running short workloads (TCG on this kind of host:
labelled emulated)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import image_where, ours, why_not_root_and

from isotax import protocols
from isotax.environments.vm.qemu import QemuInstance
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import PHASES, EnvSpec, Unavailable
from isotax.workloads.compress import Compress
from isotax.workloads.fio import Fio


def _why_not() -> str | None:
    return why_not_root_and("qemu-system-x86_64", "qemu-img", "mkfs.ext4",
                            root_for="tap devices, the bridge, mounts and the workload image")


image = image_where(_why_not)


COMPRESS = {"level": 2, "threads": 2, "corpus_mib": 2, "seed": 1}
FIO = {"pattern": "randread", "bs": "4k", "iodepth": 16, "numjobs": 1, "size_mib": 4,
       "runtime_s": 1, "ramp_s": 0, "rwmixread": 70, "ioengine": "libaio", "direct": 1}


@contextlib.contextmanager
def booted(image: ImageArtifacts, kind: str, network: str = "none", vcpus: int = 2,
           memory_mib: int = 1024, **options: object) -> Iterator[QemuInstance]:
    """A real VM of `kind`, stopped afterwards (the workdir is on the host's disk, like the
    runner's)."""
    workdir = Path(tempfile.mkdtemp(prefix="itx-test-vm-", dir="/var/tmp"))
    spec = EnvSpec(name=f"test-{kind}", kind=kind, image=image, workdir=workdir,
                   network=network, vcpus=vcpus, memory_mib=memory_mib, options=options)
    try:
        inst = protocols.environments()[kind]().start(spec)
    except BaseException:
        # A VM that did not boot: its console's tail is in the error; nothing stays behind.
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    assert isinstance(inst, QemuInstance)
    try:
        yield inst
    finally:
        inst.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run_workloads(inst: QemuInstance, compress: bool = True) -> dict[str, float]:
    """fio (tiny) on the storage path and compress (tiny), through the workload classes, as
    the runner drives them. The shared-root VMs skip compress: it runs from the scratch tmpfs,
    the same in every VM, and each exec over a 9p root is slow."""
    out: dict[str, float] = {}
    if compress:
        c = Compress()
        c.prepare(inst, COMPRESS, None)
        cs = {s.metric: s.value for s in c.run(inst, COMPRESS, None)}
        assert cs["throughput"] > 0
        out["compress_mb_s"] = cs["throughput"]
    f = Fio()
    f.prepare(inst, FIO, None)
    fs = {s.metric: s for s in f.run(inst, FIO, None)}
    assert fs["read_iops"].value > 0
    out.update(fio_iops=fs["read_iops"].value,
               fio_direct=float(fs["read_iops"].labels["direct"]))
    return out


def assert_milestones(inst: QemuInstance) -> None:
    m = inst.milestones
    assert all(p in m for p in PHASES)
    assert 0 < m["create"] < m["started"] < m["kernel"] < m["first_instruction"] < m["ready"]
    assert m["ready"] <= m["storage"]


@pytest.mark.integration
def test_microvm_boots_without_pci_and_runs_workloads(image: ImageArtifacts) -> None:
    with booted(image, "microvm", network="bridge") as vm:
        assert_milestones(vm)
        d = vm.facts().display()
        assert d["kind"] == "microvm" and d["machine"].startswith("microvm")
        if d["accelerator"] == "tcg":
            assert d["emulated"] == "yes"
            assert d["knob_iothread"] == "off"
        cmdline = (vm.spec.workdir / "qemu.cmdline").read_text()
        assert "-machine microvm" in cmdline and "-pci" not in cmdline
        assert "tsc_early_khz=" in cmdline and "itx.mods=virtio_mmio," in cmdline
        # No PCI bus at all; the virtio devices sit on virtio-mmio.
        pci = vm.exec(["sh", "-c", "ls /sys/bus/pci/devices 2>/dev/null | wc -l"], 30).check()
        assert pci.stdout.strip() == "0"
        # Every virtio device (2 disks, console port, NIC) hangs off a virtio-mmio transport.
        parents = vm.exec(["sh", "-c", "for d in /sys/bus/virtio/devices/*; do readlink -f "
                           "$d/..; done"], 30).check().stdout.split()
        assert len(parents) >= 4 and all("virtio-mmio" in p or "LNRO0005" in p
                                         for p in parents), parents
        assert vm.exec(["stat", "-f", "-c", "%T", "/mnt"], 30).check().stdout.strip() \
            == "ext2/ext3"
        r = run_workloads(vm)
        assert r["fio_direct"] == 1.0  # O_DIRECT on the virtio-blk ext4 volume
        vm.pause()
        assert vm._vm is not None and vm._vm.qmp_cmd("query-status")["status"] == "paused"
        vm.resume()
        assert vm.exec(["true"], 30).returncode == 0
        pids = vm.host_pids()
        vm.stop()
        vm.stop()
        assert pids and not any(Path(f"/proc/{p}").exists() for p in pids)
        assert ours(vm._tag) == []


@pytest.mark.integration
def test_vm9p_runs_the_container_rootfs_over_9p(image: ImageArtifacts) -> None:
    with booted(image, "vm9p") as vm:
        assert_milestones(vm)
        d = vm.facts().display()
        assert d["kind"] == "vm9p" and "over 9p, read-only" in d["disk"]
        assert "shared over 9p" in d["storage"] and "msize=8192,cache=mmap" in d["storage"]
        mounts = vm.exec(["cat", "/proc/mounts"], 30).check().stdout.splitlines()
        root = [ln.split() for ln in mounts if ln.split()[1] == "/"]
        assert root[-1][0] == "itxroot" and root[-1][2] == "9p"
        vol = [ln.split() for ln in mounts if ln.split()[1] == "/mnt"]
        assert vol and vol[-1][:3] == ["itxvol", "/mnt", "9p"]
        # The image is shared read-only: the guest cannot change it.
        assert vm.exec(["sh", "-c", "echo x > /itx-written"], 30).returncode != 0
        assert not (image.rootfs / "itx-written").exists()
        # What the guest writes on the volume lands in the host directory.
        vm.exec(["sh", "-c", "echo hello > /mnt/itx-hello"], 30).check()
        assert vm._volume_dir is not None
        assert (vm._volume_dir / "itx-hello").read_text() == "hello\n"
        run_workloads(vm, compress=False)
        pids = vm.host_pids()
        volume = vm._volume_dir
        vm.stop()
        assert pids and not any(Path(f"/proc/{p}").exists() for p in pids)
        assert not volume.exists() and ours(vm._tag) == []


@pytest.mark.integration
def test_vm9p_over_virtiofs(image: ImageArtifacts) -> None:
    from isotax.environments.vm.qemu_share import find_virtiofsd

    if find_virtiofsd() is None:
        pytest.skip("no virtiofsd (QEMU 7.2's qemu-system-common ships one; or cargo install "
                    "virtiofsd)")
    with booted(image, "vm9p", share="virtiofs", machine="pc") as vm:
        d = vm.facts().display()
        assert "over virtiofs" in d["disk"] and "shared over virtiofs" in d["storage"]
        pids = vm.host_pids()
        assert len(pids) == 3  # QEMU, the root's virtiofsd, the volume's
        mounts = vm.exec(["cat", "/proc/mounts"], 30).check().stdout.splitlines()
        root = [ln.split() for ln in mounts if ln.split()[1] == "/"]
        assert root[-1][:3] == ["itxroot", "/", "virtiofs"]
        assert vm.exec(["sh", "-c", "echo x > /itx-written"], 30).returncode != 0
        run_workloads(vm, compress=False)
        vm.stop()
        assert not any(Path(f"/proc/{p}").exists() for p in pids)
        assert ours(vm._tag) == []


@pytest.mark.integration
def test_tuned_vm_is_pinned_on_hugepages_with_the_hosts_topology(image: ImageArtifacts
                                                                  ) -> None:
    from isotax.environments.vm import qemu_tuning

    before = int(qemu_tuning.NR_HUGEPAGES.read_text())
    try:
        cm = booted(image, "qemu", memory_mib=512, profile="tuned")
        vm = cm.__enter__()
    except Unavailable as e:
        if "hugepages" in str(e):
            pytest.skip(f"this host cannot reserve the VM's hugepages: {e}")
        raise
    try:
        d = vm.facts().display()
        assert int(qemu_tuning.NR_HUGEPAGES.read_text()) == before + 256
        assert d["knob_hugepages"].startswith("on") and d["knob_pin"].startswith("on: vcpu0:")
        host = qemu_tuning.host_facts()
        for (index, tid), cpu in zip(qemu_tuning.vcpu_threads(
                vm._vm.qmp_cmd("query-cpus-fast")), vm.knobs.pin, strict=True):
            assert os.sched_getaffinity(tid) == {cpu}, index
        cmdline = (vm.spec.workdir / "qemu.cmdline").read_text()
        assert "mem-path=/run/isotax/itx-hp-" in cmdline and "iothread=io0" in cmdline
        lscpu = vm.exec(["sh", "-c", "cat /sys/devices/system/cpu/cpu0/topology/"
                         "core_siblings_list; grep -c ^processor /proc/cpuinfo"],
                        30).check().stdout.split()
        assert lscpu == ["0-1", "2"]  # one socket of two cores, as the host
        # What isotax controls: QEMU passes the host's CPUID cache leaves through
        # (host-cache-info=on), so the guest's L3 is one the host's CPU reports. The host's own
        # sysfs may read another leaf than the guest kernel does (on one such host the guest
        # showed 262144K, sysfs 32768K), so the CPUID leaves are the reference.
        assert "host-cache-info=on" in cmdline
        host_l3 = _host_cpuid_l3_sizes(vm.spec.workdir)
        if not host_l3:
            pytest.skip("this host's CPUID reports no L3 cache, so there is none to pass "
                        "through to the guest")
        l3 = vm.exec(["cat", "/sys/devices/system/cpu/cpu0/cache/index3/size"], 30)
        assert l3.stdout.strip() in host_l3, "host-cache-info=on shows an L3 of the host's CPUID"
        assert host.cpus
        run_workloads(vm)
    finally:
        cm.__exit__(None, None, None)
    assert int(qemu_tuning.NR_HUGEPAGES.read_text()) == before
    assert ours(vm._tag) == []


# Every L3 size the host's CPU reports through CPUID, in sysfs's words ("32768K"): the
# deterministic cache leaves (Intel's 4, AMD's 0x8000001D) and AMD's legacy 0x80000006. QEMU's
# host-cache-info=on copies the host's cache leaves into the guest, and which of them a guest
# kernel reads depends on its vendor and features, so the guest's L3 must be one of these.
_CPUID_L3_C = r"""
#include <cpuid.h>
#include <stdio.h>
static void deterministic(unsigned leaf) {
  if (__get_cpuid_max(leaf & 0x80000000u, 0) < leaf) return;
  for (unsigned i = 0; i < 16; i++) {
    unsigned a, b, c, d;
    __cpuid_count(leaf, i, a, b, c, d);
    if ((a & 31) == 0) break;                /* no more caches */
    if (((a >> 5) & 7) != 3) continue;       /* not level 3 */
    unsigned long size = (unsigned long)((b >> 22) + 1) * (((b >> 12) & 0x3ff) + 1)
                         * ((b & 0xfff) + 1) * (c + 1);   /* ways x partitions x line x sets */
    printf("%luK\n", size / 1024);
  }
}
int main(void) {
  unsigned a, b, c, d;
  deterministic(4);
  deterministic(0x8000001du);
  if (__get_cpuid_max(0x80000000u, 0) >= 0x80000006u) {
    __cpuid(0x80000006u, a, b, c, d);
    if (d >> 18) printf("%uK\n", (d >> 18) * 512);   /* L3 in 512 KiB units */
  }
  return 0;
}
"""


def _host_cpuid_l3_sizes(workdir: Path) -> set[str]:
    """The L3 sizes the host's CPUID reports (gcc: scripts/setup.sh installs it)."""
    src, exe = workdir / "itx-cpuid-l3.c", workdir / "itx-cpuid-l3"
    src.write_text(_CPUID_L3_C)
    subprocess.run(["gcc", "-O", "-o", str(exe), str(src)], check=True, capture_output=True)
    return set(subprocess.run([str(exe)], capture_output=True, text=True,
                              check=True).stdout.split())


@pytest.mark.integration
def test_untuned_vm_hides_the_host(image: ImageArtifacts) -> None:
    with booted(image, "qemu", vcpus=2, memory_mib=512, profile="untuned") as vm:
        d = vm.facts().display()
        assert d["profile"] == "untuned" and d["knob_cpu_model"] == "qemu64"
        info = vm.exec(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo; cat /sys/devices/"
                        "system/cpu/cpu0/topology/core_siblings_list"], 30).check().stdout
        assert "QEMU Virtual CPU" in info
        assert info.split()[-1] == "0"  # one socket per vCPU: cpu0 is alone in its socket
        assert "avx2" not in vm.exec(["cat", "/proc/cpuinfo"], 30).check().stdout
