"""VM profiles and tuning knobs, microvm and shared-directory command lines: golden tests of
pure functions (no VM)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support import DATA

from isotax.environments.vm import qemu_tuning
from isotax.environments.vm.qemu_initrd import EXTRA_MODULES, INIT, MODULES, guest_modules
from isotax.environments.vm.qemu_share import Share, share_argv, virtiofsd_argv
from isotax.environments.vm.qemu_tuning import (
    HostFacts,
    KnobError,
    host_topology,
    parse_cpu_list,
    resolve_knobs,
    vcpu_threads,
    vnuma_layout,
)
from isotax.environments.vm.qemu_vm import VmConfig, kernel_cmdline, numa_memory, qemu_argv

HOST = HostFacts(cpus=(0, 1), threads_per_core=1, cores_per_socket=2, numa_nodes=1,
                 vhost_net=False, vendor="GenuineIntel")
BIG = HostFacts(cpus=tuple(range(16)), threads_per_core=2, cores_per_socket=4, numa_nodes=2,
                vhost_net=True, node_cpus=((0, tuple(range(8))), (1, tuple(range(8, 16)))))


def knobs(accel: str = "tcg", machine: str = "pc", vcpus: int = 2, host: HostFacts = HOST,
          **options: object) -> qemu_tuning.Knobs:
    return resolve_knobs(options, accel, machine, vcpus, host)


# -- profiles and knobs --------------------------------------------------------------------------

def test_default_profile_is_isotax_plain_vm() -> None:
    k = knobs()
    assert (k.profile, k.cpu_model, k.topology, k.cache_info, k.pin, k.hugepages, k.iothread,
            k.vhost, k.vnuma) == ("default", "max", None, False, (), False, False, False, False)
    assert knobs(accel="kvm").cpu_model == "host"


def test_untuned_profile_is_a_clouds_default() -> None:
    k = knobs(profile="untuned")
    assert k.cpu_model == "qemu64" and k.topology == (2, 1, 1)
    assert not (k.pin or k.hugepages or k.iothread or k.cache_info)
    assert k.vhost is False and "no /dev/vhost-net" in k.notes["vhost"]
    # vhost "as available": on where the host has /dev/vhost-net.
    assert knobs(profile="untuned", host=BIG).vhost is True


def test_tuned_profile_under_tcg_says_what_it_could_not_do() -> None:
    k = knobs(profile="tuned")
    # TCG's max says AuthenticAMD: the host's vendor makes the guest read the cache leaves.
    assert k.cpu_model == "max,vendor=GenuineIntel" and "TCG" in k.notes["cpu_model"]
    assert knobs(profile="tuned", cache_info=False).cpu_model == "max"
    assert k.topology == (1, 2, 1) and k.cache_info and k.hugepages and k.iothread
    assert k.pin == (0, 1)
    assert not k.vnuma and k.numa == () and "1 NUMA node" in k.notes["vnuma"]
    d = k.words()
    assert d["profile"] == "tuned"
    assert d["knob_pin"].startswith("on: vcpu0->cpu0,vcpu1->cpu1")
    assert d["knob_cpu_topology"].startswith("sockets=1,cores=2,threads=1")
    assert d["knob_cpu_model"].startswith("max,vendor=GenuineIntel (host asked")
    assert set(d) == {"profile", *(f"knob_{n}" for n in qemu_tuning.KNOBS)}
    # Under KVM the host model really is passed through.
    assert knobs(accel="kvm", profile="tuned").cpu_model == "host"


def test_tuned_microvm_under_tcg_has_no_iothread() -> None:
    k = knobs(machine="microvm", profile="tuned")
    assert not k.iothread and "ioeventfd" in k.notes["iothread"]
    assert knobs(accel="kvm", machine="microvm", profile="tuned").iothread


def test_each_knob_overrides_its_profile_alone() -> None:
    base = knobs(profile="untuned")
    for name, value, field, expect in (
            ("pin", True, "pin", (0, 1)), ("hugepages", True, "hugepages", True),
            ("iothread", "on", "iothread", True), ("cache_info", "yes", "cache_info", True),
            ("cpu_model", "Skylake-Server", "cpu_model", "Skylake-Server"),
            ("cpu_model", "max", "cpu_model", "max"),
            ("cpu_topology", "host", "topology", (1, 2, 1))):
        k = knobs(profile="untuned", **{name: value})
        assert getattr(k, field) == expect, name
        others = [f for f in ("cpu_model", "topology", "cache_info", "pin", "hugepages",
                              "iothread", "vhost") if f != field]
        assert [getattr(k, f) for f in others] == [getattr(base, f) for f in others], name
        assert k.requested[name] == str(value).lower() if isinstance(value, bool) else True


def test_pin_cpus_and_more_vcpus_than_cpus() -> None:
    assert knobs(pin=True, pin_cpus="1").pin == (1, 1)
    k = knobs(vcpus=3, pin=True)
    assert k.pin == (0, 1, 0) and "3 vCPUs share 2 host CPUs" in k.notes["pin"]
    with pytest.raises(KnobError, match="not usable"):
        knobs(pin=True, pin_cpus="5")


@pytest.mark.parametrize("options, words", [
    ({"profile": "fast"}, "options.profile"),
    ({"pin": "maybe"}, "options.pin"),
    ({"cpu_topology": "numa"}, "cpu_topology"),
    ({"vhost": "on"}, "/dev/vhost-net"),
    ({"vhost": "sometimes"}, "options.vhost"),
])
def test_bad_knob_values_name_the_option(options: dict[str, object], words: str) -> None:
    with pytest.raises(KnobError, match=words):
        knobs(**options)


def test_vnuma_mirrors_a_multi_node_host() -> None:
    k = knobs(host=BIG, vcpus=4, profile="tuned")
    assert k.vnuma and k.numa == ((0, 0, 1), (1, 2, 3))
    assert k.topology == (1, 2, 2)  # the host's SMT pairs
    assert k.pin == (0, 1, 8, 9)  # each vCPU on its own guest node's host node
    assert "1: vcpu2-3 on host node 1" in k.notes["vnuma"]
    one = knobs(host=BIG, vcpus=1, vnuma=True)
    assert not one.vnuma and "cannot span" in one.notes["vnuma"]
    assert vnuma_layout(5, [(0, (0, 1)), (1, (2, 3, 4, 5, 6, 7))]) == ((0, 0, 0), (1, 1, 4))
    argv = qemu_argv(cfg(vcpus=4, numa=k.numa, hugepages_dir="/run/isotax/itx-hp-q1"))
    assert argv[3:5] == ["-machine", "pc"]  # no machine memory-backend with -numa memdev
    i = argv.index("-numa")
    assert argv[i - 2:i + 6] == [
        "-object", "memory-backend-file,mem-path=/run/isotax/itx-hp-q1,prealloc=on,id=mem0,"
                   "size=512M,share=off,host-nodes=0,policy=bind",
        "-numa", "node,nodeid=0,cpus=0-1,memdev=mem0",
        "-object", "memory-backend-file,mem-path=/run/isotax/itx-hp-q1,prealloc=on,id=mem1,"
                   "size=512M,share=off,host-nodes=1,policy=bind",
        "-numa", "node,nodeid=1,cpus=2-3,memdev=mem1"]
    assert numa_memory(1000, 3) == [332, 332, 336]


def test_host_topology_and_cpu_lists() -> None:
    assert host_topology(2, 1, 2) == (1, 2, 1)
    assert host_topology(4, 2, 4) == (1, 2, 2)
    assert host_topology(3, 2, 4) == (1, 3, 1)  # odd count: no SMT pairs
    assert host_topology(16, 2, 4) == (2, 4, 2)
    assert host_topology(6, 1, 4) == (2, 3, 1)  # no socket larger than the host's
    assert host_topology(10, 1, 4) == (1, 10, 1)  # 10 cores do not split into 3 sockets
    assert parse_cpu_list("0-2,5") == (0, 1, 2, 5)
    with pytest.raises(KnobError):
        parse_cpu_list("a-b")


def test_vcpu_threads_from_real_query_cpus_fast() -> None:
    # QMP query-cpus-fast of QEMU 7.2 (TCG, -smp 2,sockets=1,cores=2,threads=1), captured here.
    answer = json.loads((DATA / "qemu" / "query-cpus-fast.json").read_text())["return"]
    assert vcpu_threads(list(reversed(answer))) == [(0, 22499), (1, 22500)]


# -- command lines -------------------------------------------------------------------------------

def cfg(**kw: object) -> VmConfig:
    base: dict[str, object] = dict(accel="tcg", vcpus=2, memory_mib=1024, kernel=Path("k"),
                                   initrd=Path("i"), backing=Path("d"), hostname="itx-q1")
    return VmConfig(**{**base, **kw})  # type: ignore[arg-type]


def test_untuned_and_tuned_pc_command_lines() -> None:
    u = qemu_argv(cfg(cpu_model="qemu64", topology=(2, 1, 1), data_disk=True))
    assert u[:12] == ["qemu-system-x86_64", "-name", "isotax,debug-threads=on", "-machine",
                      "pc", "-accel", "tcg,thread=multi", "-cpu", "qemu64", "-smp",
                      "2,sockets=2,cores=1,threads=1", "-m"]
    assert "iothread" not in " ".join(u) and "memory-backend" not in " ".join(u)
    t = qemu_argv(cfg(cpu_model="max", topology=(1, 2, 1), cache_info=True, data_disk=True,
                      hugepages_dir="/run/isotax/itx-hp-q1", iothread=True))
    assert t[3:17] == [
        "-machine", "pc,memory-backend=mem", "-accel", "tcg,thread=multi",
        "-cpu", "max,host-cache-info=on,l3-cache=on", "-smp", "2,sockets=1,cores=2,threads=1",
        "-m", "1024", "-object",
        "memory-backend-file,id=mem,size=1024M,mem-path=/run/isotax/itx-hp-q1,prealloc=on,"
        "share=off", "-nodefaults", "-nographic"]
    assert t[t.index("-no-user-config") + 1:][:2] == ["-object", "iothread,id=io0"]
    assert "virtio-blk-pci,drive=root,iothread=io0" in t
    assert "virtio-blk-pci,drive=data,serial=itxdata,iothread=io0" in t


def test_vhost_knob_reaches_the_netdev() -> None:
    on = qemu_argv(cfg(tap="itx-tq1", vhost=True))
    assert "tap,id=net0,ifname=itx-tq1,script=no,downscript=no,vhost=on" in on


def test_microvm_command_line_and_kernel_cmdline() -> None:
    c = cfg(machine="microvm", tap="itx-tq1", mac="52:54:00:aa:bb:cc", data_disk=True,
            tsc_khz=2600000, modules=("virtio_mmio", "virtio_blk", "crc32c_generic", "ext4",
                                      "virtio_console", "virtio_net"))
    argv = qemu_argv(c)
    assert argv[3:5] == ["-machine", "microvm"]
    devices = [argv[i + 1] for i, a in enumerate(argv) if a == "-device"]
    assert devices == ["virtio-blk-device,drive=root",
                       "virtio-blk-device,drive=data,serial=itxdata",
                       "virtio-serial-device,id=vser",
                       "virtserialport,bus=vser.0,chardev=agent,name=org.isotax.agent",
                       "virtio-net-device,netdev=net0,mac=52:54:00:aa:bb:cc"]
    assert not any("pci" in d for d in devices)
    assert kernel_cmdline(c) == (
        "console=ttyS0 root=/dev/vda rw init=/opt/isotax/bin/itx-init panic=-1 "
        "itx.hostname=itx-q1 itx.mods=virtio_mmio,virtio_blk,crc32c_generic,ext4,"
        "virtio_console,virtio_net tsc_early_khz=2600000 tsc=reliable")


def test_9p_root_and_volume_on_microvm() -> None:
    root = Share("itxroot", "9p", Path("/img/rootfs"), True)
    vol = Share("itxvol", "9p", Path("/w/itx-vol"), False, msize=524288, cache="none")
    c = cfg(machine="microvm", root_share=root, shares=(vol,),
            modules=guest_modules("microvm", False, False, [root, vol]))
    argv = qemu_argv(c)
    assert "disk.qcow2" not in " ".join(argv) and "virtio-blk" not in " ".join(argv)
    i = argv.index("-fsdev")
    assert argv[i:i + 8] == [
        "-fsdev", "local,id=fs0,path=/img/rootfs,security_model=none,multidevs=remap,"
                  "readonly=on",
        "-device", "virtio-9p-device,fsdev=fs0,mount_tag=itxroot",
        "-fsdev", "local,id=fs1,path=/w/itx-vol,security_model=none,multidevs=remap",
        "-device", "virtio-9p-device,fsdev=fs1,mount_tag=itxvol"]
    assert kernel_cmdline(c).split()[1:4] == [
        "itx.root=itxroot", "itx.rootfstype=9p",
        "itx.rootflags=trans=virtio,version=9p2000.L,msize=8192,cache=mmap,ro"]
    assert "itx.mods=virtio_mmio,virtio_console,9pnet_virtio,9p" in kernel_cmdline(c)
    assert vol.guest_options() == "trans=virtio,version=9p2000.L,msize=524288,cache=none,rw"
    assert share_argv(root, "pc", 0)[3] == "virtio-9p-pci,fsdev=fs0,mount_tag=itxroot"


def test_virtiofs_shares_need_shared_memory() -> None:
    root = Share("itxroot", "virtiofs", Path("/run/isotax/itx-root-q1"), True,
                 socket="/run/isotax/itx-vfs-q1-itxroot.sock")
    argv = qemu_argv(cfg(root_share=root))
    assert argv[3:5] == ["-machine", "pc,memory-backend=mem"]
    assert "memory-backend-memfd,id=mem,size=1024M,share=on" in argv
    i = argv.index("-chardev")
    assert argv[i:i + 4] == ["-chardev", "socket,id=vfs0,path=/run/isotax/itx-vfs-q1-itxroot.sock",
                             "-device", "vhost-user-fs-pci,chardev=vfs0,tag=itxroot,"
                                        "queue-size=1024"]
    assert "itx.rootfstype=virtiofs itx.rootflags=ro" in kernel_cmdline(cfg(root_share=root))
    # Hugepages and virtio-fs: the hugetlbfs file is shared too.
    hp = qemu_argv(cfg(root_share=root, hugepages_dir="/run/isotax/itx-hp-q1"))
    assert any(a.endswith("prealloc=on,share=on") for a in hp)
    assert share_argv(root, "microvm", 2)[3].startswith("vhost-user-fs-device,chardev=vfs2")


def test_virtiofsd_command_lines() -> None:
    sh = Share("itxvol", "virtiofs", Path("/w/itx-vol"), False)
    assert virtiofsd_argv("/usr/lib/qemu/virtiofsd", "c", sh, "/run/isotax/s.sock") == [
        "/usr/lib/qemu/virtiofsd", "--socket-path=/run/isotax/s.sock", "-o",
        "source=/w/itx-vol", "-o", "cache=auto", "-o", "sandbox=chroot",
        "--thread-pool-size=1"]
    ro = Share("itxroot", "virtiofs", Path("/r"), True, cache="none")
    assert virtiofsd_argv("virtiofsd", "rust", ro, "/s") == [
        "virtiofsd", "--socket-path=/s", "--shared-dir=/r", "--cache=none",
        "--thread-pool-size=1", "--sandbox=chroot", "--readonly"]


def test_guest_modules_per_machine_and_share() -> None:
    assert guest_modules("pc", True, True, []) == (
        "virtio_pci", "virtio_blk", "crc32c_generic", "ext4", "virtio_console", "virtio_net")
    v = Share("t", "virtiofs", Path("/"), True)
    assert guest_modules("microvm", False, False, [v]) == (
        "virtio_mmio", "virtio_console", "virtiofs")
    # Every module a VM may ask for is packed into the minimal initrd.
    for machine in ("pc", "microvm"):
        mods = guest_modules(machine, True, True, [v, Share("u", "9p", Path("/"), False)])
        assert set(mods) <= set(MODULES + EXTRA_MODULES)


def test_initrd_init_is_sh_and_reads_root_from_the_command_line(tmp_path: Path) -> None:
    script = INIT.format(modules=" ".join(MODULES))
    assert subprocess.run(["sh", "-n", "-c", script], check=False).returncode == 0
    for word in ("itx.root=*", "itx.rootfstype=*", "itx.rootflags=*", "itx.mods=*"):
        assert word in script
