"""nspawn: a system container (the Linux analog of the seed study's Zones). systemd-nspawn
boots the workload image with its own init, systemd, as PID 1 of the container, and the
workloads run inside it next to that init, as they would in a small OS instance.

- Root: the image rootfs read-only with a bind-mounted host directory at /mnt (storage
  "volume"), or an overlayfs over it (storage "rootfs"), as for runc. /tmp is a tmpfs.
- Network: the host's (network "host"), or isotax's bridge + NAT namespace (network "bridge"),
  joined with --network-namespace-path.
- Init: the image's systemd boots to multi-user.target. The image's own servers (redis,
  MariaDB, netserver) and its periodic jobs (apt, e2scrub, fstrim timers) are masked on the
  init's command line: the workloads start their own servers on isotax's ports, and a timer
  firing in the middle of a measurement would be noise. describe() lists what is masked.
- cgroups: this host runs no systemd, so nspawn registers nothing (--register=no,
  --keep-unit) and would leave the container in the caller's cgroups. isotax gives each
  container its own group in every v1 hierarchy (and the v2 one of a hybrid host) before
  nspawn starts: it is what memory and CPU limits, the freezer (pause), the footprint's kernel
  memory and the leak check work on. Commands run with nsenter into all of the container's
  namespaces and join its groups first.
- NUMA placement (the plan's numa_node): the container's own cpuset group gets the node's CPUs
  and memory node, so its init, everything it starts and every command isotax execs (they
  join the groups first) run and allocate there. Where the host has no cpuset group to give
  (cgroup v2 without the cpuset controller delegated), systemd-nspawn and every nsenter run
  under numactl instead, which the processes they exec inherit.
- Phases: create (nspawn is asked), started (the container's init runs: its PID 1 exists),
  first_instruction (the container's PID 1 has become the image's systemd: the image's
  own code runs), ready
  (`systemctl is-system-running` says running or degraded: the boot finished).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from isotax.environments.base import (
    GUEST_ENV,
    EnvironmentBase,
    Removals,
    Stopwatch,
    bound_cpus,
    exit_words,
    limit_words,
    log_tail,
    process_gone,
    register,
    start_or_undo,
    stops_once,
)
from isotax.environments.container_fs import (
    SCRATCH,
    VOLUME_DIR,
    ContainerStorage,
    image_rootfs,
)
from isotax.host import command, owners
from isotax.host.facts.cgroups import remove_cgroup_tree
from isotax.host.facts.numa import numactl_prefix
from isotax.host.network import (
    BridgeSeat,
)
from isotax.host.processes import leftover_processes, names_itx
from isotax.parsers import procfs
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
    SocketStack,
    Unavailable,
    VersionCommand,
)
from isotax.telemetry.footprint import cgroup_kernel_bytes

NSPAWN = "systemd-nspawn"
CGROUP_ROOT = Path("/sys/fs/cgroup")
# The image's own daemons and periodic jobs: masked, see the module docstring.
MASKED = ("redis-server.service", "mariadb.service", "netperf.service",
          "e2scrub_reap.service", "apt-daily.timer", "apt-daily-upgrade.timer",
          "dpkg-db-backup.timer", "e2scrub_all.timer", "fstrim.timer")
BOOT_TIMEOUT_S = 120.0


def cgroup_dirs(name: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """The container's own group in every hierarchy this host mounts (v1 controllers, v1's
    name=systemd, the hybrid v2 mount); a pure v2 host has one."""
    if (root / "cgroup.controllers").exists():
        return [root / name]
    return [d / name for d in sorted(root.iterdir())
            if d.is_dir() and not d.is_symlink() and (d / "cgroup.procs").exists()]


def nspawn_argv(*, machine: str, root: Path, readonly: bool, volume: Path | None,
                netns: str | None) -> list[str]:
    """The systemd-nspawn command line (pure; golden-tested)."""
    argv = [NSPAWN, "--quiet", "--register=no", "--keep-unit", f"--machine={machine}",
            f"--directory={root}", "--console=read-only", f"--tmpfs={SCRATCH}",
            "--resolv-conf=off", "--timezone=off", "--link-journal=no"]
    if readonly:
        argv.append("--read-only")
    if volume is not None:
        argv.append(f"--bind={volume}:{VOLUME_DIR}")
    if netns is not None:
        argv.append(f"--network-namespace-path={netns}")
    argv += ["--boot", "--", "systemd.show_status=1", "systemd.unit=multi-user.target",
             *(f"systemd.mask={u}" for u in MASKED)]
    return argv


def join_cgroups_script(dirs: Sequence[Path]) -> str:
    """sh that moves itself into the container's groups, then execs its arguments."""
    moves = "; ".join(f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in dirs)
    return f'{moves}; exec "$@"'


def parse_nspid_leader(status: str) -> bool:
    """Whether a /proc/PID/status is that of a PID 1 in a child PID namespace."""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            ids = line.split()[1:]
            return len(ids) >= 2 and ids[-1] == "1"
    return False


@functools.cache
def _nspawn_version() -> str:
    """Asked once: describe() runs on every load-generator lookup."""
    lines = command.run([NSPAWN, "--version"], 10).stdout.splitlines()
    return lines[0] if lines else NSPAWN


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class NspawnInstance:
    scratch = SCRATCH
    socket_stack: SocketStack = SocketStack.LINUX

    def __init__(self, spec: EnvSpec) -> None:
        self.spec = spec
        self.tag = owners.new_tag(3)
        self.machine = f"itx-{spec.name[:20]}-{self.tag}"
        self.command_line = ""  # systemd-nspawn's, once started
        self.network = spec.network
        self.storage = spec.storage
        self.address = "127.0.0.1"
        self.fs = ContainerStorage(spec.workdir, self.machine, spec.storage)
        self.data_dir = self.fs.data_dir
        self.milestones: Mapping[str, float] = {}
        self.log = spec.workdir / f"{self.machine}.console"
        self._cgroups = cgroup_dirs(self.machine)
        self._proc: subprocess.Popen[bytes] | None = None
        self._leader: int | None = None
        self._seat: BridgeSeat | None = None  # its place on a bridge (network "bridge")
        self._stopped = False
        self._paused = False
        # NUMA placement: "cpuset" (the container's group) or "numactl" (no cpuset group here),
        # decided once the groups exist; the node's CPUs (the first vcpus of them where the
        # plan limits the count).
        self.numa_how = ""
        self.node_cpus = bound_cpus("nspawn", spec)
        start_or_undo(self._start, self.stop)

    # -- start ---------------------------------------------------------------------------
    def _start(self) -> None:
        sw = Stopwatch(self.spec.requested_at)
        spec = self.spec
        rootfs = image_rootfs(spec, "lib/systemd/systemd", "the image has no systemd to boot")
        # spec.network is of the kind's declared networks: the plan refuses any other at load.
        netns = None
        if spec.network == "bridge":
            self._seat = BridgeSeat.take(self.tag)
            netns, self.address = self._seat.netns, self._seat.address
        root = self.fs.root(rootfs)
        self._make_cgroups()
        argv = nspawn_argv(machine=self.machine, root=root, readonly=spec.storage == "volume",
                           volume=self.fs.volume, netns=netns)
        argv = [*self._numactl(), *argv]
        self.command_line = shlex.join(argv)
        (spec.workdir / f"{self.machine}.cmdline").write_text(self.command_line + "\n")
        sw.mark("create")
        with open(self.log, "wb") as log:
            self._proc = subprocess.Popen(
                ["sh", "-c", join_cgroups_script(self._cgroups), "sh", *argv],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        deadline = time.monotonic() + float(spec.options.get("boot_timeout", BOOT_TIMEOUT_S))
        while self._leader is None:
            self._check_alive(deadline, "waiting for the container's init")
            self._leader = self._find_leader()
            if self._leader is None:
                time.sleep(0.005)
        sw.mark("started")
        # The leader is nspawn's inner child until it execs the image's init: from then on
        # its name is the init's.
        while _comm(self._leader) != "systemd":
            self._check_alive(deadline, "waiting for the image's init to start")
            time.sleep(0.002)
        sw.mark("first_instruction")
        while True:
            self._check_alive(deadline, "waiting for the boot to finish")
            state = self.exec(["systemctl", "is-system-running"], 10).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.05)
        sw.mark("ready")
        self.boot_state = state
        self.milestones = dict(sw.marks)

    def _make_cgroups(self) -> None:
        for d in self._cgroups:
            d.mkdir(exist_ok=True)
        node = self.spec.numa_node
        for d in self._cgroups:
            # A v1 cpuset group starts empty: give it the parent's CPUs and nodes (or the
            # plan's vCPUs, or its NUMA node's CPUs and memory) before any process may join.
            if d.parent.name == "cpuset":
                cpus = (d.parent / "cpuset.cpus").read_text().strip()
                mems = (d.parent / "cpuset.mems").read_text().strip()
                if self.node_cpus is not None:
                    cpus, mems, self.numa_how = self.node_cpus, str(node), "cpuset"
                elif self.spec.vcpus:
                    cpus = f"0-{self.spec.vcpus - 1}"
                (d / "cpuset.cpus").write_text(cpus)
                (d / "cpuset.mems").write_text(mems)
            elif (self.node_cpus is not None and d.parent == CGROUP_ROOT
                  and (d / "cpuset.cpus").exists()):
                # cgroup v2 with the cpuset controller: empty files mean the parent's.
                (d / "cpuset.cpus").write_text(self.node_cpus)
                (d / "cpuset.mems").write_text(str(node))
                self.numa_how = "cpuset"
            if d.parent.name == "memory" and self.spec.memory_mib:
                (d / "memory.limit_in_bytes").write_text(str(self.spec.memory_mib << 20))
        if node is not None and not self.numa_how:
            if shutil.which("numactl") is None:
                raise Unavailable(Availability.no(
                    "nspawn: numa_node needs a cpuset cgroup or numactl, and this host has "
                    "neither", "apt-get install numactl (scripts/setup.sh)"))
            self.numa_how = "numactl"

    def _numactl(self) -> list[str]:
        """numactl's prefix where the placement is not the cpuset group's (else none)."""
        return numactl_prefix(self.spec.numa_node) if self.numa_how == "numactl" else []

    def _find_leader(self) -> int | None:
        """The container's PID 1 (the image's systemd): a process in its groups that is PID 1
        of its own PID namespace."""
        for pid in self.host_pids():
            with contextlib.suppress(OSError):
                if parse_nspid_leader(Path(f"/proc/{pid}/status").read_text()):
                    return pid
        return None

    def _check_alive(self, deadline: float, doing: str) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise Unavailable(Availability.no(
                f"systemd-nspawn exited {self._proc.returncode} while {doing}: "
                f"{self._log_tail()}", f"see {self.log}"))
        if time.monotonic() > deadline:
            raise Unavailable(Availability.no(f"timed out {doing}: {self._log_tail()}",
                                              f"see {self.log}"))

    def _log_tail(self) -> str:
        return log_tail(self.log)

    # -- the protocol -----------------------------------------------------------------------
    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        if self._leader is None:
            return Completed(tuple(argv), 127, "", "the container is not running", 0.0)
        if self._paused:
            # A command joining a frozen group would freeze with it, beyond any timeout's
            # reach (a frozen process cannot die): refuse, as `runc exec` does.
            return Completed(tuple(argv), 126, "", "the container is paused", 0.0)
        env = [f"{k}={v}" for k, v in {**GUEST_ENV, "TMPDIR": SCRATCH}.items()]
        cmd = ["sh", "-c", join_cgroups_script(self._cgroups), "sh", *self._numactl(),
               "nsenter", f"--target={self._leader}", "--all", "--root", "--wd=/", "--",
               "env", "-i", *env, *argv]
        done = command.run(cmd, timeout)
        return Completed(tuple(argv), done.returncode, done.stdout, done.stderr, done.wall_s)

    def facts(self) -> Facts:
        return Facts.seated("nspawn", self.network, _nspawn_version(),
                            self._seat.bridge.name if self._seat else "", self.spec.memory_mib,
                            self.spec.vcpus, self._words())

    def _words(self) -> dict[str, str]:
        return {
            "command_line": self.command_line,
            "machine": self.machine,
            "init": "the image's systemd (boots multi-user.target)",
            "masked": ", ".join(MASKED),
            "network": self.network,
            "address": self.address,
            **limit_words(self.spec, self.node_cpus, self.numa_how),
            "rootfs": self.fs.rootfs_words(SCRATCH),
            "storage": self.fs.words(),
            "cgroups": "own group per hierarchy (isotax; the host has no systemd)",
        }

    def host_pids(self) -> Sequence[int]:
        pids: set[int] = set()
        for d in self._cgroups:
            with contextlib.suppress(OSError, ValueError):
                pids |= set(procfs.parse_pids((d / "cgroup.procs").read_text()))
            # nspawn and the container's own systemd make groups below this one.
            for sub in d.rglob("cgroup.procs") if d.is_dir() else ():
                with contextlib.suppress(OSError, ValueError):
                    pids |= set(procfs.parse_pids(sub.read_text()))
        return sorted(pids)

    def kernel_memory_bytes(self) -> int | None:
        v1 = next((d for d in self._cgroups if d.parent.name == "memory"), None)
        v2 = next((d for d in self._cgroups if d.parent == CGROUP_ROOT), None)
        return cgroup_kernel_bytes(v1, v2)

    def alive(self) -> str:
        if self._stopped:
            return "the container was stopped"
        if self._proc is not None and (rc := self._proc.poll()) is not None:
            return f"systemd-nspawn {exit_words(rc)}"
        if self._leader is not None and (gone := process_gone(self._leader)):
            return f"the container's init (pid {self._leader}) {gone}"
        return ""

    def _freezer(self, state: str) -> None:
        d = next((d for d in self._cgroups if d.parent.name == "freezer"), None)
        if d is None:
            return
        (d / "freezer.state").write_text(state)
        for _ in range(2000):
            if (d / "freezer.state").read_text().strip() == state:
                return
            time.sleep(0.001)

    def pause(self) -> None:
        self._paused = True
        self._freezer("FROZEN")

    def resume(self) -> None:
        self._freezer("THAWED")
        self._paused = False

    @stops_once
    def stop(self) -> None:
        """An orderly poweroff (nspawn turns SIGTERM into one), then SIGKILL for whatever is
        left in the container's groups; network, storage and groups removed. Idempotent."""
        out = Removals(f"nspawn machine {self.machine}")
        out.attempt("its processes", self._end_processes)
        for d in self._cgroups:
            out.attempt(f"cgroup {d}", functools.partial(remove_cgroup_tree, d))
        if self._seat is not None:
            out.attempt(f"bridge {self._seat.bridge.name}", self._seat.release)
        self.fs.remove(out)
        out.done()

    def _end_processes(self) -> None:
        with contextlib.suppress(Exception):
            self.resume()
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(10)
        for _ in range(50):
            left = self.host_pids()
            if not left:
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)
        if left := self.host_pids():
            raise RuntimeError(f"processes {left} outlived SIGKILL")


def nspawn_leaks() -> list[Leftover]:
    """systemd-nspawn processes still running a machine of isotax's (itx-...). Its cgroups,
    overlay and bridge carry itx- names the host-wide finders see."""
    return leftover_processes(lambda prog, args: prog == NSPAWN and names_itx(args))


@register
class Nspawn(EnvironmentBase):
    kind: ClassVar[str] = "nspawn"
    description: ClassVar[str] = ("system container: systemd-nspawn boots the image's own init "
                                  "(systemd); host or bridge+NAT net")
    isolation: ClassVar[Isolation] = Isolation.CONTAINER
    # numa_node: the node's CPUs and memory in the container's cpuset group (numactl around
    # nspawn and every exec where the host has no cpuset group).
    supports_numa: ClassVar[bool] = True
    leak_finders: ClassVar[tuple[LeakFinder, ...]] = (nspawn_leaks,)
    options: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("boot_timeout", float, BOOT_TIMEOUT_S, "seconds the image's systemd may take "
                  "to finish booting", minimum=1),)
    networks: ClassVar[tuple[str, ...]] = ("host", "bridge")  # no empty-netns mode (yet)
    storages: ClassVar[tuple[str, ...]] = STORAGES  # read-only root + volume, or an overlay

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        return VersionCommand(NSPAWN, (NSPAWN, "--version"))

    def available(self) -> Availability:
        if shutil.which(NSPAWN) is None:
            return Availability.no("systemd-nspawn is not installed",
                                   "apt-get install systemd-container (scripts/setup.sh)")
        if os.geteuid() != 0:
            return Availability.no("needs root", "run isotax as root")
        return Availability.yes()

    def start(self, spec: EnvSpec) -> Instance:
        return NspawnInstance(spec)
