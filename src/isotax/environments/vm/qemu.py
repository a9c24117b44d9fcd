"""qemu: the workload image as a full virtual machine (QEMU, KVM where it works, else TCG).

The VM boots the image's own Debian kernel and initrd directly (no firmware, no bootloader)
with a copy-on-write qcow2 overlay of the image's ext4 disk as its virtio-blk root, and
/opt/isotax/bin/itx-init as PID 1, which prints ITX-READY and execs the command agent.
Commands travel over a virtio-serial port (see qemu_agent for why that channel); the serial
console carries the kernel log to console.log; QMP drives pause/resume/quit.

Plan options (spec.options):
    accel       auto | kvm | tcg     auto: a probe boot decides (cached; see qemu_accel)
    kernel      auto | vmlinux | vmlinuz      auto = vmlinux (faster under TCG)
    initrd      auto | minimal | image        auto = minimal (see qemu_initrd; much faster)
    disk_cache  QEMU -drive cache= (default none when the workdir allows O_DIRECT)
    disk_aio    QEMU -drive aio=   (default native with cache=none, else threads)
    boot_timeout  seconds (default 120; TCG on a busy host is slow)
    data_disk_gib size of the data disk (storage "volume"; default 4, a sparse file)
    quiet       true: kernel log level "quiet" on the console
    machine     pc | microvm      (kind "microvm" defaults to microvm; see microvm.py)
    profile     default | untuned | tuned, and each tuning knob on its own (cpu_model,
                cpu_topology, cache_info, pin, pin_cpus, hugepages, iothread, vhost, vnuma):
                see qemu_tuning. Its facts give every knob's effective value and why.
NUMA placement (the plan's numa_node): QEMU runs under numactl, its threads and all of its
memory on that host node (qemu_vm.qemu_argv says why numactl rather than a memory backend's
host-nodes); the pin knob pins vCPUs to that node's CPUs only, vnuma is off, and hugepages
come from that node's pool.

network: "bridge" (a tap on an isotax bridge; the guest's address is the instance's address)
or "none" (no NIC at all). A VM cannot share the host's network stack, so "host" is refused.

Storage (Instance.data_dir, for disk workloads): "volume" is a second virtio-blk disk, a sparse
raw file in the workdir with ext4 made on the host before boot, mounted by the guest at /mnt
right after boot (through the agent, so the image and itx-init stay as they are); "rootfs" is
a directory on the root disk (the qcow2 overlay). Both disks use the same cache mode and AIO
engine, so the two differ only by qcow2 vs raw.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from isotax.environments.base import (
    GUEST_ENV,
    EnvironmentBase,
    Removals,
    Stopwatch,
    exit_words,
    register,
    remove_tree,
    stops_once,
    undo_start,
)
from isotax.environments.vm.qemu_accel import (
    Probe,
    current_image,
    expected_accelerator,
    probe_accelerator,
    proven_accelerator,
)
from isotax.environments.vm.qemu_initrd import guest_modules, select_initrd
from isotax.environments.vm.qemu_options import (
    DEFAULT_BOOT_TIMEOUT_S,
    DEFAULT_DATA_DISK_GIB,
    MACHINES,
    vm_options,
)
from isotax.environments.vm.qemu_share import (
    ReadonlyBind,
    Share,
    Virtiofsd,
    find_virtiofsd,
)
from isotax.environments.vm.qemu_tuning import (
    HUGEPAGE_KIB,
    HugepageError,
    HugepageReservation,
    KnobError,
    Knobs,
    host_facts,
    host_thp,
    host_tsc_khz,
    host_uplink_mtu,
    leaked_hugepage_reservations,
    pin_vcpus,
    resolve_knobs,
    vcpu_threads,
)
from isotax.environments.vm.qemu_vm import (
    DATA_DISK,
    QEMU,
    QEMU_IMG,
    BootError,
    Vm,
    VmConfig,
    direct_io_works,
    make_data_disk,
    mount_data_disk_script,
    qemu_version,
    select_kernel,
)
from isotax.host import owners
from isotax.host.facts.filesystems import host_storage
from isotax.host.facts.numa import node_cpulist, numactl_prefix, placement_words
from isotax.host.network import Bridge, Lease
from isotax.host.processes import leftover_processes, names_itx
from isotax.protocols import (
    STORAGES,
    Availability,
    Completed,
    EnvSpec,
    Facts,
    Instance,
    Isolation,
    LeakFinder,
    Leftover,
    ParamSpec,
    Reach,
    SocketStack,
    Unavailable,
    VersionCommand,
)

DEFAULT_MEMORY_MIB = 2048
SCRATCH = "/tmp"  # a tmpfs mounted by itx-init, like the containers' /tmp
VOLUME_DIR = "/mnt"  # the data disk's mount point (the containers' volume is there too)
ROOTFS_DATA_DIR = "/var/lib/itx-data"  # on the root disk, as in a container's overlay rootfs
_TRUE = {"1", "true", "yes", "on"}
# A tap on an isotax bridge, or no NIC: a VM has a kernel and network stack of its own, so it
# cannot share the host's (the plan refuses "host" at load; an instance refuses it too).
NETWORKS = ("bridge", "none")
RUN_DIR = Path("/run/isotax")  # short paths for sockets and mounts (sun_path is 108 bytes)


def _resolve_accel(spec: EnvSpec, choice: str) -> Probe:
    if choice == "tcg":
        return Probe("tcg", "the plan asks for TCG (accel = \"tcg\")")
    if choice not in ("auto", "kvm"):
        raise Unavailable(Availability.no(f"qemu: accel {choice!r} is not one of auto, kvm, "
                                          "tcg", "set accel to auto, kvm or tcg in the plan"))
    probe = probe_accelerator(spec.image)
    if choice == "kvm" and probe.accel != "kvm":
        raise Unavailable(Availability.no(
            f"qemu: the plan asks for KVM but it does not work here: {probe.reason}",
            'use accel = "auto" or "tcg"'))
    return probe


class QemuInstance:
    """One VM: the constructor checks the plan's choices and resolves the accelerator and the
    knobs (nothing made yet); boot() makes what the VM needs and boots it; stop() always.
    Subclasses (microvm, vm9p) change the machine type and where the root file system and the
    volume come from."""

    kind = "qemu"
    default_machine = "pc"
    socket_stack: SocketStack = SocketStack.LINUX  # the guest's own kernel

    def __init__(self, spec: EnvSpec) -> None:
        self.spec = spec
        self.scratch = SCRATCH
        self.address = ""
        self.milestones: Mapping[str, float] = {}
        self._sw = Stopwatch(spec.requested_at)
        self._bridge: Bridge | None = None
        self._lease: Lease | None = None
        self._vm: Vm | None = None
        self._hugepages: HugepageReservation | None = None
        self._daemons: list[Virtiofsd] = []
        self._binds: list[ReadonlyBind] = []
        self._volume_dir: Path | None = None
        self.pinned: list[str] = []
        self._stopped = False
        self._tag = owners.new_tag(3, prefix="q")  # itx-t<tag> / itx-br<tag>: 12 characters
        opts = spec.options
        kind = self.kind
        if spec.network not in NETWORKS:
            raise Unavailable(Availability.no(
                f"{kind}: network {spec.network!r} is impossible for a VM (it has its own "
                "kernel and network stack)", 'set network = "bridge" or "none" for this '
                "environment in the plan"))
        if spec.storage not in ("volume", "rootfs"):
            raise Unavailable(Availability.no(f"{kind}: storage {spec.storage!r} is not "
                                              "volume or rootfs",
                                              'set storage = "volume" or "rootfs"'))
        self.machine = str(opts.get("machine", self.default_machine))
        if self.machine not in MACHINES:
            raise Unavailable(Availability.no(f"{kind}: machine {self.machine!r} is not one of "
                                              f"{', '.join(MACHINES)}",
                                              'set options.machine = "pc" or "microvm"'))
        self._check_options()
        self.data_dir = VOLUME_DIR if spec.storage == "volume" else ROOTFS_DATA_DIR
        try:
            self.data_disk_gib = float(opts.get("data_disk_gib", DEFAULT_DATA_DISK_GIB))
        except (TypeError, ValueError):
            self.data_disk_gib = -1.0
        if not self.data_disk_gib > 0:
            raise Unavailable(Availability.no(
                f"{kind}: data_disk_gib {opts.get('data_disk_gib')!r} is not a positive number",
                "set options.data_disk_gib to a size in GiB, e.g. 4"))
        self.node_cpus: str | None = None
        if spec.numa_node is not None:
            if shutil.which("numactl") is None:
                raise Unavailable(Availability.no(
                    f"{kind}: numa_node needs numactl, which is not installed",
                    "apt-get install numactl (scripts/setup.sh)"))
            try:
                self.node_cpus = node_cpulist(spec.numa_node)
            except ValueError as e:
                raise Unavailable(Availability.no(f"{kind}: {e}",
                                                  "fix numa_node in the plan")) from e
        self.probe = _resolve_accel(spec, str(opts.get("accel", "auto")))
        vcpus = spec.vcpus or os.cpu_count() or 1
        try:
            self.knobs: Knobs = resolve_knobs(opts, self.probe.accel, self.machine, vcpus,
                                              host_facts(), spec.numa_node)
        except KnobError as e:
            raise Unavailable(Availability.no(f"{kind}: {e}", "fix the plan's options")) from e
        self.vcpus = vcpus

    def boot(self) -> None:
        """The bridge and tap, hugepages, shares and data disk, then the VM booted; on any
        failure what it made is removed and Unavailable says why (the VM's console log)."""
        spec, opts, kind, vcpus = self.spec, self.spec.options, self.kind, self.vcpus
        workdir = Path(spec.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        # cache=none needs O_DIRECT on the overlay and the backing file; tmpfs has none.
        direct = direct_io_works(workdir) and direct_io_works(spec.image.ext4.parent)
        cache = str(opts.get("disk_cache", "none" if direct else "writeback"))
        aio = str(opts.get("disk_aio", "native" if cache in ("none", "directsync")
                                       else "threads"))
        self.disk_note = ("" if direct else
                          "O_DIRECT unsupported in the workdir or image cache (tmpfs?)")
        try:
            kernel = select_kernel(spec.image, str(opts.get("kernel", "auto")))
            initrd, self.initrd_note = select_initrd(spec.image, str(opts.get("initrd", "auto")))
        except ValueError as e:
            raise Unavailable(Availability.no(f"{kind}: {e}", "rebuild the image "
                                              "(isotax image rm; isotax image build)")) from e
        memory_mib = spec.memory_mib or DEFAULT_MEMORY_MIB
        try:
            tap, ip, gw = self._network()
            hugepages_dir = self._reserve_hugepages(memory_mib)
            root_share, shares = self._shares(workdir)
            self._start_daemons([s for s in (root_share, *shares) if s is not None], workdir)
            data_disk = spec.storage == "volume" and not shares
            all_shares = [s for s in (root_share, *shares) if s is not None]
            plain = self.machine == "pc" and not all_shares
            self.cfg = VmConfig(
                accel=self.probe.accel,
                vcpus=vcpus,
                memory_mib=memory_mib,
                kernel=kernel,
                initrd=initrd, backing=spec.image.ext4, disk_cache=cache, disk_aio=aio,
                tap=tap, mac="52:54:00:" + ":".join(self._tag[i:i + 2] for i in (1, 3, 5)),
                ip=ip, gateway=gw, hostname=f"itx-{self._tag}",
                quiet=str(opts.get("quiet", "false")).lower() in _TRUE,
                data_disk=data_disk, mtu=host_uplink_mtu() if tap else None, thp=host_thp(),
                machine=self.machine, cpu_model=self.knobs.cpu_model,
                topology=self.knobs.topology, cache_info=self.knobs.cache_info,
                hugepages_dir=hugepages_dir, iothread=self.knobs.iothread,
                vhost=self.knobs.vhost, numa=self.knobs.numa, numa_node=spec.numa_node,
                root_share=root_share,
                shares=tuple(shares),
                tsc_khz=host_tsc_khz() if self.machine == "microvm" else None,
                # isotax's plain VM keeps the initrd's default module set.
                modules=() if plain else guest_modules(
                    self.machine, root_share is None or data_disk, tap is not None,
                    all_shares))
            if self.cfg.data_disk:
                make_data_disk(workdir / DATA_DISK, self.data_disk_gib)
            self._vm = Vm(self.cfg, workdir, self._sw,
                          on_started=self._pin if self.knobs.pin else None)
            self._vm.boot(float(opts.get("boot_timeout", DEFAULT_BOOT_TIMEOUT_S)))
            self._prepare_data_dir()
        except BootError as e:
            undo_start(self.stop)
            raise Unavailable(Availability.no(
                f"{kind} ({self.probe.accel}): the VM did not boot: {e}",
                f"see {workdir}/console.log and qemu.log")) from e
        except OSError as e:
            undo_start(self.stop)
            raise Unavailable(Availability.no(f"{kind}: {e}", f"see {workdir}")) from e
        except BaseException:
            undo_start(self.stop)
            raise
        self.milestones = dict(self._sw.marks)

    def _network(self) -> tuple[str | None, str | None, str | None]:
        """(tap, guest address/prefix, gateway) on a bridge of its own; Nones without one."""
        if self.spec.network != "bridge":
            return None, None, None
        self._bridge = Bridge(name=f"itx-br{self._tag}")
        self._bridge.up()
        self._lease = self._bridge.add_tap(self._tag)
        self.address = self._lease.ip
        return (self._lease.iface, f"{self._lease.ip}/{self._lease.prefixlen}",
                self._lease.gateway)

    def _reserve_hugepages(self, memory_mib: int) -> str | None:
        """The hugetlbfs mount for the guest's memory where the hugepages knob is on."""
        if not self.knobs.hugepages:
            return None
        self._hugepages = HugepageReservation(self._tag, memory_mib, self.spec.numa_node)
        try:
            self._hugepages.acquire()
        except (HugepageError, OSError) as e:
            raise Unavailable(Availability.no(
                f"{self.kind}: hugepages: {e}", "free memory, or set options.hugepages = "
                "false")) from e
        return str(self._hugepages.mountpoint)

    # -- hooks for the kinds built on this one ---------------------------------------------------
    def _check_options(self) -> None:
        """Refuse options this kind cannot honour (Unavailable with the fix)."""

    def _shares(self, workdir: Path) -> tuple[Share | None, list[Share]]:
        """(the root file system's share or None for the disk, the volume's shares)."""
        return None, []

    def _start_daemons(self, shares: Sequence[Share], workdir: Path) -> None:
        """A virtiofsd per virtio-fs share, before QEMU (which connects to their sockets)."""
        for sh in shares:
            if sh.transport != "virtiofs":
                continue
            binary = find_virtiofsd()
            if binary is None:
                raise Unavailable(Availability.no(
                    f"{self.kind}: share virtiofs needs virtiofsd, and none is installed",
                    "apt-get install qemu-system-common (QEMU 7.2 ships one), or cargo "
                    "install virtiofsd"))
            # Bound with QEMU: the daemon's threads copy the guest's file data.
            d = Virtiofsd(binary, sh, workdir, numactl_prefix(self.spec.numa_node))
            self._daemons.append(d)
            d.start()

    def _pin(self, vm: Vm) -> None:
        """Pin each vCPU thread (QMP query-cpus-fast) to its host CPU; a refusal fails the
        boot, since the plan asked for a pinned VM."""
        try:
            self.pinned = pin_vcpus(vcpu_threads(vm.qmp_cmd("query-cpus-fast")),
                                    self.knobs.pin)
        except OSError as e:
            raise BootError(f"pinning vCPUs failed: {e}") from e

    def _prepare_data_dir(self) -> None:
        """Mount the data disk (volume) or make the directory on the root disk (rootfs);
        milestone "storage". A failure is a boot failure: the VM cannot do what was asked."""
        assert self._vm is not None
        if self.cfg.shares:
            vol = self.cfg.shares[0]
            script = (f"mkdir -p {VOLUME_DIR} && mount -t {vol.guest_fstype()} -o "
                      f"{vol.guest_options()} {vol.tag} {VOLUME_DIR}")
        elif self.cfg.data_disk:
            script = mount_data_disk_script(VOLUME_DIR)
        else:
            script = f"mkdir -p {ROOTFS_DATA_DIR}"
        r = self._vm.exec(["sh", "-c", script], 120, {**GUEST_ENV, "TMPDIR": SCRATCH})
        if r.returncode != 0:
            raise BootError(f"preparing {self.data_dir} in the guest failed: "
                            f"{(r.stderr or r.stdout).strip()[-300:]}")
        self._sw.mark("storage")

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        assert self._vm is not None
        return self._vm.exec(argv, timeout, {**GUEST_ENV, "TMPDIR": SCRATCH})

    # isotax.protocols.GuestStat: the agent reads the guest's /proc/stat without a command.
    def guest_stat_open(self, interval_s: float) -> str | None:
        return self._vm.stat_open(interval_s) if self._vm is not None else None

    def guest_stat_close(self) -> tuple[str, str] | None:
        return self._vm.stat_close() if self._vm is not None else None

    def facts(self) -> Facts:
        return Facts(
            self.kind, Reach.TAP if self._bridge else Reach.NONE, runtime=qemu_version(),
            bridge=self._bridge.name if self._bridge else "",
            guest_memory_mib=self.cfg.memory_mib, vcpus=self.cfg.vcpus,
            emulated=self.probe.accel == "tcg", accelerator=self.probe.accel,
            accelerator_reason=self.probe.reason,
            # The reservation's pages: hugetlbfs is mounted with pagesize=2M (qemu_tuning).
            hugepages=f"{HUGEPAGE_KIB} kB" if self._hugepages is not None else "none",
            words=self._words())

    def _words(self) -> dict[str, str]:
        d = {
            "machine": ("microvm (virtio-mmio devices, no firmware, direct kernel boot)"
                        if self.machine == "microvm" else "pc (i440FX, PCI devices, SeaBIOS)"),
            "cpu_model": self.knobs.cpu_model,
            "vcpus": str(self.cfg.vcpus),
            "memory_mib": str(self.cfg.memory_mib),
            "kernel_file": self.cfg.kernel.name,
            "initrd": self.initrd_note,
            "guest_kernel": _manifest_kernel(self.spec.image.manifest_path),
            "disk": self._disk_words(),
            "storage": self._storage_words(),
            "network": (f"bridge {self._bridge.name}, tap {self.cfg.tap}, virtio-net, "
                        f"vhost={'on' if self.cfg.vhost else 'off'}"
                        if self._bridge else "none"),
            "agent": "virtio-serial org.isotax.agent",
            "numa": self._numa_words(),
            **self.knobs.words(),
        }
        if self.pinned:
            d["knob_pin"] = "on: " + ", ".join(self.pinned)
        vm = self._vm
        if vm is not None and vm.alive():
            try:
                cpus = vm.qmp_cmd("query-cpus-fast")
                d["vcpu_threads"] = ",".join(f"{c['cpu-index']}:{c['thread-id']}" for c in cpus)
            except Exception as e:  # describing must not fail a run
                d["vcpu_threads"] = f"unknown ({e})"
            d["qemu_pid"] = str(vm.proc.pid if vm.proc else "")
        if vm is not None and vm.command_line:
            d["command_line"] = vm.command_line
        return d

    def _numa_words(self) -> str:
        words = placement_words(self.spec.numa_node, "numactl around QEMU: every thread and "
                                "all its memory, guest RAM included", self.node_cpus)
        if self.spec.numa_node is not None and self._daemons:
            words += "; virtiofsd too"
        return words

    def _disk_words(self) -> str:
        if self.cfg.root_share is not None:
            sh = self.cfg.root_share
            return (f"none: the root file system is the image's rootfs over {sh.transport}, "
                    f"read-only ({sh.guest_options()})")
        return (f"virtio-blk, qcow2 overlay on raw ext4, cache={self.cfg.disk_cache}, "
                f"aio={self.cfg.disk_aio}" + (f" ({self.disk_note})" if self.disk_note else ""))

    def _storage_words(self) -> str:
        io = f"cache={self.cfg.disk_cache}, aio={self.cfg.disk_aio}"
        where = host_storage(Path(self.spec.workdir))
        if self.cfg.shares:
            vol = self.cfg.shares[0]
            # The guest accepts O_DIRECT (fio runs direct=1), but QEMU's 9p server clears it
            # (hw/9pfs get_dotl_openflags) and virtiofsd drops it (no allow_direct_io, Kata's
            # default): reads meet the host's page cache, which native O_DIRECT runs do not.
            server = "QEMU's 9p server" if vol.transport == "9p" else "virtiofsd"
            return (f"a host directory ({where}) shared over {vol.transport} "
                    f"({vol.guest_options()}), mounted at {VOLUME_DIR}; the guest's O_DIRECT "
                    f"stops at {server}, which reads through the host's page cache")
        if self.cfg.data_disk:
            return (f"virtio-blk raw disk, {io}: ext4 on a {self.data_disk_gib:g} GiB sparse "
                    f"file ({where}), mounted at {VOLUME_DIR}")
        return (f"root disk: virtio-blk qcow2 overlay on raw ext4, {io}; "
                f"data in {ROOTFS_DATA_DIR}")

    def host_pids(self) -> Sequence[int]:
        vm = self._vm
        pids = [vm.proc.pid] if vm is not None and vm.proc is not None and vm.alive() else []
        return pids + [d.proc.pid for d in self._daemons if d.proc is not None and d.alive()]

    def kernel_memory_bytes(self) -> int | None:
        return None  # qemu runs in the caller's cgroup: there is none of the VM's own

    def alive(self) -> str:
        if self._stopped:
            return "the VM was stopped"
        vm = self._vm
        if vm is None or vm.proc is None:
            return "the VM was never started"
        if (rc := vm.proc.poll()) is not None:
            return f"QEMU {exit_words(rc)}"
        for d in self._daemons:
            if d.proc is not None and (rc := d.proc.poll()) is not None:
                return f"virtiofsd (share {d.share.tag}) {exit_words(rc)}"
        return ""

    def pause(self) -> None:
        if self._vm is not None:
            self._vm.pause()

    def resume(self) -> None:
        if self._vm is not None:
            self._vm.resume()

    @stops_once
    def stop(self) -> None:
        """Stop the VM and its daemons; release hugepages, mounts, the tap and the bridge
        (Instance.stop's contract)."""
        out = Removals(f"{self.kind} VM {self.spec.name}")
        if self._vm is not None:
            out.attempt("QEMU", self._vm.stop)
        for d in self._daemons:
            out.attempt("a daemon of the VM's", d.stop)
        for b in self._binds:
            out.release(f"bind mount {b.target}", b.umount)
        if self._volume_dir is not None:
            volume = self._volume_dir
            out.attempt(f"volume {volume}", lambda: remove_tree(volume))
        if self._hugepages is not None:
            out.release("its hugepage reservation", self._hugepages.release)
        if self._bridge is not None:
            out.attempt(f"bridge {self._bridge.name} and its tap", self._bridge.down)
        out.done()


def _manifest_kernel(path: Path) -> str:
    import json

    try:
        k = json.loads(path.read_text()).get("kernel", {})
        return str(k.get("version", "")) if isinstance(k, dict) else str(k)
    except (OSError, ValueError):
        return ""


def vm_processes() -> list[Leftover]:
    """QEMU processes of isotax's VMs still running (their sockets, disks and names are
    itx-...), and a vm9p share's virtiofsd (its socket is /run/isotax/itx-vfs-*)."""
    return leftover_processes(
        lambda prog, args: (prog.startswith("qemu-system") or prog == "virtiofsd")
        and names_itx(args))


@register
class Qemu(EnvironmentBase):
    kind: ClassVar[str] = "qemu"
    # The accelerator (KVM or TCG, and why) is available()'s note, told for this host.
    description: ClassVar[str] = "a QEMU virtual machine booting the image's kernel"
    isolation: ClassVar[Isolation] = Isolation.VM

    instance_class: ClassVar[type[QemuInstance]] = QemuInstance
    # numa_node: QEMU under numactl (threads and memory on the node), pinning on its CPUs;
    # microvm and vm9p inherit it.
    supports_numa: ClassVar[bool] = True
    # Its VMs' processes, and hugepages reserved for a VM and never given back; microvm and
    # vm9p inherit them (the leak check calls each once).
    leak_finders: ClassVar[tuple[LeakFinder, ...]] = (vm_processes, leaked_hugepage_reservations)
    options: ClassVar[tuple[ParamSpec, ...]] = vm_options("pc")
    networks: ClassVar[tuple[str, ...]] = NETWORKS
    storages: ClassVar[tuple[str, ...]] = STORAGES  # a second virtio-blk disk, or the root disk

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        return VersionCommand("qemu", (QEMU, "--version"))

    @classmethod
    def doctor_notes(cls) -> list[str]:
        """The accelerator proven by a probe boot of the image (cached; up to 30 s the first
        time)."""
        return [f"qemu: {proven_accelerator().words()}"]

    def __init__(self, image: Any = None) -> None:
        self.image = image

    def available(self) -> Availability:
        try:
            for tool, pkg in ((QEMU, "qemu-system-x86"), (QEMU_IMG, "qemu-utils")):
                if shutil.which(tool) is None:
                    return Availability.no(f"{tool} not found",
                                           f"apt-get install {pkg}")
            if not qemu_version():
                return Availability.no(f"{QEMU} --version failed", "reinstall qemu-system-x86")
            if os.geteuid() != 0:
                return Availability.no("qemu needs root (tap devices, bridges)",
                                       "run isotax as root")
            # The current image, built or not (an image not built yet is no reason for
            # unavailability: the runner builds it).
            image = self.image if self.image is not None else current_image()
            root = Path(image.root) if image is not None else None
            if root is not None and (root / "manifest.json").exists() \
                    and not ((root / "vmlinux").exists() or (root / "vmlinuz").exists()):
                return Availability.no(f"the image at {root} has no kernel",
                                       "rebuild it: isotax image rm all; isotax image build")
            # ok, with what QEMU will use here and why as the note ("TCG here, because ...")
            return Availability(True, expected_accelerator(
                getattr(image, "recipe_hash", None)).words())
        except Exception as e:  # available() never raises
            return Availability.no(f"qemu: cannot check availability: {e}")

    def start(self, spec: EnvSpec) -> Instance:
        inst = self.instance_class(spec)
        inst.boot()
        return inst
