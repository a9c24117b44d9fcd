"""qemu environment: the guest agent's protocol (locally, plain Python), the init script and
the command line (golden)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest
from support import DATA, ROOT

from isotax import protocols
from isotax.environments.vm.qemu_initrd import _module_order
from isotax.environments.vm.qemu_vm import VmConfig, host_thp_mode, kernel_cmdline, qemu_argv
from isotax.telemetry.observe import guest_series
from isotax.telemetry.sampler import parse_stat

AGENT = ROOT / "src/isotax/guest/itx-agent.py"
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


def test_agent_reads_proc_stat_and_samples_without_a_command(agent: LocalAgent) -> None:
    """stat_open/stat_close: the agent's own reads of /proc/stat (no fork under TCG), in the
    marked format isotax.telemetry.observe parses; a second stat_close has nothing left."""
    opened = agent.ask(id=20, op="stat_open", interval=0.05)
    assert opened["rc"] == 0 and parse_stat(opened["stat"], 100.0).cpus
    time.sleep(0.3)
    closed = agent.ask(id=21, op="stat_close")
    assert closed["rc"] == 0 and parse_stat(closed["stat"], 100.0).cpus
    assert closed["ticks"].count("itx-tick ") >= 3  # one at once, then every 0.05 s
    series = guest_series(closed["ticks"])
    assert len(series["t"]) >= 2 and series["t"] == sorted(series["t"])
    assert all(0.0 <= b <= 1.0 for row in series["cpu_busy"] for b in row)
    again = agent.ask(id=22, op="stat_close")
    assert again["rc"] == 0 and again["ticks"] == ""
    # Without an interval: a reading, no thread.
    assert agent.ask(id=23, op="stat_open", interval=0)["rc"] == 0
    assert agent.ask(id=24, op="stat_close")["ticks"] == ""
    assert agent.ask(id=25, op="stat_open", interval="soon")["rc"] == 1


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


def test_module_order_deps_first_on_real_modules_dep(tmp_path: Path) -> None:
    # tests/data/qemu/modules.dep: the relevant lines of the image's 6.1 kernel's modules.dep.
    shutil.copy(DATA / "qemu" / "modules.dep", tmp_path / "modules.dep")
    order = _module_order(tmp_path, ("virtio_pci", "virtio_blk", "ext4", "virtio_net"))
    names = [Path(p).name for p in order]
    assert names == ["virtio.ko", "virtio_ring.ko", "virtio_pci_modern_dev.ko",
                     "virtio_pci_legacy_dev.ko", "virtio_pci.ko", "virtio_blk.ko",
                     "jbd2.ko", "mbcache.ko", "crc16.ko", "ext4.ko", "failover.ko",
                     "net_failover.ko", "virtio_net.ko"]
    with pytest.raises(FileNotFoundError, match="itx_nosuch"):
        _module_order(tmp_path, ("itx_nosuch",))


def test_registered_and_available_never_raises() -> None:
    env = protocols.environments()["qemu"]()
    a = env.available()
    assert a.ok or (a.reason and a.fix)
