"""qemu environment for real: the data disk and initramfs read back with the real tools, then
a real VM booted from the workload image (root, QEMU; TCG on this kind of host)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import image_where, why_not_root_and

from isotax import protocols
from isotax.environments.base import GUEST_PATH
from isotax.environments.vm.qemu import QemuInstance
from isotax.environments.vm.qemu_initrd import _Cpio
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec

REGISTRY = protocols.environments()


def test_data_disk_is_a_sparse_ext4_and_the_mount_script_is_sh(tmp_path: Path) -> None:
    from isotax.environments.vm.qemu_vm import make_data_disk, mount_data_disk_script

    if shutil.which("mkfs.ext4") is None or shutil.which("dumpe2fs") is None:
        pytest.skip("e2fsprogs is not installed (apt-get install e2fsprogs)")
    disk = tmp_path / "data.raw"
    make_data_disk(disk, 0.25)
    assert disk.stat().st_size == 256 << 20
    assert disk.stat().st_blocks * 512 < 64 << 20  # sparse: metadata only
    head = subprocess.run(["dumpe2fs", "-h", str(disk)], capture_output=True, text=True,
                          check=True).stdout
    assert "Filesystem volume name:   itxdata" in head and "extent" in head
    script = mount_data_disk_script("/mnt")
    assert subprocess.run(["sh", "-n", "-c", script], check=False).returncode == 0




@pytest.mark.skipif(shutil.which("busybox") is None, reason="no busybox to read a cpio back")
def test_cpio_writer_is_read_back_by_busybox(tmp_path: Path) -> None:
    c = _Cpio()
    c.dir("bin")
    c.file("bin/x", b"hello\n")
    c.symlink("bin/y", "x")
    c.file("odd-name.txt", b"abc", 0o644)
    archive = c.bytes()
    assert len(archive) % 512 == 0
    subprocess.run(["busybox", "cpio", "-id"], input=archive, cwd=tmp_path, check=True,
                   capture_output=True)
    assert (tmp_path / "bin/x").read_bytes() == b"hello\n"
    assert os.readlink(tmp_path / "bin/y") == "x"
    assert (tmp_path / "odd-name.txt").read_text() == "abc"
    assert os.stat(tmp_path / "bin/x").st_mode & 0o777 == 0o755


def _why_not() -> str | None:
    return why_not_root_and("qemu-system-x86_64", "qemu-img",
                            root_for="tap devices, the bridge and the workload image")


image = image_where(_why_not)


VCPUS, MEM = 2, 1024


@pytest.fixture(scope="module")
def vm(image: ImageArtifacts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[QemuInstance]:
    workdir = tmp_path_factory.mktemp("qemu")
    spec = EnvSpec(name="test-qemu", kind="qemu", image=image, workdir=workdir, vcpus=VCPUS,
                   memory_mib=MEM, network="bridge")
    inst = REGISTRY["qemu"]().start(spec)
    assert isinstance(inst, QemuInstance)
    try:
        yield inst
    finally:
        inst.stop()


@pytest.mark.integration
def test_vm_boots_with_milestones_and_describes_itself(vm: QemuInstance) -> None:
    m = vm.milestones
    assert 0 < m["create"] < m["started"] < m["ready"]
    assert m["create"] < m["started"] < m["kernel"] < m["first_instruction"] < m["ready"]
    d = vm.facts().display()
    assert d["accelerator"] in ("kvm", "tcg")
    assert d["emulated"] == ("yes" if d["accelerator"] == "tcg" else "no")
    cmdline = (vm.spec.workdir / "qemu.cmdline").read_text().strip()
    assert d["command_line"] == cmdline and f"-smp {VCPUS}" in cmdline
    assert d["vcpus"] == str(VCPUS) and d["memory_mib"] == str(MEM)
    assert len(d["vcpu_threads"].split(",")) == VCPUS
    assert d["kernel_file"] == "vmlinux" and d["initrd"].startswith("minimal")
    log = (vm.spec.workdir / "console.log").read_text(errors="replace")
    assert "Linux version" in log and "ITX-READY" in log


@pytest.mark.integration
def test_vm_cpus_memory_and_tools(vm: QemuInstance) -> None:
    cpuinfo = vm.exec(["cat", "/proc/cpuinfo"], 30).check().stdout
    assert cpuinfo.count("processor\t:") == VCPUS
    assert vm.exec(["nproc"], 30).check().stdout.strip() == str(VCPUS)
    meminfo = vm.exec(["cat", "/proc/meminfo"], 30).check().stdout
    total_kib = int(meminfo.split("MemTotal:")[1].split()[0])
    assert 0.8 * MEM * 1024 < total_kib <= MEM * 1024
    xz = vm.exec(["xz", "--version"], 30).check()
    assert "XZ Utils" in xz.stdout
    assert vm.exec(["sh", "-c", "echo $PATH"], 30).check().stdout.strip() == GUEST_PATH
    assert vm.exec(["hostname"], 30).check().stdout.strip().startswith("itx-")


@pytest.mark.integration
def test_vm_scratch_is_tmpfs_and_writable(vm: QemuInstance) -> None:
    assert vm.exec(["stat", "-f", "-c", "%T", vm.scratch], 30).check().stdout.strip() == "tmpfs"
    f = f"{vm.scratch}/itx-test"
    vm.exec(["dd", "if=/dev/zero", f"of={f}", "bs=1M", "count=16"], 60).check()
    assert vm.exec(["stat", "-c", "%s", f], 30).check().stdout.strip() == str(16 << 20)
    vm.exec(["rm", f], 30).check()


@pytest.mark.integration
def test_vm_data_dir_is_the_ext4_data_disk(vm: QemuInstance) -> None:
    """storage "volume" (the default): /mnt is the second virtio-blk disk, ext4, writable."""
    assert vm.data_dir == "/mnt" and vm.milestones["storage"] >= vm.milestones["ready"]
    d = vm.facts().display()["storage"]
    assert d.startswith("virtio-blk raw disk") and f"cache={vm.cfg.disk_cache}" in d
    mounts = vm.exec(["cat", "/proc/mounts"], 30).check().stdout
    assert any(ln.split()[:3] == ["/dev/vdb", "/mnt", "ext4"] for ln in mounts.splitlines())
    vm.exec(["sh", "-c", "echo x > /mnt/itx-test && sync && rm /mnt/itx-test"], 30).check()


@pytest.mark.integration
def test_vm_rootfs_storage_is_on_the_root_disk(image: ImageArtifacts, tmp_path: Path) -> None:
    spec = EnvSpec(name="t", kind="qemu", image=image, workdir=tmp_path, network="none",
                   vcpus=1, memory_mib=512, storage="rootfs")
    inst = QemuInstance(spec)
    inst.boot()
    try:
        assert inst.data_dir == "/var/lib/itx-data" and not (tmp_path / "data.raw").exists()
        assert inst.facts().display()["storage"].startswith("root disk: virtio-blk qcow2 overlay")
        df = inst.exec(["df", "-P", inst.data_dir], 30).check().stdout.splitlines()[-1]
        assert df.split()[0] == "/dev/vda" and df.split()[-1] == "/"
        assert "-drive file=data.raw" not in (tmp_path / "qemu.cmdline").read_text()
    finally:
        inst.stop()
    assert not (tmp_path / "disk.qcow2").exists()


@pytest.mark.integration
def test_vm_exec_statuses(vm: QemuInstance) -> None:
    t0 = time.monotonic()
    r = vm.exec(["sleep", "30"], 1)
    assert r.returncode == 124 and time.monotonic() - t0 < 15
    assert vm.exec(["itx-no-such-tool"], 30).returncode == 127
    assert vm.exec(["sh", "-c", "exit 7"], 30).returncode == 7
    big = vm.exec(["sh", "-c", f"yes abcdefgh | head -c {4 << 20}"], 120).check()
    assert len(big.stdout) == 4 << 20 and big.stdout.startswith("abcdefgh\nabc")


@pytest.mark.integration
def test_vm_pause_resume(vm: QemuInstance) -> None:
    assert vm._vm is not None
    vm.pause()
    assert vm._vm.qmp_cmd("query-status")["status"] == "paused"
    vm.resume()
    assert vm._vm.qmp_cmd("query-status")["status"] == "running"
    assert vm.exec(["true"], 30).returncode == 0


@pytest.mark.integration
def test_vm_reaches_the_bridge(vm: QemuInstance) -> None:
    """The guest connects to a listener on the bridge's own address (no traffic elsewhere)."""
    assert vm._bridge is not None and vm.address
    gw = vm._bridge.gateway
    with socket.socket() as srv:
        srv.bind((gw, 0))
        srv.listen(1)
        srv.settimeout(60)
        port = srv.getsockname()[1]
        got: list[bytes] = []

        def accept() -> None:
            c, _ = srv.accept()
            with c:
                got.append(c.recv(100))

        t = threading.Thread(target=accept)
        t.start()
        code = (f"import socket; s=socket.create_connection(('{gw}',{port}),30); "
                f"s.sendall(b'from ' + socket.gethostname().encode())")
        vm.exec(["python3", "-c", code], 60).check()
        t.join(60)
    assert got and got[0].startswith(b"from itx-")


@pytest.mark.integration
def test_stop_twice_leaves_nothing(image: ImageArtifacts, tmp_path: Path) -> None:
    from isotax.run.leaks import find_leaks

    before = set(find_leaks())
    spec = EnvSpec(name="test-qemu-none", kind="qemu", image=image, workdir=tmp_path,
                   vcpus=1, memory_mib=512, network="none")
    inst = QemuInstance(spec)
    inst.boot()
    assert inst._vm is not None and inst._vm.proc is not None
    pid = inst._vm.proc.pid
    assert inst.exec(["true"], 30).returncode == 0
    inst.stop()
    inst.stop()
    assert not Path(f"/proc/{pid}").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["console.log", "qemu.cmdline",
                                                          "qemu.log"]
    r = inst.exec(["true"], 5)
    assert r.returncode == 255 and "not running" in r.stderr
    # Only qemu instances name links itx-tq*/itx-brq*; the bridged VM of the module fixture
    # may still be up, so compare with what was there before this instance.
    assert [x for x in set(find_leaks()) - before if "itx-tq" in x or "itx-brq" in x] == []


@pytest.mark.integration
def test_bridge_vm_leaves_no_tap(vm: QemuInstance) -> None:
    """Runs last in this module's VM tests: stop the shared VM and look for its links."""
    assert vm._lease is not None and vm._bridge is not None
    from isotax.run.leaks import find_leaks

    tap, br = vm._lease.iface, vm._bridge.name
    assert vm._vm is not None and vm._vm.proc is not None
    pid = vm._vm.proc.pid
    vm.stop()
    vm.stop()
    assert not Path(f"/proc/{pid}").exists()
    links = os.listdir("/sys/class/net")
    assert tap not in links and br not in links
    # The bridge's NAT and FORWARD rules went with it (they name the bridge).
    assert [x for x in find_leaks() if br in x or tap in x] == []


@pytest.mark.integration
def test_forcing_kvm_where_it_does_not_boot_is_unavailable(image: ImageArtifacts,
                                                           tmp_path: Path) -> None:
    from isotax.environments.vm.qemu_accel import probe_accelerator
    from isotax.protocols import Unavailable

    probe = probe_accelerator(image)
    assert probe.accel in ("kvm", "tcg") and probe.reason
    if probe.accel == "kvm":
        pytest.skip("KVM boots the image on this host: nothing to refuse")
    spec = EnvSpec(name="t", kind="qemu", image=image, workdir=tmp_path, network="none",
                   options={"accel": "kvm"})
    with pytest.raises(Unavailable, match="KVM"):
        QemuInstance(spec).boot()
