"""The dockerd isotax drives (docker.py's instances): the system's where one answers on
/run/docker.sock, else a private one per process (its argv, daemon.json, start, and a stop that
removes everything but the image store: see docker.py's docstring for the layout), shared by
the process's instances and stopped with the last of them, or at exit."""

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
from typing import IO, Any

from pyroute2 import IPRoute

from isotax.environments.engines.client import EngineCli
from isotax.environments.engines.iptables import (
    iptables_snapshot,
    remove_iptables_leftovers,
)
from isotax.host import command, owners
from isotax.host.facts.cgroups import crun_needs_unified_detached, remove_cgroup_tree, tree_pids
from isotax.host.network import Bridge, uplink_mtu
from isotax.host.processes import (
    kill_and_reap,
    pids_matching_prefix,
)
from isotax.parsers import procfs
from isotax.protocols import (
    Availability,
    Unavailable,
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
            if shutil.which("crun") and crun_needs_unified_detached():
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
            for pid in tree_pids(d):
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


# One private daemon per userland-proxy setting, shared by this process's instances.
_DAEMONS: dict[bool, PrivateDockerd] = {}
_DAEMON_LOCK = threading.Lock()


def acquire_private(userland_proxy: bool, program: str) -> tuple[PrivateDockerd, bool]:
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


def release_private(d: PrivateDockerd, program: str) -> list[str]:
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
