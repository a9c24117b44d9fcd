"""qemu environment: the guest agent's protocol (locally, plain Python), the command line
(golden), then a real VM booted from the workload image (root, QEMU; TCG on this kind of host)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

from isotax import protocols
from isotax.environments.base import GUEST_PATH
from isotax.environments.vm.qemu import QemuInstance
from isotax.environments.vm.qemu_initrd import _Cpio, _module_order
from isotax.environments.vm.qemu_vm import VmConfig, host_thp_mode, kernel_cmdline, qemu_argv
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec

REGISTRY = protocols.environments()

AGENT = Path(__file__).resolve().parent.parent / "src/isotax/guest/itx-agent.py"
INIT = AGENT.parent / "itx-init"


def load_agent() -> ModuleType:
    spec = importlib.util.spec_from_file_location("itx_agent", AGENT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- the agent, run locally over pipes -----------------------------------------------------------

class LocalAgent:
    """itx-agent.py --stdio as a child process: the same code the VM runs as PID 1."""

    def __init__(self) -> None:
        # -S like itx-init starts it; the host's python3 is Debian's, like the image's.
        self.p = subprocess.Popen([sys.executable, "-I", "-S", str(AGENT), "--stdio"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def send_raw(self, data: bytes) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def read(self) -> dict:
        assert self.p.stdout is not None
        line = self.p.stdout.readline()
        assert line.endswith(b"\n"), f"agent answered {line!r}"
        return json.loads(line)

    def ask(self, **req: object) -> dict:
        self.send_raw((json.dumps(req) + "\n").encode())
        return self.read()

    def close(self) -> int:
        assert self.p.stdin is not None
        self.p.stdin.close()
        return self.p.wait(10)


@pytest.fixture
def agent() -> Iterator[LocalAgent]:
    a = LocalAgent()
    try:
        yield a
    finally:
        if a.p.poll() is None:
            a.p.kill()
            a.p.wait()


ENV = {"PATH": "/usr/bin:/bin", "ITX_T": "x y"}


def test_agent_exec_status_output_and_env(agent: LocalAgent) -> None:
    r = agent.ask(id=1, argv=["sh", "-c", 'echo "$ITX_T"; echo err >&2; exit 3'],
                  timeout=10, env=ENV)
    assert (r["id"], r["rc"], r["stdout"], r["stderr"]) == (1, 3, "x y\n", "err\n")
    assert r["wall_ns"] > 0
    # The environment is exactly the request's: nothing inherited from the agent's own.
    r = agent.ask(id=2, argv=["env"], timeout=10, env=ENV)
    assert sorted(r["stdout"].splitlines()) == ["ITX_T=x y", "PATH=/usr/bin:/bin"]


def test_agent_not_found_is_127_and_bad_requests_are_answered(agent: LocalAgent) -> None:
    r = agent.ask(id=3, argv=["/no/such/itx-tool"], timeout=5, env=ENV)
    assert r["rc"] == 127 and "itx-tool" in r["stderr"]
    agent.send_raw(b"{not json\n")
    r = agent.read()
    assert r["id"] is None and r["rc"] == 2 and "bad request" in r["stderr"]
    r = agent.ask(id=4, argv=[], timeout=5)
    assert r["rc"] == 2 and r["id"] == 4
    assert agent.ask(id=5, op="ping")["rc"] == 0


def test_agent_timeout_is_124_and_kills_the_process_group(agent: LocalAgent) -> None:
    t0 = time.monotonic()
    # The background sleep holds stdout open: the agent must kill the group, not just sh.
    r = agent.ask(id=6, argv=["sh", "-c", "sleep 60 & echo started; sleep 60"], timeout=1,
                  env=ENV)
    assert r["rc"] == 124 and r["stdout"] == "started\n" and "timed out" in r["stderr"]
    assert time.monotonic() - t0 < 10


def test_agent_framing_large_split_and_batched(agent: LocalAgent) -> None:
    # 8 MB of output, with non-ASCII and characters JSON must escape, in one response line.
    script = ("import sys; sys.stdout.write(('a\\u00e9\\u20ac\"\\\\\\t\\x01' * 100 + '\\n')"
              " * 10000)")
    req = json.dumps({"id": 7, "argv": [sys.executable, "-c", script], "timeout": 60,
                      "env": ENV}).encode() + b"\n"
    agent.send_raw(req[:10])  # a request split across writes
    time.sleep(0.2)
    agent.send_raw(req[10:])
    r = agent.read()
    assert r["rc"] == 0, r["stderr"]
    assert r["stdout"] == ('a\u00e9\u20ac"\\\t\x01' * 100 + "\n") * 10000
    # Two requests in one write: two answers, in order.
    two = b"".join(json.dumps({"id": i, "op": "ping"}).encode() + b"\n" for i in (8, 9))
    agent.send_raw(two)
    assert [agent.read()["id"], agent.read()["id"]] == [8, 9]


def test_agent_shutdown_answers_then_ends(agent: LocalAgent) -> None:
    assert agent.ask(id=10, op="shutdown") == {"id": 10, "rc": 0}
    assert agent.p.wait(10) == 0  # not PID 1 here: it ends instead of powering off


def test_init_script_is_valid_sh() -> None:
    assert subprocess.run(["sh", "-n", str(INIT)], check=False).returncode == 0
    assert INIT.read_text().startswith("#!/bin/sh\n")


# -- the command line ----------------------------------------------------------------------------

def test_qemu_argv_golden() -> None:
    cfg = VmConfig(accel="tcg", vcpus=2, memory_mib=1024, kernel=Path("/img/vmlinux"),
                   initrd=Path("/img/initrd.img"), backing=Path("/img/rootfs.ext4"),
                   tap="itx-tq1", mac="52:54:00:aa:bb:cc", ip="10.213.0.2/24",
                   gateway="10.213.0.1", hostname="itx-q1")
    assert kernel_cmdline(cfg) == (
        "console=ttyS0 root=/dev/vda rw init=/opt/isotax/bin/itx-init panic=-1 "
        "itx.hostname=itx-q1 itx.ip=10.213.0.2/24 itx.gw=10.213.0.1")
    assert qemu_argv(cfg) == [
        "qemu-system-x86_64", "-name", "isotax,debug-threads=on", "-machine", "pc",
        "-accel", "tcg,thread=multi", "-cpu", "max", "-smp", "2", "-m", "1024",
        "-nodefaults", "-nographic", "-no-reboot", "-no-user-config",
        "-kernel", "/img/vmlinux", "-initrd", "/img/initrd.img",
        "-append", kernel_cmdline(cfg),
        "-drive", "file=disk.qcow2,format=qcow2,if=none,id=root,cache=none,aio=native",
        "-device", "virtio-blk-pci,drive=root",
        "-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
        "-qmp", "unix:qmp.sock,server=on,wait=off",
        "-device", "virtio-serial-pci,id=vser",
        "-chardev", "socket,id=agent,path=agent.sock",
        "-device", "virtserialport,bus=vser.0,chardev=agent,name=org.isotax.agent",
        "-netdev", "tap,id=net0,ifname=itx-tq1,script=no,downscript=no,vhost=off",
        "-device", "virtio-net-pci,netdev=net0,mac=52:54:00:aa:bb:cc",
    ]
    # numa_node: the same command line under numactl, threads and memory on the node.
    bound = qemu_argv(replace(cfg, numa_node=0))
    assert bound == ["numactl", "--cpunodebind=0", "--membind=0", *qemu_argv(cfg)]
    kvm = qemu_argv(VmConfig(accel="kvm", vcpus=1, memory_mib=512, kernel=Path("k"),
                             initrd=None, backing=Path("d")))
    assert kvm[5:9] == ["-accel", "kvm", "-cpu", "host"]
    assert "-initrd" not in kvm and "-netdev" not in kvm


def test_guest_gets_the_hosts_mtu_and_thp_mode() -> None:
    cfg = VmConfig(accel="tcg", vcpus=2, memory_mib=1024, kernel=Path("/img/vmlinux"),
                   initrd=None, backing=Path("/img/rootfs.ext4"), tap="itx-tq1",
                   mac="52:54:00:aa:bb:cc", mtu=1400, thp="madvise")
    assert "transparent_hugepage=madvise" in kernel_cmdline(cfg).split()
    assert qemu_argv(cfg)[-1] == "virtio-net-pci,netdev=net0,mac=52:54:00:aa:bb:cc,host_mtu=1400"
    assert host_thp_mode("always [madvise] never\n") == "madvise"
    assert host_thp_mode("[always] madvise never") == "always"
    assert host_thp_mode("") is None


def test_qemu_argv_data_disk() -> None:
    """The data disk: raw, same cache mode and AIO engine as the root disk, found by serial."""
    def cfg(data_disk: bool) -> VmConfig:
        return VmConfig(accel="tcg", vcpus=1, memory_mib=512, kernel=Path("k"), initrd=None,
                        backing=Path("d"), disk_cache="writeback", disk_aio="threads",
                        data_disk=data_disk)

    argv = qemu_argv(cfg(True))
    i = argv.index("virtio-blk-pci,drive=root")
    assert argv[i + 1:i + 5] == [
        "-drive", "file=data.raw,format=raw,if=none,id=data,cache=writeback,aio=threads",
        "-device", "virtio-blk-pci,drive=data,serial=itxdata"]
    assert "file=data.raw" not in " ".join(qemu_argv(cfg(False)))


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


DATA = Path(__file__).parent / "data" / "qemu"


def test_module_order_deps_first_on_real_modules_dep(tmp_path: Path) -> None:
    # tests/data/qemu/modules.dep: the relevant lines of the image's 6.1 kernel's modules.dep.
    shutil.copy(DATA / "modules.dep", tmp_path / "modules.dep")
    order = _module_order(tmp_path, ("virtio_pci", "virtio_blk", "ext4", "virtio_net"))
    names = [Path(p).name for p in order]
    assert names == ["virtio.ko", "virtio_ring.ko", "virtio_pci_modern_dev.ko",
                     "virtio_pci_legacy_dev.ko", "virtio_pci.ko", "virtio_blk.ko",
                     "jbd2.ko", "mbcache.ko", "crc16.ko", "ext4.ko", "failover.ko",
                     "net_failover.ko", "virtio_net.ko"]
    with pytest.raises(FileNotFoundError, match="itx_nosuch"):
        _module_order(tmp_path, ("itx_nosuch",))


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


def test_registered_and_available_never_raises() -> None:
    env = REGISTRY["qemu"]()
    a = env.available()
    assert a.ok or (a.reason and a.fix)


# -- a real VM -----------------------------------------------------------------------------------

def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root (tap devices, bridge) and the workload image"
    for tool in ("qemu-system-x86_64", "qemu-img"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install qemu-system-x86 qemu-utils)"
    return None


@pytest.fixture(scope="module")
def image(image: ImageArtifacts) -> ImageArtifacts:
    """The suite's image (conftest), on hosts that also have what this module needs."""
    if (why := _why_not()) is not None:
        pytest.skip(why)
    return image


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
    d = vm.describe()
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
    d = vm.describe()["storage"]
    assert d.startswith("virtio-blk raw disk") and f"cache={vm.cfg.disk_cache}" in d
    mounts = vm.exec(["cat", "/proc/mounts"], 30).check().stdout
    assert any(ln.split()[:3] == ["/dev/vdb", "/mnt", "ext4"] for ln in mounts.splitlines())
    vm.exec(["sh", "-c", "echo x > /mnt/itx-test && sync && rm /mnt/itx-test"], 30).check()


@pytest.mark.integration
def test_vm_rootfs_storage_is_on_the_root_disk(image: ImageArtifacts, tmp_path: Path) -> None:
    spec = EnvSpec(name="t", kind="qemu", image=image, workdir=tmp_path, network="none",
                   vcpus=1, memory_mib=512, storage="rootfs")
    inst = QemuInstance(spec)
    try:
        assert inst.data_dir == "/var/lib/itx-data" and not (tmp_path / "data.raw").exists()
        assert inst.describe()["storage"].startswith("root disk: virtio-blk qcow2 overlay")
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
        QemuInstance(spec)
