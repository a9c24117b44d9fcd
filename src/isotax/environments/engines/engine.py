"""Container engines (Docker, Podman) as isotax environments: what both have in common.

An engine runs the same workload image as runc and crun, imported from the image's tar
(`ImageArtifacts.tar`) as `itx-image:<recipe hash>` with the label `isotax`, once per recipe
hash. A container is `<engine> run --detach` of the image with isotax's `itx-ready --hold` as
PID 1; workloads run through `<engine> exec`. The plan's axes map onto the engine's own options:

  network  "bridge": the engine's bridge (its NAT, forwarding and isolation rules);
           "host": the host's network stack (`--network host`).
  ports    Both engines reserve every port they publish with `-p` by holding a listening
           socket on the host (dockerd's docker-proxy, or its "dummy proxy" when the userland
           proxy is off; Podman's conmon). A socket on ADDR:PORT makes a later wildcard bind
           of PORT fail, so a container with `-p` for isotax's server ports would keep native's
           and the host-network environments' servers in the same run from starting (seen
           here: "listen tcp4 10.213.3.1:45201: bind: address already in use", and the other
           way round). By default the ports are therefore not published by the engine: the
           load generator maps them to the container's address on the engine's bridge with
           the same iptables DNAT that `-p` installs (loadgen's "bridge" mode, as for runc),
           so packets take the kernel path of a published port, without the reservation.
           options.publish = true uses the engine's own `-p` (on a host address of the
           instance's own, never 0.0.0.0; loadgen's "published" mode), for plans whose other
           environments run no servers on the host's network.
  storage  "rootfs": data in the container's own overlay root filesystem (the engine's
           storage driver); "volume": a named engine volume at /mnt;
           options.storage = "bind": a host directory under the workdir bind-mounted at /mnt.
  runtime  options.runtime = runc | crun | runsc | kata, run by the engine. kata is Kata
           Containers' containerd shim v2 (each container in its own small VM): Docker 23 and
           later drive it by the shim's name; podman cannot (Kata 2 dropped the OCI
           command-line runtime podman needs). It also needs hardware virtualisation.

Here: one engine container (EngineInstance) and the kinds' shared base (Engine: the facts
docker and podman declare alike). Beside it: commands.py (the run and exec command lines from
the plan's choices, pure), client.py (the engine's client and the image import), iptables.py
(the rules an engine leaves). The engine-specific parts (which daemon, how to name a runtime,
which processes belong to a container) live in docker.py and podman.py.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from isotax.environments.base import (
    READY_HELPER,
    READY_MARKER,
    EnvironmentBase,
    Removals,
    Stopwatch,
    bound_cpus,
    gvisor_socket_stack,
    limit_words,
    remove_tree,
    stops_once,
)
from isotax.environments.container_fs import ROOTFS_DATA_DIR, SCRATCH, VOLUME_DIR
from isotax.environments.engines.client import LABEL, EngineCli, ensure_image, image_ref
from isotax.environments.engines.commands import (
    NETWORKS,
    RUNTIMES,
    STORAGES,
    Choices,
    exec_argv,
    host_limits,
    new_name,
    ready_from_log,
    run_argv,
)
from isotax.environments.runtime_cli import timed_exit_status
from isotax.facts import reach_of
from isotax.host.facts.filesystems import host_storage
from isotax.parsers import procfs
from isotax.protocols import STORAGES as PLAN_STORAGES
from isotax.protocols import (
    Availability,
    Completed,
    EnvSpec,
    Facts,
    Isolation,
    ParamSpec,
    Reach,
    SocketStack,
    Unavailable,
)
from isotax.telemetry.footprint import cgroup_kernel_bytes

# What a container is when the plan's runtime is not runc or crun (the kind's CONTAINER).
RUNTIME_ISOLATION = {"runsc": Isolation.SANDBOX, "kata": Isolation.VM}

# -- processes and cgroups ---------------------------------------------------------------------

def parse_proc_cgroup(text: str) -> tuple[str | None, str | None]:
    """(memory controller path of v1, path of the v2 hierarchy) from /proc/PID/cgroup. Pure."""
    return procfs.parse_pid_cgroup(text, "memory")


def cgroup_dirs(pid: int) -> tuple[Path | None, Path | None]:
    """The v1 memory cgroup directory and the v2 directory of a host process."""
    try:
        v1, v2 = parse_proc_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
    except OSError:
        return None, None
    d1 = Path("/sys/fs/cgroup/memory") / v1.lstrip("/") if v1 else None
    v2root = Path("/sys/fs/cgroup/unified") if Path("/sys/fs/cgroup/unified").is_dir() \
        else Path("/sys/fs/cgroup")
    d2 = v2root / v2.lstrip("/") if v2 else None
    return (d1 if d1 and d1.is_dir() else None,
            d2 if d2 and (d2 / "cgroup.procs").exists() else None)


def cgroup_pids(pid: int) -> list[int]:
    """Every process in the same cgroup as pid (the container's processes)."""
    for d in cgroup_dirs(pid):
        if d is not None:
            with contextlib.suppress(OSError, ValueError):
                return procfs.parse_pids((d / "cgroup.procs").read_text())
    return [pid] if Path(f"/proc/{pid}").exists() else []


# -- the instance ---------------------------------------------------------------------------------

class EngineInstance:
    """One container of an engine. Subclasses say how the engine is reached (`cli`), how a
    runtime is named, where ports are published, and which host processes belong to it."""

    scratch = SCRATCH
    engine = "engine"
    options: ClassVar[tuple[str, ...]] = ()  # the engine's own options, beside storage, runtime

    def __init__(self, spec: EnvSpec) -> None:
        self.spec = spec
        self.choices = Choices.of(spec, self.engine, self.options)
        self.name = new_name(spec.name)
        self.address = "127.0.0.1"
        self.data_dir = ROOTFS_DATA_DIR if self.choices.storage == "rootfs" else VOLUME_DIR
        self.milestones: Mapping[str, float] = {}
        self.cli = EngineCli(self.engine)
        self.command_line = ""  # the engine's run command that started it
        self.container_id = ""
        self.pid1 = 0
        self.bridge_name = ""
        self.release_errors: list[str] = []  # what _release_engine could not undo
        self.published = ""  # the host address the engine published the ports on
        self.container_address = ""  # the container's own address, when published
        self.import_s = 0.0
        self._volume: str | None = None
        self._bind: Path | None = None
        self._created = False
        self._stopped = False
        self._runtime_words = self.choices.runtime
        self._version_words = ""
        # Ports: see the module's docstring. False: the load generator maps them (DNAT) to the
        # container's address on the engine's bridge; True: the engine's own `-p`.
        self.publish = bool(spec.options.get("publish", False))
        # NUMA placement: the node's CPUs (the first vcpus of them where the plan limits the
        # count) and its memory, as the container's cpuset.
        self.node_cpus = bound_cpus(self.engine, spec)

    # -- hooks for docker.py / podman.py ----------------------------------------------------
    def _prepare_engine(self, sw: Stopwatch) -> None:
        """Make the engine reachable (start a daemon, ...)."""

    def _runtime_flags(self) -> tuple[list[str], list[str]]:
        """(flags before `run`, flags of `run`) that choose the plan's runtime."""
        raise NotImplementedError

    def _network_flags(self) -> tuple[str | None, list[str]]:
        """(the host address to publish ports on, extra `run` flags) for network "bridge"."""
        raise NotImplementedError

    def _engine_pids(self) -> list[int]:
        """The engine's own per-container processes (shim, proxy, conmon)."""
        return []

    def _release_engine(self) -> None:
        """Undo _prepare_engine and _network_flags; never raises: what it could not undo
        goes into release_errors, which stop() reports."""

    def _engine_gone(self) -> str:
        """Why the engine that runs the container is gone (a daemon of isotax's that
        exited), "" while it is there or not known without asking it."""
        return ""

    def _engine_words(self) -> Mapping[str, str]:
        return {}

    def _rm_flags(self) -> list[str]:
        return ["--force", "--volumes"]  # docker: SIGKILL at once

    def _log_path(self, container_id: str) -> Path | None:
        """Where the engine writes the container's log, when known without asking it (a
        question costs a client process, ~50 ms, which would count into "ready")."""
        return None

    # -- start ------------------------------------------------------------------------------
    def _start(self) -> None:
        sw = Stopwatch(self.spec.requested_at)
        spec = self.spec
        self._prepare_engine(sw)
        ref, self.import_s = ensure_image(self.cli, spec.image)
        before_run, runtime = self._runtime_flags()
        publish_on, extra = (None, []) if self.choices.network == "host" \
            else self._network_flags()
        if self.choices.storage == "volume":
            self._volume = self.name
            self.cli.check("volume", "create", "--label", f"{LABEL}=1", self._volume)
        elif self.choices.storage == "bind":
            self._bind = spec.workdir / f"{self.name}-bind"
            self._bind.mkdir(parents=True, exist_ok=True)
        argv = run_argv(name=self.name, image=ref, choices=self.choices, publish_on=publish_on,
                        runtime_flags=runtime, volume=self._volume,
                        bind_dir=str(self._bind) if self._bind else None, vcpus=spec.vcpus,
                        memory_mib=spec.memory_mib, limits=host_limits(), extra=extra,
                        cpuset=None if self.node_cpus is None
                        else (self.node_cpus, str(spec.numa_node)))
        if publish_on:
            self.address = publish_on
        self.published = publish_on or ""
        sw.mark("create")
        self._created = True  # from here, stop() removes a container of this name
        self.command_line = shlex.join(self.cli.argv(*before_run, *argv))
        p = self.cli.call(*before_run, *argv, timeout=120)
        sw.mark("started")
        if p.returncode != 0:
            words = (p.stderr or p.stdout).strip().splitlines()[-2:] or ["no output"]
            raise Unavailable(Availability.no(
                f"{self.engine} run ({self.choices.runtime}) failed ({p.returncode}): "
                + " | ".join(words),
                f"try `{' '.join(self.cli.argv(*before_run, *argv))}` by hand"))
        self.container_id = p.stdout.strip().splitlines()[-1]
        ready_ns = self._wait_ready(timeout=60)
        seen = sw.mark("ready")
        self.pid1 = int(self._state().get("State", {}).get("Pid") or 0)
        sw.marks["first_instruction"] = seen
        if ready_ns is not None and sw.t0 < ready_ns / 1e9 <= time.monotonic():
            # itx-ready's own CLOCK_MONOTONIC stamp: when user code ran, free of the polling.
            sw.marks["first_instruction"] = ready_ns / 1e9 - sw.t0
        if self.choices.network == "bridge" and not self.published:
            self.address = self._container_ip()
        elif self.published:  # where a server inside listens, behind the engine's mapping
            self.container_address = self._container_ip()
        if self.choices.storage == "rootfs":
            self.exec(["mkdir", "-p", ROOTFS_DATA_DIR], 30).check()
        self.milestones = dict(sw.marks)
        self._version_words = self._engine_version()

    def _container_ip(self) -> str:
        """The container's address on the engine's bridge."""
        ns = self._state().get("NetworkSettings", {})
        ips = [ns.get("IPAddress") or ""]
        ips += [(n or {}).get("IPAddress") or "" for n in (ns.get("Networks") or {}).values()]
        ip = next((x for x in ips if x), "")
        if not ip:
            raise Unavailable(Availability.no(
                f"{self.engine} gave container {self.name} no address on its bridge"))
        return ip

    def _state(self) -> dict[str, Any]:
        data = self.cli.inspect("container", self.name)
        return data[0] if data else {}

    def _wait_ready(self, timeout: float) -> int | None:
        """Wait for the ready marker in the container's log file (read directly: asking the
        engine for its logs costs a client process per look)."""
        guess = self._log_path(self.container_id)
        if guess is not None and guess.exists():
            log_path = str(guess)
        else:
            st = self._state()
            log_path = st.get("LogPath") or st.get("HostConfig", {}).get("LogConfig", {}).get(
                "Path", "")
        deadline = time.monotonic() + timeout
        checks = 0
        while time.monotonic() < deadline:
            text = ""
            if log_path:
                with contextlib.suppress(OSError):
                    text = Path(log_path).read_text(errors="replace")
            if READY_MARKER in text:
                return ready_from_log(text)
            checks += 1
            if checks % 100 == 0 or not log_path:
                st = self._state()
                status = st.get("State", {}).get("Status", "gone")
                if status not in ("running", "created", "configured", "initialized"):
                    raise Unavailable(Availability.no(
                        f"container {self.name} is {status} before it was ready: "
                        + self._log_tail()))
                if not log_path:
                    text = self.cli.call("logs", self.name, timeout=10).stdout
                    if READY_MARKER in text:
                        return ready_from_log(text)
            time.sleep(0.002)
        raise Unavailable(Availability.no(
            f"container {self.name} not ready within {timeout:.0f} s: {self._log_tail()}"))

    def _log_tail(self) -> str:
        p = self.cli.call("logs", "--tail", "3", self.name, timeout=10)
        return " | ".join((p.stdout + p.stderr).strip().splitlines()[-3:]) or "(no output)"

    # -- the protocol -----------------------------------------------------------------------
    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        t0 = time.monotonic()
        p = self.cli.call(*exec_argv(self.name, argv, timeout), timeout=timeout + 15)
        # `timeout` says 127 itself for a missing program; an engine's own words for it
        # (should the exec fail before `timeout` runs) mean the same.
        return Completed(tuple(argv), timed_exit_status(p.returncode, p.stderr), p.stdout,
                         p.stderr, time.monotonic() - t0)

    @property
    def socket_stack(self) -> SocketStack:
        """runsc serves the container's sockets through its Sentry; runc, crun and Kata's
        guest, a Linux kernel."""
        if self.choices.runtime == "runsc":
            return gvisor_socket_stack(self.choices.network)
        return SocketStack.LINUX

    def facts(self) -> Facts:
        """A container on the engine's bridge is reached through the ports the engine
        published (or, without them, behind isotax's DNAT like any bridged container); what
        it is follows the plan's runtime: runsc a sandbox, Kata a VM, runc and crun a
        container (the kind's declared isolation)."""
        reach = Reach.PUBLISHED if self.published else reach_of(self.choices.network)
        return Facts(
            self.engine, reach, isolation=RUNTIME_ISOLATION.get(self.choices.runtime),
            runtime=self._runtime_words, bridge=self.bridge_name, published=self.published,
            container_address=self.container_address if self.published else "",
            memory_limit_mib=self.spec.memory_mib or None, vcpus=self.spec.vcpus or None,
            words={**self._words(), **self._engine_words()})

    def _words(self) -> dict[str, str]:
        return {
            "engine": self._version_words,
            "command_line": self.command_line,
            "container": self.name,
            "network": self.choices.network,
            "address": self.address,
            **limit_words(self.spec, self.node_cpus, "cpuset"),
            "seccomp": "the engine's default profile",
            "rootfs": f"{self.engine} image {image_ref(self.spec.image)} on the engine's "
                      "overlay storage driver, writable; tmpfs /tmp /run /dev/shm",
            "storage": self._storage_words(),
            "pid1": f"{READY_HELPER} --hold",
        }

    def _engine_version(self) -> str:
        p = self.cli.call("version", "--format", "{{.Server.Version}}", timeout=20)
        v = p.stdout.strip() if p.returncode == 0 else ""
        return f"{self.engine} {v}".strip()

    def _storage_words(self) -> str:
        if self.choices.storage == "rootfs":
            return f"{self.engine} overlay rootfs, data in {self.data_dir}"
        if self.choices.storage == "volume":
            return f"named {self.engine} volume {self._volume} at {VOLUME_DIR}"
        where = host_storage(self._bind) if self._bind else "unknown"
        return f"bind mount of a host directory at {VOLUME_DIR} ({where})"

    def host_pids(self) -> Sequence[int]:
        if not self.pid1:
            return []
        seen = set(cgroup_pids(self.pid1))
        return sorted(seen | set(self._engine_pids()))

    def kernel_memory_bytes(self) -> int | None:
        return cgroup_kernel_bytes(*cgroup_dirs(self.pid1)) if self.pid1 else None

    def alive(self) -> str:
        if self._stopped:
            return "the container was removed"
        gone = self._engine_gone()
        if gone:
            return gone
        p = self.cli.call("container", "inspect", "--format", "{{.State.Status}}", self.name,
                          timeout=20)
        if p.returncode != 0:
            words = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
            return f"{self.engine} cannot inspect the container {self.name}: {words[0]}"
        status = p.stdout.strip()
        return "" if status in ("running", "paused") else \
            f"the container is {status or 'in no state'} ({self.engine} inspect)"

    def pause(self) -> None:
        p = self.cli.call("pause", self.name, timeout=30)
        if p.returncode != 0:
            raise RuntimeError(f"{self.engine} pause {self.name}: {p.stderr.strip()}")

    def resume(self) -> None:
        p = self.cli.call("unpause", self.name, timeout=30)
        if p.returncode != 0 and "not paused" not in p.stderr:
            raise RuntimeError(f"{self.engine} unpause {self.name}: {p.stderr.strip()}")

    @stops_once
    def stop(self) -> None:
        """Remove the container, its volume and bind directory, then what the engine needed
        (network, daemon): Instance.stop's contract."""
        out = Removals(f"{self.engine} container {self.name}")
        if self._created:
            out.attempt("the container", self._remove_container)
        if self._volume is not None:
            volume = self._volume
            out.attempt(f"volume {volume}", lambda: self._called(
                "volume", "rm", "--force", volume))
        if self._bind is not None:
            bind = self._bind
            out.attempt(f"bind directory {bind}", lambda: remove_tree(bind))
        out.release("what the engine needed (its network, its daemon)", self._engine_released)
        out.done()

    def _engine_released(self) -> list[str]:
        self._release_engine()
        return self.release_errors

    def _remove_container(self) -> None:
        with contextlib.suppress(Exception):  # a paused container must thaw to go
            if self._state().get("State", {}).get("Paused"):
                self.cli.call("unpause", self.name, timeout=30)
        self._called("rm", *self._rm_flags(), self.name)

    def _called(self, *args: str) -> None:
        """An engine command that must work (60 s): its words where it does not, unless
        what it removes is already gone."""
        done = self.cli.call(*args, timeout=60)
        if done.returncode != 0 and not re.search(r"no such|not found|does not exist",
                                                  done.stderr, re.IGNORECASE):
            raise RuntimeError(f"{self.engine} {' '.join(args[:2])} exited "
                               f"{done.returncode}: {done.stderr.strip()[:200]}")


# -- the kinds --------------------------------------------------------------------------------

# The plan's options every engine reads (the module's docstring has the axes they stand for).
STORAGE_OPTION = ParamSpec("storage", str, None, "in place of the plan's storage; \"bind\": a "
                           "host directory under the workdir, bind-mounted at /mnt",
                           choices=STORAGES)
PUBLISH_OPTION = ParamSpec("publish", bool, False, "true: the engine's own -p, on a host "
                           "address of the instance's own (the load generator's DNAT if false)")


def runtime_option(runtimes: tuple[str, ...] = RUNTIMES, note: str = "") -> ParamSpec:
    """The OCI runtime the engine runs its container with (options.runtime)."""
    return ParamSpec("runtime", str, "runc", "the OCI runtime the engine runs the container "
                     "with" + note, choices=runtimes)


class Engine(EnvironmentBase):
    """What docker and podman declare in common (see EnvironmentBase for every fact and hook):
    containers on the host's kernel, unless the plan's runtime makes them something else."""

    isolation: ClassVar[Isolation] = Isolation.CONTAINER
    # numa_node: the node's CPUs and memory as the container's cpuset (--cpuset-cpus/-mems).
    supports_numa: ClassVar[bool] = True
    # options: each engine its own (STORAGE_OPTION, a runtime_option, PUBLISH_OPTION, ...).
    networks: ClassVar[tuple[str, ...]] = NETWORKS  # the engine's bridge, or the host's stack
    storages: ClassVar[tuple[str, ...]] = PLAN_STORAGES  # options.storage may say "bind"

    def missing(self, tools: tuple[tuple[str, str], ...], words: str = "") -> Availability | None:
        """Why the engine cannot run here, where it cannot: not root (rootless engines are not
        supported), or the first of tools (program, Debian package) not installed, said with
        `words` before it ("no dockerd runs and ..."); None where nothing is missing."""
        if os.geteuid() != 0:
            return Availability.no(f"{self.kind} needs root here (rootless is not supported)",
                                   "run isotax as root")
        for tool, pkg in tools:
            if shutil.which(tool) is None:
                return Availability.no(f"{words}{tool} is not installed",
                                       f"apt-get install {pkg}")
        return None
