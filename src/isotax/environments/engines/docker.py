"""docker: containers of the workload image run by dockerd (see engine.py for the axes).

Where a dockerd already answers on /run/docker.sock, isotax uses it: its containers and volumes
carry the label `isotax`, nothing else of the daemon's is touched (its default bridge, its
runtimes). Otherwise isotax starts a private dockerd for the run and stops it when the last
instance of the process stops (the runner's instances live for the whole run):

  dockerd --data-root /var/lib/isotax/dockerd     the image store, kept: a cache like the image
                                                  itself, so the import happens once per recipe
          --exec-root /run/itx-dockerd-<tag>      socket, pidfile, containerd's state, netns
          --bridge itx-brd<tag>                   isotax's own bridge (network.Bridge), no docker0
          --cgroup-parent /itx-docker-<tag>       container cgroups under an itx- name
          --userland-proxy=true                   Docker's default (see below)

Stopping it removes everything but the image store: the daemon and its containerd by PID, every
mount under both roots, the exec root, the bridge, the cgroups, and the iptables chains and rules
dockerd made (it never deletes its own chains).

Ports (engine.py explains why): by default the load generator reaches the container's address
on the daemon's bridge through a DNAT of its own. With options.publish = true they are published
with `-p` on a host address of the instance's own (an `itx-pub<tag>` link), never 0.0.0.0; the
private daemon keeps Docker's default userland proxy (options.userland_proxy = false turns it
off), and the docker-proxy processes count toward the instance's cost.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any, ClassVar

from pyroute2 import IPRoute

from isotax.environments.base import Stopwatch, exit_words, register
from isotax.environments.engines.client import EngineCli, EngineError
from isotax.environments.engines.commands import KATA_INSTALL, KATA_RUNTIME_TYPE, KATA_SHIM
from isotax.environments.engines.engine import (
    PUBLISH_OPTION,
    STORAGE_OPTION,
    Engine,
    EngineInstance,
    runtime_option,
)
from isotax.environments.engines.iptables import (
    engine_iptables_leaks,
    iptables_snapshot,
    remove_iptables_leftovers,
)
from isotax.environments.oci.runtime import Runtime as OciRuntime
from isotax.environments.oci.runtime import _needs_unified_detached, parse_version
from isotax.host import command, owners
from isotax.host.network import Bridge, uplink_mtu
from isotax.host.processes import (
    kill_and_reap,
    pids_matching,
    pids_matching_prefix,
    process_leftover,
    read_cmdline,
)
from isotax.parsers import procfs
from isotax.protocols import (
    Availability,
    EnvSpec,
    Instance,
    LeakFinder,
    Leftover,
    ParamSpec,
    Stage,
    Unavailable,
    VersionCommand,
)

SYSTEM_SOCKET = Path("/run/docker.sock")
DATA_ROOT = Path("/var/lib/isotax/dockerd")
EXEC_ROOT_PREFIX = "/run/itx-dockerd-"
RUNSC = Path("/opt/isotax/runsc/runsc")  # where scripts/setup.sh installs a current runsc
# Debian's CLI first: /usr/local/bin/docker may be a newer CLI that shadows it.
CLI_CANDIDATES = ("/usr/bin/docker", "docker")


def docker_cli() -> str | None:
    for c in CLI_CANDIDATES:
        found = shutil.which(c)
        if found:
            return found
    return None


def crun_wrapper_text(crun: str) -> str:
    """A runtime wrapper for crun on a hybrid-cgroup host (see oci/runtime.py): every crun call runs
    in a private mount namespace without /sys/fs/cgroup/unified, as isotax's own crun does."""
    return ("#!/bin/sh\n# isotax: crun without the hybrid cgroup2 mount (it refuses hybrid)\n"
            "exec unshare --mount --propagation private -- sh -c "
            "'umount -l /sys/fs/cgroup/unified 2>/dev/null; exec \"$0\" \"$@\"' "
            f"{crun} \"$@\"\n")


def runsc_platform(runsc: Path) -> str:
    """systrap where the runsc has it (current gVisor), else ptrace (Debian's 2022 build)."""
    p = command.run([str(runsc), "help", "platforms"], 10)
    if "systrap" in p.stdout + p.stderr:
        return "systrap"
    version = command.run([str(runsc), "--version"], 10).stdout
    return "ptrace" if "20221219" in version else "systrap"


def runs_shim_runtimes(server_version: str) -> bool:
    """Whether a dockerd of this version runs a containerd shim v2 runtime by its name (e.g.
    `--runtime io.containerd.kata.v2`): Docker 23.0 and later (moby #43800). Pure."""
    m = re.match(r"(\d+)\.", server_version.strip())
    return m is not None and int(m.group(1)) >= 23


def daemon_config(runtimes_dir: Path, crun_wrapper: Path | None) -> dict[str, Any]:
    """daemon.json for the private dockerd: crun (wrapped where needed) and runsc as runtimes;
    runsc twice, since with --network host it must be told so (runtimeArgs) or it starts its
    own netstack in the host's namespace, which it refuses."""
    runtimes: dict[str, Any] = {}
    crun = shutil.which("crun")
    if crun:
        runtimes["crun"] = {"path": str(crun_wrapper) if crun_wrapper else crun}
    if RUNSC.exists():
        platform = runsc_platform(RUNSC)
        runtimes["runsc"] = {"path": str(RUNSC), "runtimeArgs": [f"--platform={platform}"]}
        runtimes["runsc-host"] = {"path": str(RUNSC),
                                  "runtimeArgs": [f"--platform={platform}", "--network=host"]}
    return {"runtimes": runtimes}


def dockerd_argv(*, tag: str, bridge: str, config_file: str, userland_proxy: bool,
                 mtu: int = 1500, data_root: Path = DATA_ROOT) -> list[str]:
    """The private dockerd's command line. Pure. mtu: the containers' veths get the host
    uplink's, as isotax's own links do (Docker's default 1500 would differ from the host's)."""
    exec_root = f"{EXEC_ROOT_PREFIX}{tag}"
    return ["dockerd", "--config-file", config_file, "--data-root", str(data_root),
            "--exec-root", exec_root, "-H", f"unix://{exec_root}/docker.sock",
            "--pidfile", f"{exec_root}/dockerd.pid", "--bridge", bridge,
            "--cgroup-parent", f"/itx-docker-{tag}", "--exec-opt",
            "native.cgroupdriver=cgroupfs", "--iptables=true", "--ip-masq=true",
            f"--userland-proxy={'true' if userland_proxy else 'false'}",
            "--mtu", str(mtu), "--log-level", "warn", "--storage-driver", "overlay2"]


class PrivateDockerd:
    """A dockerd of isotax's own: started once, shared by this process's instances, stopped
    with everything it made when the last one is released."""

    def __init__(self, userland_proxy: bool) -> None:
        self.tag = owners.new_tag(3)
        self.userland_proxy = userland_proxy
        self.exec_root = Path(f"{EXEC_ROOT_PREFIX}{self.tag}")
        self.socket = self.exec_root / "docker.sock"
        self.bridge = Bridge(name=f"itx-brd{self.tag}")
        self.cgroup_parent = f"itx-docker-{self.tag}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.users = 0
        self.start_s = 0.0
        self._lock_file: IO[str] | None = None
        self._iptables: dict[str, str] = {}
        self._key_json_existed = Path("/etc/docker/key.json").exists()
        self._etc_docker_existed = Path("/etc/docker").exists()
        self._run_containerd_existed = Path("/run/containerd").exists()

    def cli(self, program: str) -> EngineCli:
        return EngineCli(program, ["-H", f"unix://{self.socket}"])

    def start(self, program: str) -> None:
        t0 = time.monotonic()
        DATA_ROOT.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(DATA_ROOT.parent / "dockerd.lock", "a")  # noqa: SIM115
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock_file.close()
            self._lock_file = None
            raise Unavailable(Availability.no(
                f"another isotax process runs a private dockerd on {DATA_ROOT}",
                "wait for it to finish, or start a system dockerd for both")) from None
        try:
            self._iptables = iptables_snapshot()
            self.bridge.up()
            self.exec_root.mkdir(parents=True, exist_ok=True)
            wrapper = None
            if shutil.which("crun") and _needs_unified_detached():
                wrapper = self.exec_root / "crun-unified-detached"
                wrapper.write_text(crun_wrapper_text(str(shutil.which("crun"))))
                wrapper.chmod(0o755)
            config = self.exec_root / "daemon.json"
            config.write_text(json.dumps(daemon_config(self.exec_root, wrapper), indent=1))
            with IPRoute() as ipr:
                mtu = uplink_mtu(ipr)
            argv = dockerd_argv(tag=self.tag, bridge=self.bridge.name, config_file=str(config),
                                userland_proxy=self.userland_proxy, mtu=mtu)
            with open(self.exec_root / "dockerd.log", "wb") as log:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=log, start_new_session=True)
            cli = self.cli(program)
            deadline = time.monotonic() + 60
            while True:
                if cli.call("version", "--format", "{{.Server.Version}}",
                            timeout=10).returncode == 0:
                    break
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise Unavailable(Availability.no(
                        f"the private dockerd did not start: {self.log_tail()}",
                        f"run `{' '.join(argv)}` by hand"))
                time.sleep(0.05)
            self.start_s = time.monotonic() - t0
        except BaseException:
            self.stop(program)
            raise

    def log_tail(self) -> str:
        try:
            lines = (self.exec_root / "dockerd.log").read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-3:]) or "(empty log)"

    def stop(self, program: str) -> list[str]:
        """Stop the daemon and remove all it made but the image store; the problems, if any.
        Never raises."""
        errors: list[str] = []
        cli = self.cli(program)
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(Exception):
                ids = cli.call("ps", "-aq", "--filter", "label=isotax", timeout=30).stdout.split()
                if ids:
                    cli.call("rm", "--force", "--volumes", *ids, timeout=120)
            with contextlib.suppress(Exception):
                vols = cli.call("volume", "ls", "-q", "--filter", "label=isotax",
                                timeout=30).stdout.split()
                if vols:
                    cli.call("volume", "rm", "--force", *vols, timeout=60)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                errors.append("dockerd ignored SIGTERM for 30 s: killed")
                self.proc.kill()
                self.proc.wait(10)
        # Its containerd and shims exit with it; any that did not are ours by their arguments.
        for prog in ("containerd", "containerd-shim-runc-v2"):
            for pid in pids_matching_prefix(prog, str(self.exec_root)):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                    errors.append(f"{prog} {pid} outlived dockerd: killed")
        for point in mounts_under((str(self.exec_root), str(DATA_ROOT))):
            p = command.run(["umount", "-l", point], 30)
            if p.returncode != 0:
                errors.append(f"umount {point}: {p.stderr.strip()}")
        shutil.rmtree(self.exec_root, ignore_errors=True)
        if self.exec_root.exists():
            errors.append(f"{self.exec_root} could not be removed")
        # A dockerd that died leaves its containers' processes running without it (their
        # shims killed above) in its cgroups, and the containers in its store: ours, since the
        # store is this daemon's alone while it holds the lock.
        orphans: set[str] = set()
        for d in cgroup_dirs_named(self.cgroup_parent):
            orphans |= {c.name for c in d.iterdir() if c.is_dir()}
            for procs in d.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    for pid in procfs.parse_pids(procs.read_text()):
                        kill_and_reap(pid)
            with contextlib.suppress(OSError):
                remove_cgroup_tree(d)
        for cid in orphans:
            forget_container(cid)
        try:
            self.bridge.down()
        except Exception as e:
            errors.append(f"bridge {self.bridge.name}: {e}")
        if self._iptables:
            errors += remove_iptables_leftovers(self._iptables, ("DOCKER",),
                                                (self.bridge.name,))
            self._iptables = {}
        # dockerd 20.10 writes a trust key into /etc/docker and containerd's shims a socket
        # directory under /run/containerd: remove what was not there before.
        if not self._key_json_existed:
            Path("/etc/docker/key.json").unlink(missing_ok=True)
        if not self._etc_docker_existed:
            with contextlib.suppress(OSError):
                Path("/etc/docker").rmdir()
        if not self._run_containerd_existed:
            with contextlib.suppress(OSError):
                for leftover in ("/run/containerd/s", "/run/containerd"):
                    Path(leftover).rmdir()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None
        self.proc = None
        return errors


def mounts_under(roots: tuple[str, ...]) -> list[str]:
    """Mount points below any of roots, deepest first (so each can be unmounted)."""
    out = []
    with contextlib.suppress(OSError):
        for m in procfs.parse_mountinfo(Path("/proc/self/mountinfo").read_text()):
            if any(m.point == r or m.point.startswith(r + "/") for r in roots):
                out.append(m.point)
    return sorted(set(out), key=len, reverse=True)


def forget_container(cid: str) -> None:
    """Remove a container of the private store that no dockerd can remove any more (its
    daemon died): its directory, and its writable layer with the layer's init layer."""
    mounts = DATA_ROOT / "image" / "overlay2" / "layerdb" / "mounts" / cid
    dirs = [DATA_ROOT / "containers" / cid, mounts]
    with contextlib.suppress(OSError):
        layer = (mounts / "mount-id").read_text().strip()
        if layer and "/" not in layer:
            dirs += [DATA_ROOT / "overlay2" / layer, DATA_ROOT / "overlay2" / f"{layer}-init"]
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def cgroup_dirs_named(name: str) -> list[Path]:
    base = Path("/sys/fs/cgroup")
    return [p for pattern in (f"*/{name}", name) for p in base.glob(pattern) if p.is_dir()]


def remove_cgroup_tree(d: Path) -> None:
    for sub in sorted((p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(p.parts),
                      reverse=True):
        with contextlib.suppress(OSError):
            sub.rmdir()
    d.rmdir()


# One private daemon per userland-proxy setting, shared by this process's instances.
_DAEMONS: dict[bool, PrivateDockerd] = {}
_DAEMON_LOCK = threading.Lock()


def _acquire_private(userland_proxy: bool, program: str) -> tuple[PrivateDockerd, bool]:
    """(the daemon, whether this call started it)."""
    with _DAEMON_LOCK:
        d = _DAEMONS.get(userland_proxy)
        started = False
        if d is None:
            d = PrivateDockerd(userland_proxy)
            d.start(program)  # raises after cleaning up
            _DAEMONS[userland_proxy] = d
            started = True
        d.users += 1
        return d, started


def _release_private(d: PrivateDockerd, program: str) -> list[str]:
    with _DAEMON_LOCK:
        d.users -= 1
        if d.users > 0:
            return []
        _DAEMONS.pop(d.userland_proxy, None)
        return d.stop(program)


@atexit.register
def _stop_all_private() -> None:
    """A process that exits without stopping its instances still stops its daemons."""
    program = docker_cli() or "docker"
    with _DAEMON_LOCK:
        for d in list(_DAEMONS.values()):
            d.stop(program)
        _DAEMONS.clear()


def system_daemon(program: str) -> bool:
    """True when a dockerd (not isotax's) answers on the system socket."""
    if not SYSTEM_SOCKET.exists():
        return False
    p = EngineCli(program, ["-H", f"unix://{SYSTEM_SOCKET}"]).call(
        "version", "--format", "{{.Server.Version}}", timeout=15)
    return p.returncode == 0


class DockerInstance(EngineInstance):
    engine = "docker"
    options: ClassVar[tuple[str, ...]] = ("publish", "userland_proxy")

    def __init__(self, spec: EnvSpec) -> None:
        super().__init__(spec)
        program = docker_cli()
        if program is None:
            raise Unavailable(Availability.no("docker is not installed",
                                              "apt-get install docker.io"))
        self.program = program
        self.cli = EngineCli(program)
        self.userland_proxy = bool(spec.options.get("userland_proxy", True))
        self.daemon: PrivateDockerd | None = None
        self.container_ip = ""
        self._pub: Bridge | None = None
        self._root_dir: Path | None = None
        self.release_errors: list[str] = []
        try:
            self._start()
            self._after_start()
        except BaseException:
            self.stop()
            raise

    def _prepare_engine(self, sw: Stopwatch) -> None:
        if system_daemon(self.program):
            self.cli = EngineCli(self.program, ["-H", f"unix://{SYSTEM_SOCKET}"])
        else:
            self.daemon, started = _acquire_private(self.userland_proxy, self.program)
            self.cli = self.daemon.cli(self.program)
            if started:
                sw.mark("daemon")  # the private dockerd answers: part of this start
        root = self.cli.call("info", "--format", "{{.DockerRootDir}}", timeout=30).stdout.strip()
        self._root_dir = Path(root) if root else None

    def _log_path(self, container_id: str) -> Path | None:
        # json-file, the default log driver: <root>/containers/<id>/<id>-json.log
        if self._root_dir is None:
            return None
        return self._root_dir / "containers" / container_id / f"{container_id}-json.log"

    def _runtime_flags(self) -> tuple[list[str], list[str]]:
        rt = self.choices.runtime
        if rt == "kata":
            return self._kata_flags()
        name = "runsc-host" if rt == "runsc" and self.choices.network == "host" else rt
        if rt != "runc":
            info = self.cli.call("info", "--format", "{{json .Runtimes}}", timeout=30).stdout
            if f'"{name}"' not in info:
                fix = ("install a current runsc: scripts/setup.sh puts it in " + str(RUNSC)
                       if rt == "runsc" else "apt-get install crun")
                if self.daemon is None:
                    fix = f"add runtime {name!r} to the running dockerd's daemon.json"
                raise Unavailable(Availability.no(f"dockerd has no runtime {name!r}", fix))
        self._runtime_words = self._runtime_version(rt)
        return [], ["--runtime", name]

    def _kata_flags(self) -> tuple[list[str], list[str]]:
        """Kata's own containerd shim, named by its runtime type (Docker 23+ passes a name it
        does not know to containerd, which finds containerd-shim-kata-v2 on PATH)."""
        shim = shutil.which(KATA_SHIM)
        if shim is None:
            raise Unavailable(Availability.no(
                f"Kata Containers is not installed (no {KATA_SHIM} on PATH)", KATA_INSTALL))
        version = self.cli.call("version", "--format", "{{.Server.Version}}",
                                timeout=30).stdout.strip()
        if not runs_shim_runtimes(version):
            raise Unavailable(Availability.no(
                f"dockerd {version or '(version unknown)'} cannot run a runtime with its own "
                "containerd shim, such as Kata's (Docker 23 and later can)",
                "install Docker 23 or later (docker-ce) for kata through the engine"))
        self._runtime_words = f"kata ({shim}, {KATA_RUNTIME_TYPE}) via dockerd {version}"
        return [], ["--runtime", KATA_RUNTIME_TYPE]

    def _runtime_version(self, rt: str) -> str:
        if rt == "runsc":
            if self.daemon is not None:
                p = command.run([str(RUNSC), "--version"], 10)
                first = (p.stdout.splitlines() or ["runsc"])[0]
                return f"runsc {parse_version(first)} ({runsc_platform(RUNSC)}) via dockerd"
            return "runsc via dockerd"
        words = f"{rt} {OciRuntime(rt).version()} via dockerd's containerd-shim-runc-v2"
        if rt == "crun" and _needs_unified_detached():
            words += " (wrapped: private mount ns without /sys/fs/cgroup/unified)"
        return words

    def _network_flags(self) -> tuple[str | None, list[str]]:
        nets = self.cli.inspect("network", "bridge")
        if not nets:
            raise EngineError("dockerd has no network named bridge")
        net = nets[0]
        gw = next((c.get("Gateway") for c in net.get("IPAM", {}).get("Config", [])
                   if c.get("Gateway")), None)
        self.bridge_name = net.get("Options", {}).get("com.docker.network.bridge.name",
                                                      "docker0")
        if not self.publish:
            return None, []
        if gw is None and self.daemon is None:
            raise EngineError("dockerd's bridge network has no gateway address")
        # The ports are published on an address of this instance's own, not the bridge's
        # gateway: every container on the bridge shares that, and Docker refuses a second
        # mapping of ADDR:PORT (the startup and density workloads run several side by side).
        # network.Bridge allocates a free /24 under isotax's lock and removes it all again;
        # the link carries no ports, only the address (.1).
        self._pub = Bridge(name=f"itx-pub{self.name.rsplit('-', 1)[1]}")
        self._pub.up()
        return self._pub.gateway, []

    def _after_start(self) -> None:
        st = self._state()
        self.container_ip = st.get("NetworkSettings", {}).get("IPAddress", "") or ""

    def _engine_pids(self) -> list[int]:
        pids = pids_matching("containerd-shim-runc-v2", ["-id", self.container_id]) \
            if self.container_id else []
        if self.container_ip:
            pids += pids_matching("docker-proxy", ["-container-ip", self.container_ip])
        return pids

    def _engine_words(self) -> dict[str, str]:
        d = {"daemon": "private dockerd (isotax's, for this run)" if self.daemon
             else f"system dockerd ({SYSTEM_SOCKET})",
             "cli": self.program}
        if self.daemon is not None:
            d["daemon_start_s"] = f"{self.daemon.start_s:.2f}"
            d["userland_proxy"] = "on" if self.userland_proxy else "off"
        if self.import_s:
            d["image_import_s"] = f"{self.import_s:.1f}"
        return d

    def _engine_gone(self) -> str:
        d = self.daemon
        if d is not None and d.proc is not None and (rc := d.proc.poll()) is not None:
            return f"the container's dockerd is gone ({exit_words(rc)})"
        return ""

    def _release_engine(self) -> None:
        if self._pub is not None:
            pub, self._pub = self._pub, None
            try:
                pub.down()
            except Exception as e:
                self.release_errors.append(f"{pub.name}: {e}")
        if self.daemon is not None:
            d, self.daemon = self.daemon, None
            self.release_errors = _release_private(d, self.program)


def docker_leaks() -> list[Leftover]:
    """What isotax's Docker use can leave: a private dockerd (or its containerd) still running,
    its exec root, its cgroups, and isotax-labelled containers and volumes in a system dockerd.
    The image store (DATA_ROOT) is a cache, not a leak."""
    out: list[Leftover] = []  # its cgroups (itx-docker-*) are found by leaks.leaked_cgroups
    for prog in ("dockerd", "containerd", "containerd-shim-runc-v2"):
        for pid in pids_matching_prefix(prog, EXEC_ROOT_PREFIX):
            args = read_cmdline(pid)
            out.append(process_leftover(pid, args or [prog], f"{prog} of a private dockerd:"))
    for d in sorted(Path("/run").glob("itx-dockerd-*")):
        out.append(Leftover(f"directory {d} of a private dockerd", [("rm", "-rf", str(d))]))
    if not out and (DATA_ROOT / "containers").is_dir():
        # No private dockerd runs: containers in its store were left by a crashed run.
        for c in sorted((DATA_ROOT / "containers").iterdir()):
            out.append(Leftover(f"container {c.name[:12]} in the private dockerd's store",
                                [("rm", "-rf", str(c))],
                                how=f"rm -rf {c}, with no private dockerd running"))
    program = docker_cli()
    if program is not None and SYSTEM_SOCKET.exists():
        cli = EngineCli(program, ["-H", f"unix://{SYSTEM_SOCKET}"])
        for name in cli.call("ps", "-a", "--filter", "label=isotax", "--format",
                             "{{.Names}}", timeout=20).stdout.split():
            out.append(Leftover(f"docker container {name}", [(
                program, "-H", f"unix://{SYSTEM_SOCKET}", "rm", "-f", name)],
                how=f"docker rm -f {name}", stage=Stage.CONTAINER))
        for name in cli.call("volume", "ls", "-q", "--filter", "label=isotax",
                             timeout=20).stdout.split():
            out.append(Leftover(f"docker volume {name}", [(
                program, "-H", f"unix://{SYSTEM_SOCKET}", "volume", "rm", name)],
                how=f"docker volume rm {name}"))
    return out


@register
class Docker(Engine):
    kind: ClassVar[str] = "docker"
    description: ClassVar[str] = ("Docker: the image imported into dockerd (a private one if "
                                  "none runs); bridge+ports or host net; runc/crun/runsc/kata")
    # What a killed run leaves: its own (above), and rules dockerd made for isotax's bridge.
    leak_finders: ClassVar[tuple[LeakFinder, ...]] = (docker_leaks, engine_iptables_leaks)
    options: ClassVar[tuple[ParamSpec, ...]] = (
        STORAGE_OPTION, runtime_option(), PUBLISH_OPTION,
        ParamSpec("userland_proxy", bool, True, "false: isotax's private dockerd runs without "
                  "Docker's userland proxy (with publish = true)"))

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        return VersionCommand("docker", (docker_cli() or "docker", "--version"))

    def available(self) -> Availability:
        if os.geteuid() != 0:
            return Availability.no("docker needs root here (rootless is not supported)",
                                   "run isotax as root")
        program = docker_cli()
        if program is None:
            return Availability.no("docker is not installed", "apt-get install docker.io")
        if system_daemon(program):
            return Availability.yes()
        for tool, pkg in (("dockerd", "docker.io"), ("containerd", "containerd"),
                          ("iptables", "iptables"), ("unshare", "util-linux")):
            if shutil.which(tool) is None:
                return Availability.no(f"no dockerd runs and {tool} is not installed",
                                       f"apt-get install {pkg}")
        return Availability.yes()

    def start(self, spec: EnvSpec) -> Instance:
        return DockerInstance(spec)
