"""One QEMU process: its command line, its boot, its control channels, its teardown.

Layout of a VM's workdir (all relative, QEMU runs with the workdir as its cwd):
    disk.qcow2    copy-on-write overlay of the image's rootfs.ext4 (removed on stop)
    data.raw      the data disk (plan storage "volume"): a sparse raw file, ext4 (removed on
                  stop), the VM's second virtio-blk disk, serial DATA_SERIAL
    qmp.sock      QMP server (QEMU listens; the host drives it with the qemu.qmp library)
    agent.sock    the command agent's channel (the host listens; QEMU connects at startup)
    console.log   the serial console: kernel log, itx-init's messages, the ITX-READY marker
    qemu.log      QEMU's own stderr (why a VM failed to start or died)

The console is QEMU's stdout, read by a thread that writes console.log and timestamps the
first byte (milestone "kernel") and the ITX-READY line (milestone "first_instruction") as
they arrive, rather than polling a file.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qemu.qmp.legacy import QEMUMonitorProtocol

from isotax.environments.base import GUEST_ENV, Stopwatch, stops_once
from isotax.environments.vm.qemu_agent import AgentClient, AgentError, short_socket_path
from isotax.environments.vm.qemu_share import Share, share_argv
from isotax.host import command
from isotax.host.facts.numa import numactl_prefix
from isotax.image.artifacts import ImageArtifacts
from isotax.image.kernel import extract_vmlinux
from isotax.parsers import procfs
from isotax.protocols import Completed

QEMU = "qemu-system-x86_64"
QEMU_IMG = "qemu-img"
AGENT_PORT = "org.isotax.agent"
INIT = "/opt/isotax/bin/itx-init"
READY_MARKER = b"ITX-READY"
DATA_DISK = "data.raw"
DATA_SERIAL = "itxdata"  # the data disk's virtio serial: the guest finds it in /sys/block
# Lines in QEMU's stderr that mean the guest is dead although QEMU still runs (KVM pauses a
# VM after an internal error instead of exiting): waiting for the boot timeout is pointless.
_FATAL = re.compile(r"KVM internal error|emulation failure|KVM: entry failed|Assertion")


@dataclass(frozen=True)
class VmConfig:
    """What one VM is: everything its QEMU command line is made of."""

    accel: str  # "kvm" or "tcg"
    vcpus: int
    memory_mib: int
    kernel: Path
    initrd: Path | None
    backing: Path  # the image's raw ext4 disk
    disk_cache: str = "none"  # QEMU -drive cache=
    disk_aio: str = "native"  # QEMU -drive aio=
    tap: str | None = None  # host tap interface, or None for no NIC
    mac: str = "52:54:00:12:34:56"
    ip: str | None = None  # "10.213.0.5/24": configured by itx-init
    gateway: str | None = None
    hostname: str = "itx-vm"
    quiet: bool = False  # kernel log level on the console
    data_disk: bool = False  # attach the workdir's DATA_DISK as a second virtio-blk disk
    # -- machine type and tuning knobs (see qemu_tuning); the defaults are isotax's plain VM
    machine: str = "pc"  # "pc" (PCI devices, SeaBIOS) or "microvm" (virtio-mmio, no firmware)
    cpu_model: str | None = None  # None: host under KVM, max under TCG
    topology: tuple[int, int, int] | None = None  # sockets, cores, threads
    cache_info: bool = False  # host-cache-info=on
    hugepages_dir: str | None = None  # a hugetlbfs mount: guest RAM is a file there
    iothread: bool = False  # virtio-blk disks on a dedicated iothread
    vhost: bool = False  # vhost-net for the NIC
    numa: tuple[tuple[int, int, int], ...] = ()  # guest nodes: (host node, first, last vCPU)
    numa_node: int | None = None  # the plan's numa_node: all of QEMU bound to this host node
    # -- root file system: the qcow2 overlay disk, or a share (9p / virtio-fs) tagged ROOT_TAG
    root_share: Share | None = None
    shares: tuple[Share, ...] = ()  # more shares (a volume), mounted by the host's agent calls
    tsc_khz: int | None = None  # microvm: tsc_early_khz (the TSC calibration may hang without)
    modules: tuple[str, ...] = ()  # the minimal initrd loads these instead of its default set
    # -- parity with the host: the NIC's MTU as the host uplink's (virtio-net
    #    host_mtu, which the guest driver adopts) and the host's transparent hugepage mode
    mtu: int | None = None
    thp: str | None = None


def host_thp_mode(text: str) -> str | None:
    """The selected mode of /sys/kernel/mm/transparent_hugepage/enabled ("always [madvise]
    never" -> "madvise"); None when there is none. Pure."""
    return procfs.parse_selected(text)


def kernel_cmdline(cfg: VmConfig) -> str:
    if cfg.root_share is None:
        root = ["root=/dev/vda", "rw"]
    else:  # read by isotax's minimal initrd (qemu_initrd), which mounts the share as /
        sh = cfg.root_share
        root = [f"itx.root={sh.tag}", f"itx.rootfstype={sh.guest_fstype()}",
                f"itx.rootflags={sh.guest_options()}"]
    parts = ["console=ttyS0", *root, f"init={INIT}",
             # panic -> immediate reboot, which -no-reboot turns into QEMU exiting.
             "panic=-1", f"itx.hostname={cfg.hostname}"]
    if cfg.modules:
        parts.append("itx.mods=" + ",".join(cfg.modules))
    if cfg.tsc_khz:
        # microvm has no PIT/HPET to calibrate the TSC against: tell the kernel its rate.
        parts.append(f"tsc_early_khz={cfg.tsc_khz}")
        # ... and trust it as the clocksource: with no HPET or ACPI PM timer to check it
        # against, the kernel otherwise falls back to jiffies (4 ms steps), and every timer
        # in the guest (STREAM's, itx-time's) loses its resolution.
        parts.append("tsc=reliable")
    if cfg.thp:
        parts.append(f"transparent_hugepage={cfg.thp}")
    if cfg.quiet:
        parts.append("quiet")
    if cfg.ip:
        parts.append(f"itx.ip={cfg.ip}")
    if cfg.gateway:
        parts.append(f"itx.gw={cfg.gateway}")
    return " ".join(parts)


def _cpu_argv(cfg: VmConfig) -> list[str]:
    # TCG thread=multi: one host thread per vCPU (MTTCG), so -smp N really runs N vCPUs.
    accel = ["-accel", "kvm" if cfg.accel == "kvm" else "tcg,thread=multi"]
    model = cfg.cpu_model or ("host" if cfg.accel == "kvm" else "max")
    if cfg.cache_info:
        model += ",host-cache-info=on,l3-cache=on"
    smp = str(cfg.vcpus)
    if cfg.topology is not None:
        s, c, t = cfg.topology
        smp += f",sockets={s},cores={c},threads={t}"
    return [*accel, "-cpu", model, "-smp", smp]


def _memory_argv(cfg: VmConfig) -> list[str]:
    """Guest RAM: anonymous by default; a preallocated file on hugetlbfs (hugepages knob);
    shared memory where a vhost-user device (virtiofsd) must map it; with vNUMA, one backend
    per guest node bound to its host node."""
    shared = any(sh.transport == "virtiofs" for sh in (cfg.root_share, *cfg.shares) if sh)
    share = f"share={'on' if shared else 'off'}"
    if cfg.numa:
        out = ["-m", str(cfg.memory_mib)]
        sizes = numa_memory(cfg.memory_mib, len(cfg.numa))
        for i, ((node, first, last), mib) in enumerate(zip(cfg.numa, sizes, strict=True)):
            if cfg.hugepages_dir:
                kind = f"memory-backend-file,mem-path={cfg.hugepages_dir},prealloc=on"
            elif shared:
                kind = "memory-backend-memfd"
            else:
                kind = "memory-backend-ram"
            out += ["-object", f"{kind},id=mem{i},size={mib}M,{share},host-nodes={node},"
                               "policy=bind",
                    "-numa", f"node,nodeid={i},cpus={first}-{last},memdev=mem{i}"]
        return out
    size = f"size={cfg.memory_mib}M"
    if cfg.hugepages_dir:
        backend = (f"memory-backend-file,id=mem,{size},mem-path={cfg.hugepages_dir},"
                   f"prealloc=on,{share}")
    elif shared:
        backend = f"memory-backend-memfd,id=mem,{size},share=on"
    else:
        return ["-m", str(cfg.memory_mib)]
    return ["-m", str(cfg.memory_mib), "-object", backend]


def numa_memory(memory_mib: int, nodes: int) -> list[int]:
    """Guest RAM split over nodes in 2 MiB multiples (hugepage-sized), the rest on the last."""
    each = memory_mib // nodes // 2 * 2
    return [each] * (nodes - 1) + [memory_mib - each * (nodes - 1)]


def qemu_argv(cfg: VmConfig) -> list[str]:
    """The QEMU command line (golden-tested). Paths of the workdir's files are relative."""
    mmio = cfg.machine == "microvm"
    blk = "virtio-blk-device" if mmio else "virtio-blk-pci"
    machine = cfg.machine
    mem = _memory_argv(cfg)
    if "-object" in mem and not cfg.numa:
        machine += ",memory-backend=mem"
    io = ",iothread=io0" if cfg.iothread else ""
    # The plan's numa_node: QEMU runs under `numactl --cpunodebind=N --membind=N`, not with
    # `memory-backend-*,host-nodes=N,policy=bind`. The backend's policy binds guest RAM only;
    # numactl binds every thread QEMU will ever make (vCPUs, iothreads, the main loop, TCG's
    # translation threads: all inherit the affinity) and every page it allocates (guest RAM,
    # and TCG's code cache, device and block-layer buffers: the VM's cost lives there too),
    # before QEMU's first instruction, the same way the native baseline is bound. The pin
    # knob then narrows each vCPU thread to one CPU of that node (qemu_tuning).
    argv = [
        *numactl_prefix(cfg.numa_node), QEMU, "-name", "isotax,debug-threads=on",
        "-machine", machine, *_cpu_argv(cfg),
        *mem, "-nodefaults", "-nographic", "-no-reboot", "-no-user-config",
        *(["-object", "iothread,id=io0"] if cfg.iothread else []),
        "-kernel", str(cfg.kernel),
        *(["-initrd", str(cfg.initrd)] if cfg.initrd else []),
        "-append", kernel_cmdline(cfg),
    ]
    if cfg.root_share is None:
        argv += ["-drive", f"file=disk.qcow2,format=qcow2,if=none,id=root,"
                           f"cache={cfg.disk_cache},aio={cfg.disk_aio}",
                 "-device", f"{blk},drive=root{io}"]
    # The data disk: raw, same cache mode and AIO engine as the root disk.
    if cfg.data_disk:
        argv += ["-drive", f"file={DATA_DISK},format=raw,if=none,id=data,"
                           f"cache={cfg.disk_cache},aio={cfg.disk_aio}",
                 "-device", f"{blk},drive=data,serial={DATA_SERIAL}{io}"]
    for i, sh in enumerate(s for s in (cfg.root_share, *cfg.shares) if s is not None):
        argv += share_argv(sh, cfg.machine, i)
    argv += [
        # The console on QEMU's stdout; signal=off so that a Ctrl-C reaches isotax, not QEMU.
        "-chardev", "stdio,id=con,signal=off", "-serial", "chardev:con",
        "-qmp", "unix:qmp.sock,server=on,wait=off",
        "-device", "virtio-serial-device,id=vser" if mmio else "virtio-serial-pci,id=vser",
        "-chardev", "socket,id=agent,path=agent.sock",
        "-device", f"virtserialport,bus=vser.0,chardev=agent,name={AGENT_PORT}",
    ]
    if cfg.tap:
        # vhost=off where the host has no /dev/vhost-net (the vhost knob says which).
        argv += ["-netdev", f"tap,id=net0,ifname={cfg.tap},script=no,downscript=no,"
                            f"vhost={'on' if cfg.vhost else 'off'}",
                 "-device", f"{'virtio-net-device' if mmio else 'virtio-net-pci'},"
                            f"netdev=net0,mac={cfg.mac}"
                            + (f",host_mtu={cfg.mtu}" if cfg.mtu else "")]
    return argv


def direct_io_works(directory: Path) -> bool:
    """Whether files in directory can be opened with O_DIRECT (cache=none needs it; tmpfs
    refuses it)."""
    probe = directory / ".itx-odirect"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)
        os.close(fd)
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def make_data_disk(path: Path, size_gib: float) -> None:
    """A sparse raw file with an empty ext4 on it, made on the host before boot (the guest
    then only mounts it). The inode tables and the journal are written now
    (lazy_itable_init=0): otherwise the guest's ext4lazyinit thread would zero them in the
    background while fio measures. nodiscard: a file needs no TRIM at creation."""
    path.unlink(missing_ok=True)
    with open(path, "wb") as f:
        f.truncate(int(size_gib * (1 << 30)))
    p = command.run(["mkfs.ext4", "-q", "-F", "-L", DATA_SERIAL, "-E",
                     "nodiscard,lazy_itable_init=0,lazy_journal_init=0", str(path)], 300)
    if p.returncode != 0:
        path.unlink(missing_ok=True)
        raise BootError(f"mkfs.ext4 of the data disk failed: {(p.stderr or p.stdout).strip()}")


def mount_data_disk_script(mountpoint: str) -> str:
    """Guest shell: mount the disk whose virtio serial is DATA_SERIAL on mountpoint."""
    # sysfs' serial has no trailing newline: `read` then fails but still sets s.
    return (f'for b in /sys/block/vd*; do s=; read -r s < "$b/serial"; '
            f'[ "$s" = {DATA_SERIAL} ] && exec mount -t ext4 "/dev/${{b##*/}}" {mountpoint}; '
            f'done; echo "no virtio disk with serial {DATA_SERIAL}" >&2; exit 1')


class BootError(Exception):
    """The VM did not come up; the message says what was seen (QEMU's error, console tail)."""


class Console(threading.Thread):
    """Copies the serial console to console.log, noting when milestones appear: "kernel"
    (the kernel's first message) and "first_instruction" (itx-init's ITX-READY line: the
    guest's first user-space code, isotax's init)."""

    def __init__(self, stream: Any, log_path: Path, sw: Stopwatch) -> None:
        super().__init__(name="itx-qemu-console", daemon=True)
        self.stream = stream
        self.log_path = log_path
        self.sw = sw
        self.first_output = threading.Event()
        self.ready = threading.Event()
        self.ready_line = ""
        self.tail: deque[str] = deque(maxlen=30)

    def run(self) -> None:
        pending = b""
        with open(self.log_path, "wb") as log:
            while True:
                chunk = self.stream.read1(65536)
                if not chunk:
                    return
                log.write(chunk)
                log.flush()
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    line = raw.decode("utf-8", "replace").rstrip("\r")
                    self.tail.append(line)
                    # The kernel's first message (SeaBIOS prints before it on the console).
                    if not self.first_output.is_set() and b"Linux version" in raw:
                        self.sw.mark("kernel")
                        self.first_output.set()
                    if not self.ready.is_set() and READY_MARKER in raw:
                        self.sw.mark("first_instruction")
                        self.ready_line = line.strip()
                        self.ready.set()


class Vm:
    """A QEMU process started by boot() and always ended by stop() (idempotent)."""

    def __init__(self, cfg: VmConfig, workdir: Path, sw: Stopwatch,
                 on_started: Callable[[Vm], None] | None = None) -> None:
        self.cfg = cfg
        self.workdir = workdir
        self.sw = sw
        # Called once QMP answers, before the guest is waited for (vCPU pinning goes here,
        # so that the boot already runs pinned); an exception from it fails the boot.
        self.on_started = on_started
        self.proc: subprocess.Popen[bytes] | None = None
        self.command_line = ""  # QEMU's, shell-quoted, once booted
        self.qmp: QEMUMonitorProtocol | None = None
        self.agent: AgentClient | None = None
        self.console: Console | None = None
        self._listener: socket.socket | None = None
        self._qemu_log: Any = None
        self._stopped = False
        self.paused = False
        self.booted = False  # the agent has answered once
        self.guest_boot_ns: int | None = None  # guest CLOCK_BOOTTIME when the agent answered

    # -- boot ----------------------------------------------------------------------------------
    def boot(self, timeout: float) -> None:
        """Start QEMU and wait until the agent answers; BootError (after stop()) if not."""
        try:
            self._boot(timeout)
        except BaseException:
            self.stop()
            raise

    def _boot(self, timeout: float) -> None:
        wd = self.workdir
        wd.mkdir(parents=True, exist_ok=True)
        for name in ("disk.qcow2", "qmp.sock", "agent.sock"):
            (wd / name).unlink(missing_ok=True)
        if self.cfg.root_share is None:
            p = subprocess.run([QEMU_IMG, "create", "-q", "-f", "qcow2", "-F", "raw",
                                "-b", str(self.cfg.backing.resolve()), str(wd / "disk.qcow2")],
                               capture_output=True, text=True, check=False)
            if p.returncode != 0:
                raise BootError(f"qemu-img create failed: {p.stderr.strip()}")
        # The agent socket listens before QEMU starts: QEMU connects to it as a client.
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with short_socket_path(str(wd / "agent.sock")) as path:
            self._listener.bind(path)
        self._listener.listen(1)
        self._listener.settimeout(0.05)
        argv = qemu_argv(self.cfg)
        self.command_line = shlex.join(argv)
        (wd / "qemu.cmdline").write_text(self.command_line + "\n")
        self._qemu_log = open(wd / "qemu.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, cwd=wd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=self._qemu_log,
                                     start_new_session=True)
        self.sw.mark("create")
        assert self.proc.stdout is not None
        self.console = Console(self.proc.stdout, wd / "console.log", self.sw)
        self.console.start()
        deadline = time.monotonic() + timeout

        conn: socket.socket | None = None
        while conn is None:
            self._check_alive(deadline, "connecting the agent channel")
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
        self.agent = AgentClient(conn)

        while self.qmp is None:
            self._check_alive(deadline, "connecting QMP")
            if not (wd / "qmp.sock").exists():
                time.sleep(0.01)
                continue
            try:
                with short_socket_path(str(wd / "qmp.sock")) as path:
                    qmp = QEMUMonitorProtocol(path)
                    qmp.connect()
            except Exception:
                time.sleep(0.02)
                continue
            qmp.settimeout(10.0)
            qmp.cmd("query-status")
            self.qmp = qmp
        self.sw.mark("started")
        if self.on_started is not None:
            self.on_started(self)

        while not self.console.ready.is_set():
            self._check_alive(deadline, "waiting for ITX-READY on the console")
            self.console.ready.wait(0.05)
        # The marker comes just before the agent starts: ask it until it answers.
        while True:
            self._check_alive(deadline, "waiting for the guest agent")
            try:
                pong = self.agent.ping(max(0.1, deadline - time.monotonic()))
                self.guest_boot_ns = int(pong.get("uptime_ns", 0)) or None
                break
            except AgentError as e:
                if time.monotonic() >= deadline:
                    raise BootError(f"guest agent did not answer: {e}") from e
        self.sw.mark("ready")
        self.booted = True

    def _check_alive(self, deadline: float, doing: str) -> None:
        assert self.proc is not None
        rc = self.proc.poll()
        if rc is not None:
            raise BootError(f"QEMU exited with status {rc} while {doing}: {self.why()}")
        err = self._stderr_text()
        if _FATAL.search(err):
            raise BootError(f"guest crashed while {doing}: {self.why()}")
        if time.monotonic() >= deadline:
            raise BootError(f"no boot within the time limit while {doing}: {self.why()}")

    def _stderr_text(self) -> str:
        try:
            return (self.workdir / "qemu.log").read_text(errors="replace")
        except OSError:
            return ""

    def why(self) -> str:
        """QEMU's last error lines, else the console's last lines: the reason a boot failed."""
        err = [ln.strip() for ln in self._stderr_text().splitlines() if ln.strip()]
        fatal = [ln for ln in err if _FATAL.search(ln)]
        if fatal:  # the register dump that follows a KVM error says nothing to a reader
            return "; ".join(fatal)[-400:]
        if err:
            return " | ".join(err[-3:])[-400:]
        tail = [ln for ln in (self.console.tail if self.console else []) if ln.strip()]
        if tail:
            return "console: " + " | ".join(tail[-3:])[-400:]
        return "no output on the console"

    # -- running -------------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and not self._stopped

    def exec(self, argv: Sequence[str], timeout: float,
             env: Mapping[str, str] | None = None) -> Completed:
        if not self.alive() or self.agent is None:
            return Completed(tuple(argv), 255, "", f"the VM is not running: {self.why()}", 0.0)
        try:
            return self.agent.exec(argv, timeout, env if env is not None else GUEST_ENV)
        except AgentError as e:
            state = "running" if self.alive() else f"exited {self.proc and self.proc.poll()}"
            return Completed(tuple(argv), 255, "",
                             f"guest agent failed ({e}); QEMU {state}: {self.why()}", 0.0)

    def stat_open(self, interval_s: float) -> str | None:
        """isotax.protocols.GuestStat: see AgentClient.stat_open; None when the VM or its
        agent cannot."""
        if not self.alive() or self.agent is None:
            return None
        try:
            return self.agent.stat_open(interval_s)
        except AgentError:
            return None

    def stat_close(self) -> tuple[str, str] | None:
        if not self.alive() or self.agent is None:
            return None
        try:
            return self.agent.stat_close()
        except AgentError:
            return None

    def qmp_cmd(self, cmd: str, **args: object) -> Any:
        if self.qmp is None:
            raise BootError("QMP is not connected")
        return self.qmp.cmd(cmd, **args)

    def pause(self) -> None:
        if self.alive() and not self.paused:
            self.qmp_cmd("stop")
            self.paused = True

    def resume(self) -> None:
        if self.alive() and self.paused:
            self.qmp_cmd("cont")
            self.paused = False

    # -- teardown ------------------------------------------------------------------------------
    @stops_once
    def stop(self) -> None:
        """Power off (agent), else QMP quit, else SIGKILL of our own QEMU; remove the overlay
        and sockets. Idempotent, never raises."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            if self.agent is not None and self.booted and not self.paused:
                with contextlib.suppress(Exception):
                    self.agent.shutdown()
                    proc.wait(5)
            if proc.poll() is None and self.qmp is not None:
                with contextlib.suppress(Exception):
                    self.qmp.settimeout(3.0)
                    self.qmp.cmd("quit")
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)  # only the QEMU this object started
                proc.wait()
        if self.qmp is not None:
            with contextlib.suppress(Exception):
                self.qmp.close()
        if self.agent is not None:
            self.agent.close()
        if self._listener is not None:
            self._listener.close()
        if self.console is not None:
            self.console.join(5)
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
        if self._qemu_log is not None:
            self._qemu_log.close()
        for name in ("disk.qcow2", DATA_DISK, "qmp.sock", "agent.sock"):
            with contextlib.suppress(OSError):
                (self.workdir / name).unlink()


def select_kernel(image: ImageArtifacts, choice: str = "auto") -> Path:
    """The kernel file to boot. "vmlinux" (the default under "auto") is the uncompressed ELF:
    under TCG a bzImage spends seconds decompressing itself. It is extracted from vmlinuz and
    cached next to the image when the image build did not leave one."""
    vmlinuz = image.root / "vmlinuz"
    if choice == "vmlinuz":
        return vmlinuz
    if choice not in ("auto", "vmlinux"):
        raise ValueError(f"kernel {choice!r}: use auto, vmlinux or vmlinuz")
    vmlinux = image.kernel
    if not vmlinux.exists() and vmlinuz.exists():
        tmp = vmlinux.with_name(f".vmlinux.tmp-{os.getpid()}")
        try:
            if extract_vmlinux(vmlinuz, tmp):
                os.replace(tmp, vmlinux)  # atomic: a concurrent reader sees all or nothing
        finally:
            tmp.unlink(missing_ok=True)
    if vmlinux.exists():
        return vmlinux
    if choice == "vmlinux":
        raise ValueError(f"no uncompressed kernel could be extracted from {vmlinuz}")
    return vmlinuz


@functools.cache
def qemu_version() -> str:
    """"7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)", or "" when QEMU is missing."""
    out = command.run([QEMU, "--version"], 30).stdout
    m = re.search(r"version\s+(.+)", out.splitlines()[0] if out else "")
    return m.group(1).strip() if m else ""
