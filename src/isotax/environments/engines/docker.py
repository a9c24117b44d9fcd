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

import shutil
from pathlib import Path
from typing import ClassVar

from isotax.environments.base import Stopwatch, exit_words, register, start_or_undo
from isotax.environments.engines.client import EngineCli, EngineError, labelled_leftovers
from isotax.environments.engines.commands import KATA_INSTALL, KATA_RUNTIME_TYPE, KATA_SHIM
from isotax.environments.engines.dockerd import (
    DATA_ROOT,
    EXEC_ROOT_PREFIX,
    RUNSC,
    SYSTEM_SOCKET,
    PrivateDockerd,
    acquire_private,
    docker_cli,
    release_private,
    runs_shim_runtimes,
    runsc_platform,
    system_daemon,
)
from isotax.environments.engines.engine import (
    PUBLISH_OPTION,
    STORAGE_OPTION,
    Engine,
    EngineInstance,
    runtime_option,
)
from isotax.environments.engines.iptables import (
    engine_iptables_leaks,
)
from isotax.environments.runtime_cli import parse_version, runtime_version
from isotax.host import command
from isotax.host.facts.cgroups import crun_needs_unified_detached
from isotax.host.network import Bridge
from isotax.host.processes import (
    pids_matching,
    pids_matching_prefix,
    process_leftover,
    read_cmdline,
)
from isotax.protocols import (
    Availability,
    EnvSpec,
    Instance,
    LeakFinder,
    Leftover,
    ParamSpec,
    Unavailable,
    VersionCommand,
)


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
        start_or_undo(self._start_all, self.stop)

    def _prepare_engine(self, sw: Stopwatch) -> None:
        if system_daemon(self.program):
            self.cli = EngineCli(self.program, ["-H", f"unix://{SYSTEM_SOCKET}"])
        else:
            self.daemon, started = acquire_private(self.userland_proxy, self.program)
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
        words = f"{rt} {runtime_version(rt)} via dockerd's containerd-shim-runc-v2"
        if rt == "crun" and crun_needs_unified_detached():
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

    def _start_all(self) -> None:
        self._start()
        self._after_start()

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
            self.release_errors = release_private(d, self.program)


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
        flags = ["-H", f"unix://{SYSTEM_SOCKET}"]
        out += labelled_leftovers(EngineCli(program, flags), "docker", [program, *flags], 20,
                                  short_how=True)
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
        not_root = self.missing(())
        if not_root is not None:
            return not_root
        program = docker_cli()
        if program is None:
            return Availability.no("docker is not installed", "apt-get install docker.io")
        if system_daemon(program):
            return Availability.yes()
        return self.missing((("dockerd", "docker.io"), ("containerd", "containerd"),
                             ("iptables", "iptables"), ("unshare", "util-linux")),
                            "no dockerd runs and ") or Availability.yes()

    def start(self, spec: EnvSpec) -> Instance:
        return DockerInstance(spec)
