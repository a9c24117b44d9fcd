"""native: the host itself, the baseline every other environment is compared with."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from isotax.environments.base import (
    GUEST_PATH,
    READY_MARKER,
    EnvironmentBase,
    Removals,
    Stopwatch,
    exit_words,
    parse_ready_marker,
    register,
    remove_tree,
    start_or_undo,
    stops_once,
)
from isotax.host import command, owners
from isotax.host.facts.filesystems import host_storage
from isotax.host.facts.numa import numactl_prefix
from isotax.host.processes import leftover_processes
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
from isotax.telemetry.cpuacct import CpuGroup


class NativeInstance:
    """The host. Workload tools come from the host's packages (same versions as the image's,
    checked in the report); isotax's static helpers come from the image's /opt/isotax/bin."""

    address = "127.0.0.1"
    socket_stack: SocketStack = SocketStack.LINUX

    def __init__(self, spec: EnvSpec) -> None:
        sw = Stopwatch(spec.requested_at)
        self.spec = spec
        # The image's static helpers (itx-time, itx-corpus) are the same bits on the host.
        self.helper_dir = spec.image.rootfs / "opt/isotax/bin"
        # A defined environment, the same one containers and the VM get: nothing inherited
        # from the caller's shell may change a workload's behaviour natively only.
        self.env = {"PATH": f"{self.helper_dir}:{GUEST_PATH}", "HOME": "/root", "LANG": "C.UTF-8"}
        # Scratch lives in tmpfs, like /tmp inside the containers and the VM: in-memory everywhere.
        # One directory per instance: the startup and density workloads start more instances
        # of the same environment beside the runner's own, and each removes its own at stop.
        self._scratch = Path(owners.mark(tempfile.mkdtemp(prefix=f"itx-{spec.name}-",
                                                        dir="/dev/shm")))
        self.scratch = str(self._scratch)
        # Disk workloads write under the run's workdir (removed by the runner), on the host's
        # disk. The plan's storage choice has no meaning here: the host has one filesystem.
        self._data = spec.workdir / "data"
        self._data.mkdir(parents=True, exist_ok=True)
        self.data_dir = str(self._data)
        self._hold: subprocess.Popen[str] | None = None
        self._stopped = False
        # Every command joins this group, so a run's CPU inside the environment is counted
        # exactly, exited processes included (telemetry.cpuacct), as a container's group does.
        self.cpu_group: CpuGroup | None = None
        def start() -> None:
            self.cpu_group = CpuGroup(f"itx-native-{owners.new_tag(3)}")
            self._start_hold(sw)

        start_or_undo(start, self.stop)
        self.milestones: Mapping[str, float] = dict(sw.marks)

    def _start_hold(self, sw: Stopwatch) -> None:
        """The native counterpart of a container's PID 1: isotax's helper as a plain host
        process. It gives the baseline its startup phases (a process is created, runs its first
        instruction) and the density sweep something to count: a native "instance" costs one
        idle process."""
        helper = self.helper_dir / "itx-ready"
        if not helper.exists():
            # An image without the helper (or a test's empty one): no process, no phases
            # beyond "ready"; the startup and density workloads say so.
            sw.mark("ready")
            return
        sw.mark("create")
        self._hold = subprocess.Popen([str(helper), "--hold"], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True, env=command.owned_env(self.env),
                                      start_new_session=True)
        sw.mark("started")
        assert self._hold.stdout is not None
        line = self._hold.stdout.readline()  # the helper prints its marker, flushed, at once
        seen = sw.mark("ready")
        stamp = parse_ready_marker(line)
        if stamp is None:
            raise RuntimeError(f"{helper} printed no {READY_MARKER} marker: {line.strip()!r} "
                               "(rebuild the image: isotax image build)")
        sw.marks["first_instruction"] = min(seen, max(0.0, stamp / 1e9 - sw.t0))

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        # TMPDIR points workloads at a private scratch directory the runner removes afterwards.
        full = [*numactl_prefix(self.spec.numa_node), *argv]
        if self.cpu_group is not None:
            full = self.cpu_group.wrap(full)
        done = command.run(full, timeout, env={**self.env, "TMPDIR": self.scratch})
        return replace(done, argv=tuple(argv))

    def facts(self) -> Facts:
        return Facts("native", Reach.HOST, words={
            "kernel": platform.release(),
            "cpus": str(os.cpu_count()),
            "network": "host",
            "storage": f"host directory ({host_storage(self._data)})",
            "numa": "scheduler" if self.spec.numa_node is None
            else f"CPUs and memory on node {self.spec.numa_node} (numactl)",
        })

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def host_pids(self) -> Sequence[int]:
        return [self._hold.pid] if self._hold is not None and self._hold.poll() is None else []

    def cpu_accounting_dir(self) -> Path | None:
        """protocols.OwnCpuGroup: the group its commands run in, where it could make one."""
        return self.cpu_group.dir if self.cpu_group is not None else None

    def alive(self) -> str:
        # The host itself does not die; what this instance holds of its own can go.
        if self._hold is not None and (rc := self._hold.poll()) is not None:
            return f"its holding process (itx-ready --hold) {exit_words(rc)}"
        if self.cpu_group is not None and not self.cpu_group.dir.is_dir():
            return f"its CPU accounting group {self.cpu_group.dir} is gone"
        return ""

    def kernel_memory_bytes(self) -> int | None:
        return None  # a host process has no cgroup of its own

    @stops_once
    def stop(self) -> None:
        """Its holding process, scratch, data and CPU group (Instance.stop's contract)."""
        out = Removals(f"native instance {self.spec.name}")
        out.attempt("its holding process (itx-ready --hold)", self._stop_hold)
        out.attempt(f"scratch {self._scratch}", lambda: remove_tree(self._scratch))
        out.attempt(f"data {self._data}", lambda: remove_tree(self._data))
        if self.cpu_group is not None:
            out.attempt(f"CPU group {self.cpu_group.dir}", self.cpu_group.remove)
        out.done()

    def _stop_hold(self) -> None:
        if self._hold is not None and self._hold.poll() is None:
            self._hold.terminate()  # itx-ready exits 0 on SIGTERM
            try:
                self._hold.wait(5)
            except subprocess.TimeoutExpired:
                self._hold.kill()
                self._hold.wait(5)
        if self._hold is not None and self._hold.stdout is not None:
            self._hold.stdout.close()


def held_processes() -> list[Leftover]:
    """The native environment's holding process (`itx-ready --hold`) still running; a
    container's PID 1 shows up here too, beside its container."""
    return leftover_processes(lambda prog, args: prog == "itx-ready" and "--hold" in args[1:])


@register
class Native(EnvironmentBase):
    kind: ClassVar[str] = "native"
    description: ClassVar[str] = "the host itself: the baseline"
    isolation: ClassVar[Isolation] = Isolation.HOST
    supports_numa: ClassVar[bool] = True  # numa_node: every command under numactl
    leak_finders: ClassVar[tuple[LeakFinder, ...]] = (held_processes,)
    options: ClassVar[tuple[ParamSpec, ...]] = ()
    networks: ClassVar[tuple[str, ...]] = ("host",)  # the host's own stack, nothing else
    # Both accepted, and the same here: the host has one filesystem (NativeInstance).
    storages: ClassVar[tuple[str, ...]] = STORAGES

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        return None  # no runtime of its own: the kernel is in the fingerprint already

    def available(self) -> Availability:
        return Availability.yes()

    def start(self, spec: EnvSpec) -> Instance:
        if spec.numa_node is not None and shutil.which("numactl") is None:
            raise Unavailable(Availability.no("numa_node needs numactl, which is not installed",
                                              "apt-get install numactl (scripts/setup.sh)"))
        return NativeInstance(spec)
