"""One OCI container (OciInstance) of runc, crun or runsc, and the base class of the OCI
runtime kinds (OciEnvironment; runc.py and crun.py register theirs, gvisor.py its own).

The container's PID 1 is the image's `itx-ready --hold` (prints the ready marker, then holds
the container open); workloads run through `<runtime> exec`. The bundle is bundle.py's, the
runtime's command line runtime.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from isotax.environments.base import (
    GUEST_ENV,
    READY_HELPER,
    READY_MARKER,
    EnvironmentBase,
    Removals,
    Stopwatch,
    bound_cpus,
    limit_words,
    log_tail,
    parse_ready_marker,
    remove_tree,
    start_or_undo,
    stops_once,
)
from isotax.environments.container_fs import (
    SCRATCH,
    VOLUME_DIR,
    ContainerStorage,
    image_rootfs,
)
from isotax.environments.oci.bundle import (
    STORAGES,
    bundle_config,
    new_container_id,
    write_bundle,
)
from isotax.environments.oci.runtime import Runtime, probe
from isotax.environments.runtime_cli import exec_not_found
from isotax.host import command
from isotax.host.network import (
    BridgeSeat,
)
from isotax.parsers import procfs
from isotax.protocols import (
    Availability,
    Completed,
    EnvSpec,
    Facts,
    Instance,
    Isolation,
    ParamSpec,
    SocketStack,
    Unavailable,
    VersionCommand,
)
from isotax.telemetry.footprint import cgroup_kernel_bytes

# -- the network ---------------------------------------------------------------------------------

# -- the instance --------------------------------------------------------------------------------

FREEZE_WAIT_S = 2.0  # a cgroup still FREEZING after this is thawed and left to the runtime


class OciInstance:
    scratch = SCRATCH
    socket_stack: SocketStack = SocketStack.LINUX  # the host's kernel, in the container's netns
    # pause()/resume() write the container's freezer cgroup themselves (see _set_frozen);
    # gVisor's pause is the sandbox's own, through runsc.
    freezes_its_cgroup: ClassVar[bool] = True

    def __init__(self, runtime: Runtime, spec: EnvSpec) -> None:
        self.rt = runtime
        self.command_line = ""  # the runtime command that started it
        self.spec = spec
        self.cid = new_container_id(spec.name)
        self.bundle = spec.workdir / f"bundle-{self.cid}"
        self.log = spec.workdir / f"{self.cid}.log"
        self.network = spec.network
        self._seat: BridgeSeat | None = None  # its place on a bridge (network "bridge")
        self._stopped = False
        # The container's init process (pid, start time in ticks), from the runtime's state
        # the first time alive() is asked: see alive().
        self._init: tuple[int, int] | None = None
        self.address = "127.0.0.1"
        # Storage (container_fs.ContainerStorage): the volume, or the overlay root.
        self.storage = spec.storage
        self.fs = ContainerStorage(spec.workdir, self.cid, spec.storage)
        self.data_dir = self.fs.data_dir
        self.milestones: Mapping[str, float] = {}
        # NUMA placement: the node's CPUs (the first vcpus of them where the plan limits the
        # count) and its memory, as the container's cpuset.
        self.node_cpus = bound_cpus(self.rt.name, spec)
        start_or_undo(self._start, self.stop)

    def _start(self) -> None:
        sw = Stopwatch(self.spec.requested_at)
        spec = self.spec
        rootfs = image_rootfs(spec, "bin", "the image rootfs is missing or empty")
        # spec.network and spec.storage are of the kind's declared networks and storages: the
        # plan refuses any other at load.
        netns: str | None = None
        if spec.network == "bridge":
            self._seat = BridgeSeat.take(self.cid.rsplit("-", 1)[1])
            netns, self.address = self._seat.netns, self._seat.address
        elif spec.network == "none":
            netns = "new"  # a network namespace of its own with only loopback in it
            self.address = ""  # nothing outside can reach it
        helper = rootfs / READY_HELPER.lstrip("/")
        # Until the image carries itx-ready, `sleep infinity` holds the container open; then
        # "ready" means the runtime reports the container running.
        self.hold = [READY_HELPER, "--hold"] if helper.exists() else ["sleep", "infinity"]
        root, mounts = self._storage(rootfs)
        cpuset = None
        if self.node_cpus is not None:
            cpuset = (self.node_cpus, str(spec.numa_node))
        write_bundle(self.bundle, bundle_config(
            root=root, args=self.hold, hostname=self.cid[:63], cgroups_path=f"/{self.cid}",
            network=netns, vcpus=spec.vcpus, memory_mib=spec.memory_mib,
            readonly=self.storage != "rootfs", extra_mounts=mounts, cpuset=cpuset))
        sw.mark("create")
        # Detached: the container's PID 1 inherits the log file as stdout/stderr (so do the
        # runtime's own error messages, which is where a failure is explained).
        run = ("run", "--detach", "--bundle", str(self.bundle), self.cid)
        self.command_line = shlex.join(self.rt.argv(*run)) + f"  # OCI config: {self.bundle}" \
            "/config.json"
        with open(self.log, "w") as log:
            p = self.rt.popen(*run, stdout=log, stderr=log)
            try:
                rc = p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                rc = 124
        sw.mark("started")
        if rc != 0:
            raise Unavailable(Availability.no(
                f"{self.rt.name} run failed ({rc}): {self._log_tail()}",
                f"check `{self.rt.name} --version` and the bundle in {self.bundle}"))
        ready_ns = self._wait_ready(timeout=30)
        seen = sw.mark("ready")
        sw.marks["first_instruction"] = seen
        if ready_ns is not None and sw.t0 < ready_ns / 1e9 <= time.monotonic():
            # itx-ready stamps its marker with CLOCK_MONOTONIC (the clock of time.monotonic):
            # the moment user code ran, free of this loop's polling delay. It can come before
            # "started": `run --detach` returns after the container's PID 1 is running.
            sw.marks["first_instruction"] = ready_ns / 1e9 - sw.t0
        self.milestones = dict(sw.marks)

    def _storage(self, rootfs: Path) -> tuple[Path, list[dict[str, Any]]]:
        """The bundle's root and extra mounts for the plan's storage (ContainerStorage): the
        volume is a bind mount of the bundle. Only storage "rootfs" gets the overlay: the
        read-only image root is every other workload's environment (and its start time), and
        an overlay mount would add a mount and a writable root to them for no measured
        purpose."""
        root = self.fs.root(rootfs)
        if self.fs.volume is None:
            return root, []
        return root, [{"destination": VOLUME_DIR, "type": "bind",
                       "source": str(self.fs.volume), "options": ["rbind", "rw"]}]

    def _log_tail(self) -> str:
        return log_tail(self.log)

    def state(self) -> str:
        p = self.rt.call("state", self.cid, timeout=10)
        try:
            return str(json.loads(p.stdout).get("status", "unknown"))
        except ValueError:
            return "gone"

    def _wait_ready(self, timeout: float) -> int | None:
        """Wait for the ready marker (or, without itx-ready, for state "running"); return the
        marker's CLOCK_MONOTONIC stamp in ns when there is one."""
        deadline = time.monotonic() + timeout
        uses_marker = self.hold[0] == READY_HELPER
        checks = 0
        while time.monotonic() < deadline:
            if uses_marker:
                text = self.log.read_text(errors="replace")
                if READY_MARKER in text:
                    return parse_ready_marker(text)
            checks += 1
            # Asking the runtime costs a process; do it only now and then (and always when no
            # marker is expected).
            if not uses_marker or checks % 50 == 0:
                st = self.state()
                if st == "running" and not uses_marker:
                    return None
                if st not in ("running", "created", "paused"):
                    raise Unavailable(Availability.no(
                        f"container {self.cid} is {st} before it was ready: {self._log_tail()}"))
            time.sleep(0.002)
        raise Unavailable(Availability.no(
            f"container {self.cid} not ready within {timeout:.0f} s: {self._log_tail()}"))

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        t0 = time.monotonic()
        envs = [a for k, v in {**GUEST_ENV, "TMPDIR": SCRATCH}.items()
                for a in ("--env", f"{k}={v}")]
        try:
            p = self.rt.popen("exec", *envs, "--cwd", "/", self.cid, *argv)
        except OSError as e:
            return Completed(tuple(argv), 127, "", str(e), time.monotonic() - t0)
        try:
            out, err = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            # A non-terminal `exec` forwards signals to the process: TERM it, then kill.
            p.send_signal(signal.SIGTERM)
            try:
                out, err = p.communicate(timeout=3)
            except subprocess.TimeoutExpired:
                command.kill_group(p)
                out, err = command.drain(p)
            rc, err = 124, f"timed out after {timeout:.0f} s\n{err}"
        wall = time.monotonic() - t0
        if rc != 0 and rc != 124 and exec_not_found(err):
            rc = 127
        return Completed(tuple(argv), rc, out, err, wall)

    def facts(self) -> Facts:
        return Facts.seated(self.rt.name, self.network, f"{self.rt.name} {self.rt.version()}",
                            self._seat.bridge.name if self._seat else "", self.spec.memory_mib,
                            self.spec.vcpus, self._words())

    def _words(self) -> dict[str, str]:
        return {
            "command_line": self.command_line,
            "container": self.cid,
            "network": self.network,
            "address": self.address,
            **limit_words(self.spec, self.node_cpus, "cpuset"),
            "seccomp": "none",
            "rootfs": self.fs.rootfs_words("/tmp /run /dev/shm"),
            "storage": self.fs.words(),
            "cgroup_workaround": "private mount ns without /sys/fs/cgroup/unified"
            if self.rt.preexec else "none",
            "pid1": " ".join(self.hold),
        }

    def _cgroup_dirs(self) -> tuple[Path | None, Path | None]:
        """The container's cgroup (cgroups_path "/<cid>"): v1's memory hierarchy, v2's."""
        v1 = Path("/sys/fs/cgroup/memory") / self.cid
        v2 = Path("/sys/fs/cgroup") / self.cid
        return (v1 if v1.is_dir() else None,
                v2 if (v2 / "cgroup.procs").exists() else None)

    def host_pids(self) -> Sequence[int]:
        # Every process of the container is in its cgroup; `runc run --detach` leaves no shim.
        for d in self._cgroup_dirs():
            if d is not None:
                with contextlib.suppress(OSError, ValueError):
                    return procfs.parse_pids((d / "cgroup.procs").read_text())
        return []

    def kernel_memory_bytes(self) -> int | None:
        return cgroup_kernel_bytes(*self._cgroup_dirs())

    def alive(self) -> str:
        if self._stopped:
            return "the container was stopped"
        # The runner asks before every resume: a runtime call costs a process (~10 ms), /proc
        # microseconds. The init process alive with the same start time is what `runc state`
        # and `crun state` check themselves; only when it is not are they asked, for the words.
        if self._init is None:
            self._init = self._init_process()
        if self._init is not None and same_process(*self._init):
            return ""
        try:
            st = self.state()  # runc and crun check the container's init process
        except Exception as e:
            return f"{self.rt.name} state failed: {e}"
        return "" if st in ("running", "paused") else \
            f"the container is {st} ({self.rt.name} state {self.cid})"

    def _init_process(self) -> tuple[int, int] | None:
        p = self.rt.call("state", self.cid, timeout=10)
        try:
            pid = int(json.loads(p.stdout).get("pid", 0))
            started = procfs.parse_pid_stat(Path(f"/proc/{pid}/stat").read_text()).starttime
        except (ValueError, TypeError, OSError):
            return None
        return (pid, started) if pid > 0 else None

    def pause(self) -> None:
        self._freeze(True)

    def resume(self) -> None:
        self._freeze(False)

    def _freeze(self, frozen: bool) -> None:
        """Through the cgroup's freezer where the runtime's own pause would not do, else the
        runtime's pause or resume."""
        if self.freezes_its_cgroup and self._set_frozen(frozen):
            return
        verb = "pause" if frozen else "resume"
        p = self.rt.call(verb, self.cid)
        if p.returncode != 0:
            raise RuntimeError(f"{self.rt.name} {verb} {self.cid}: {p.stderr.strip()}")

    def _freezer(self) -> tuple[Path, Path, str, str] | None:
        """(file to write, file to read back, frozen word, thawed word) of the container's
        freezer: v1's freezer hierarchy or v2's cgroup.freeze; None where neither is there."""
        v1 = Path("/sys/fs/cgroup/freezer") / self.cid / "freezer.state"
        if v1.exists():
            return v1, v1, "FROZEN", "THAWED"
        v2 = Path("/sys/fs/cgroup") / self.cid
        if (v2 / "cgroup.freeze").exists():
            return v2 / "cgroup.freeze", v2 / "cgroup.events", "frozen 1", "frozen 0"
        return None

    def _set_frozen(self, frozen: bool) -> bool:
        """Freeze or thaw the container's cgroup as `runc pause`/`crun pause` do (the runner
        switches environments before nearly every cell, and each runtime call costs a process,
        ~13 ms); their `state` reads the same file back, so a container frozen here is
        "paused" to them. True once the cgroup reads back as asked; False where it cannot
        (no freezer, an error, still FREEZING after FREEZE_WAIT_S: thawed again), and the
        runtime is asked instead."""
        where = self._freezer()
        if where is None:
            return False
        path, back, on, off = where
        want = on if frozen else off
        v1 = path == back
        try:
            path.write_text((want if v1 else want[-1]) + "\n")
            deadline = time.monotonic() + FREEZE_WAIT_S
            while True:
                text = back.read_text()
                if (text.strip() == want) if v1 else (want in text.splitlines()):
                    return True
                if time.monotonic() > deadline:
                    break
                time.sleep(0.0005)
        except OSError:
            return False
        if frozen:
            with contextlib.suppress(OSError):
                path.write_text((off if v1 else off[-1]) + "\n")
        return False

    @stops_once
    def stop(self) -> None:
        """Kill, delete, release the network, remove the storage and the bundle
        (Instance.stop's contract)."""
        out = Removals(f"{self.rt.name} container {self.cid}")
        out.attempt("the container", self._remove_container)
        if self._seat is not None:
            out.attempt(f"bridge {self._seat.bridge.name}", self._seat.release)
        self.fs.remove(out)
        out.attempt(f"bundle {self.bundle}", lambda: remove_tree(self.bundle))
        out.done()

    def _remove_container(self) -> None:
        """Kill and delete it; an error only where the runtime still knows it afterwards (one
        that died or was never created is gone, which is what stop wants)."""
        # A paused (frozen) container cannot die from KILL until thawed.
        with contextlib.suppress(Exception):
            if self.state() == "paused":
                self.rt.call("resume", self.cid)
        self.rt.call("kill", self.cid, "KILL", timeout=10)
        done = self.rt.call("delete", "--force", self.cid, timeout=30)
        if done.returncode != 0 and self.state() != "gone":
            raise RuntimeError(f"{self.rt.name} delete --force exited {done.returncode}: "
                               f"{done.stderr.strip()[:200]}")



# -- the kinds ------------------------------------------------------------------------------------

class OciEnvironment(EnvironmentBase):
    """What runc and crun declare in common: the runtime named like the kind, run over the
    image's bundle (see EnvironmentBase for the facts and hooks)."""

    isolation: ClassVar[Isolation] = Isolation.CONTAINER
    # numa_node: the node's CPUs and memory as the container's cpuset (linux.resources.cpu).
    supports_numa: ClassVar[bool] = True
    # leak_finders: each kind its own (RuntimeLeftovers of its runtime).
    options: ClassVar[tuple[ParamSpec, ...]] = ()  # the plan's axes say it all
    networks: ClassVar[tuple[str, ...]] = ("host", "bridge", "none")  # + NAT, an empty netns
    storages: ClassVar[tuple[str, ...]] = STORAGES  # a bind-mounted volume, or an overlay root

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        return VersionCommand(cls.kind, (cls.kind, "--version"))

    def available(self) -> Availability:
        try:
            return probe(Runtime(self.kind))
        except Exception as e:  # never raises: a probe that breaks is a reason, not a crash
            return Availability.no(f"{self.kind} probe failed: {e}")

    def start(self, spec: EnvSpec) -> Instance:
        return OciInstance(Runtime(self.kind), spec)


def same_process(pid: int, starttime: int) -> bool:
    """Host process pid runs (not a zombie) and is the one that started at starttime."""
    try:
        st = procfs.parse_pid_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError):
        return False
    return st.starttime == starttime and st.state not in ("Z", "X")
