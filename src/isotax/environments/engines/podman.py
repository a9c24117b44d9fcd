"""podman: containers of the workload image run by Podman (rootful, daemonless; see engine.py).

isotax keeps Podman's state apart from anybody else's: its own storage (--root
/var/lib/isotax/podman, the image store, kept like the image cache), run root
(/run/itx-podman) and network directory (/run/itx-podman/net.d). Its network backend is
netavark, named on every command line (--network-backend): Podman 5 has no other, and Podman 4
would otherwise pick one from the host's containers.conf or, unset, from what its store held
before (CNI for a store that has images, as isotax's has). A bridged container gets its own
bridge itx-brp<tag> (isotax's network.Bridge: a free /24, NAT) described to Podman as a
netavark network, so no podman0 is ever made. netavark's IPAM database is Podman's shared one
(/run/containers/networks, the same for every rootful Podman on the host): `podman network rm`
removes isotax's network from it.

Ports (engine.py explains why): rootful Podman reserves every published port with a listening
socket that conmon holds, so by default the load generator maps them to the container's address
on its bridge with the same DNAT Podman's portmap plugin installs; options.publish = true
publishes them with `-p` on the bridge's gateway (loadgen's "published" mode).

conmon, Podman's per-container monitor, counts toward the container's cost (host_pids). With
the last instance of the process gone, the chains netavark left in iptables (NETAVARK_FORWARD,
NETAVARK-HOSTPORT-*: it removes only its per-network ones) are removed, and the storage's own
private bind mounts are unmounted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import threading
from pathlib import Path
from typing import Any, ClassVar

from pyroute2 import IPRoute

from isotax.environments.base import Stopwatch, register, start_or_undo
from isotax.environments.engines.client import LABEL, EngineCli, labelled_leftovers
from isotax.environments.engines.dockerd import (
    RUNSC,
    crun_wrapper_text,
    mounts_under,
    runsc_platform,
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
    iptables_snapshot,
    remove_iptables_leftovers,
)
from isotax.environments.runtime_cli import parse_version, runtime_version
from isotax.host import command
from isotax.host.facts.cgroups import crun_needs_unified_detached
from isotax.host.network import Bridge, uplink_mtu
from isotax.host.processes import pids_matching
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

ROOT = Path("/var/lib/isotax/podman")
RUNROOT = Path("/run/itx-podman")
NET_DIR = RUNROOT / "net.d"
NETWORK_BACKEND = "netavark"
# Where Podman looks for its helper binaries (containers.conf's helper_binaries_dir default);
# Debian's netavark is /usr/lib/podman/netavark.
HELPER_DIRS = ("/usr/local/libexec/podman", "/usr/local/lib/podman", "/usr/libexec/podman",
               "/usr/lib/podman")


def podman_flags() -> list[str]:
    # --network-backend: a global option Podman 4 hides (its own tests use it) and Podman 5
    # keeps; a flag rather than a containers.conf of isotax's own (CONTAINERS_CONF), which
    # would replace all of the host's containers.conf, not only the backend.
    return ["--root", str(ROOT), "--runroot", str(RUNROOT), "--network-backend",
            NETWORK_BACKEND, "--network-config-dir", str(NET_DIR), "--tmpdir",
            str(RUNROOT / "libpod"), "--cgroup-manager", "cgroupfs", "--events-backend",
            "file", "--storage-driver", "overlay"]


def netavark_network(name: str, bridge: str, subnet: str, gateway: str,
                     mtu: int = 1500) -> dict[str, Any]:
    """The netavark network Podman 4.3 writes for `podman network create` (its JSON in the
    network directory, <name>.json), on isotax's bridge. Written by hand because `podman
    network create` refuses a subnet that is already on a host interface, as the bridge's is.
    No DNS (aardvark-dns stays off, as the CNI network had no dnsname); the veth gets the host
    uplink's MTU, as isotax's own links do. Podman wants a 64-hex id: the name's sha256. Pure."""
    return {
        "name": name,
        "id": hashlib.sha256(name.encode()).hexdigest(),
        "driver": "bridge",
        "network_interface": bridge,
        "created": "2000-01-01T00:00:00Z",  # fixed: a pure function, and nobody reads it
        "subnets": [{"subnet": subnet, "gateway": gateway}],
        "ipv6_enabled": False,
        "internal": False,
        "dns_enabled": False,
        "options": {"mtu": str(mtu)},
        "labels": {LABEL: "1"},
        "ipam_options": {"driver": "host-local"},
    }


def parse_network_backend(text: str) -> str:
    """The backend `podman info --format {{.Host.NetworkBackend}}` printed ("netavark",
    "cni"); "" for anything else (an error, an old Podman without the field). Pure."""
    word = text.strip()
    return word if word.isalpha() and word.islower() else ""


def netavark_binary() -> str | None:
    return next((str(Path(d, "netavark")) for d in HELPER_DIRS
                 if Path(d, "netavark").is_file()), None)


def runsc_wrapper_text(platform: str, host_network: bool) -> str:
    """runsc with its platform (and, on the host's network, --network=host: without it runsc
    starts its own netstack in the host's namespace, which it refuses). Pure."""
    net = " --network=host" if host_network else ""
    return f"#!/bin/sh\nexec {RUNSC} --platform={platform}{net} \"$@\"\n"


_LOCK = threading.Lock()
_USERS = 0
_IPTABLES: dict[str, str] = {}


def _acquire() -> None:
    global _USERS, _IPTABLES
    with _LOCK:
        if _USERS == 0:
            _IPTABLES = iptables_snapshot()
        _USERS += 1


def _release(cli: EngineCli) -> list[str]:
    """The last instance of the process: netavark's chains and the storage's mounts go."""
    global _USERS, _IPTABLES
    with _LOCK:
        _USERS -= 1
        if _USERS > 0:
            return []
        errors: list[str] = []
        left = cli.call("ps", "-aq", timeout=30).stdout.split()
        if left:  # another isotax process's containers: leave the shared state alone
            return errors
        if _IPTABLES:
            errors += remove_iptables_leftovers(_IPTABLES, ("NETAVARK",), ("itx-brp",))
            _IPTABLES = {}
        for point in mounts_under((str(ROOT), str(RUNROOT))):
            p = command.run(["umount", "-l", point], 30)
            if p.returncode != 0:
                errors.append(f"umount {point}: {p.stderr.strip()}")
        shutil.rmtree(RUNROOT, ignore_errors=True)
        return errors


class PodmanInstance(EngineInstance):
    engine = "podman"
    options: ClassVar[tuple[str, ...]] = ("publish",)

    def __init__(self, spec: EnvSpec) -> None:
        super().__init__(spec)
        self.cli = EngineCli("podman", podman_flags())
        self._bridge: Bridge | None = None
        self._net_file: Path | None = None
        self._network_backend = ""
        self._acquired = False
        start_or_undo(self._start, self.stop)

    def _prepare_engine(self, sw: Stopwatch) -> None:
        _acquire()
        self._acquired = True
        for d in (ROOT, RUNROOT, NET_DIR, RUNROOT / "libpod", RUNROOT / "runtimes"):
            d.mkdir(parents=True, exist_ok=True)

    def _runtime_flags(self) -> tuple[list[str], list[str]]:
        """Podman takes the runtime as a global --runtime PATH. It records the path with the
        container, but later commands find a runtime only among those they know, so every
        command of this instance gets the same flag (the instance's cli). A small wrapper
        carries flags (runsc's platform, crun's cgroup workaround)."""
        before, run = self._runtime_choice()
        self.cli = EngineCli("podman", [*podman_flags(), *before])
        return [], run

    def _runtime_choice(self) -> tuple[list[str], list[str]]:
        rt = self.choices.runtime
        wrappers = RUNROOT / "runtimes"
        if rt == "kata":
            raise Unavailable(Availability.no(
                "podman cannot run Kata Containers 2 or later: Kata ships only a containerd "
                "shim v2 (containerd-shim-kata-v2), no OCI command-line runtime for conmon",
                'use kind "docker" (Docker 23+) with options.runtime = "kata"'))
        if rt == "runc":
            path = shutil.which("runc")
            if path is None:
                raise Unavailable(Availability.no("runc is not installed", "apt-get install runc"))
            self._runtime_words = f"runc {runtime_version('runc')} via conmon"
            return ["--runtime", path], []
        if rt == "crun":
            crun = shutil.which("crun")
            if crun is None:
                raise Unavailable(Availability.no("crun is not installed", "apt-get install crun"))
            self._runtime_words = f"crun {runtime_version('crun')} via conmon"
            if not crun_needs_unified_detached():
                return ["--runtime", crun], []
            w = wrappers / "crun-unified-detached"
            w.write_text(crun_wrapper_text(crun))
            w.chmod(0o755)
            self._runtime_words += " (wrapped: private mount ns without /sys/fs/cgroup/unified)"
            return ["--runtime", str(w)], []
        if not RUNSC.exists():
            raise Unavailable(Availability.no(
                f"no current runsc at {RUNSC}", "scripts/setup.sh installs one there"))
        platform = runsc_platform(RUNSC)
        net = " --network=host" if self.choices.network == "host" else ""
        w = wrappers / f"runsc-{platform}{'-host' if net else ''}"
        w.write_text(runsc_wrapper_text(platform, bool(net)))
        w.chmod(0o755)
        p = command.run([str(RUNSC), "--version"], 10)
        first = (p.stdout.splitlines() or ["runsc"])[0]
        self._runtime_words = f"runsc {parse_version(first)} ({platform}) via conmon"
        return ["--runtime", str(w)], []

    def _network_flags(self) -> tuple[str | None, list[str]]:
        tag = self.name.rsplit("-", 1)[1]
        self._bridge = Bridge(name=f"itx-brp{tag}")
        self._bridge.up()
        self.bridge_name = self._bridge.name
        net = self._bridge.name
        self._net_file = NET_DIR / f"{net}.json"
        with IPRoute() as ipr:
            mtu = uplink_mtu(ipr)
        self._net_file.write_text(json.dumps(netavark_network(
            net, self._bridge.name, str(self._bridge.network), self._bridge.gateway, mtu),
            indent=1))
        return (self._bridge.gateway if self.publish else None), ["--network", net]

    def _rm_flags(self) -> list[str]:
        # --time 0: kill at once, as `docker rm -f` does (podman would wait 10 s for a stop).
        return ["--force", "--volumes", "--time", "0"]

    def _log_path(self, container_id: str) -> Path | None:
        # k8s-file, Podman's default log driver, in the container's userdata directory.
        return ROOT / "overlay-containers" / container_id / "userdata" / "ctr.log"

    def _engine_pids(self) -> list[int]:
        return pids_matching("conmon", ["-c", self.container_id]) if self.container_id else []

    def _engine_version(self) -> str:
        p = self.cli.call("version", "--format", "{{.Client.Version}}", timeout=20)
        # The backend as Podman itself reports it (not as isotax asked for it): what ran.
        info = self.cli.call("info", "--format", "{{.Host.NetworkBackend}}", timeout=20)
        self._network_backend = parse_network_backend(info.stdout) if info.returncode == 0 \
            else ""
        return f"podman {p.stdout.strip()}" if p.returncode == 0 else "podman"

    def _engine_words(self) -> dict[str, str]:
        d = {"daemon": "none (podman is daemonless; conmon per container)",
             "storage_root": str(ROOT),
             "network_backend": self._network_backend or "unknown"}
        if self.import_s:
            d["image_import_s"] = f"{self.import_s:.1f}"
        return d

    def _release_engine(self) -> None:
        if self._net_file is not None:
            # Through Podman, which also drops the network from netavark's shared IPAM
            # database; the file itself goes in any case.
            self.cli.call("network", "rm", self._net_file.stem, timeout=30)
            self._net_file.unlink(missing_ok=True)
            self._net_file = None
        if self._bridge is not None:
            b, self._bridge = self._bridge, None
            try:
                b.down()
            except Exception as e:
                self.release_errors.append(f"bridge {b.name}: {e}")
        if self._acquired:
            self._acquired = False
            self.release_errors += _release(self.cli)


def podman_leaks() -> list[Leftover]:
    """isotax-labelled Podman containers and volumes in isotax's own storage, networks left
    in its network directory, conmon processes of its containers."""
    out: list[Leftover] = []
    # The same backend as the run: a container's network is torn down by the one that made it.
    podman = ("podman", "--root", str(ROOT), "--runroot", str(RUNROOT), "--network-backend",
              NETWORK_BACKEND)
    if not RUNROOT.is_dir():
        # No podman of isotax's is live (asking podman would set up its run root and storage
        # mounts): its storage's own container list says what a crashed run left.
        with contextlib.suppress(OSError, ValueError):
            listed = json.loads((ROOT / "overlay-containers" / "containers.json").read_text())
            for c in listed:
                name = next(iter(c.get("names") or []), c.get("id", "?"))
                out.append(Leftover(f"podman container {name} in {ROOT}",
                                    [(*podman, "rm", "-f", name)], stage=Stage.CONTAINER))
    elif shutil.which("podman") is not None:
        out += labelled_leftovers(EngineCli("podman", podman_flags()), "podman", podman, 30)
    if NET_DIR.is_dir():
        # *.conflist: CNI networks of an isotax before netavark.
        for f in sorted([*NET_DIR.glob("*.json"), *NET_DIR.glob("*.conflist")]):
            out.append(Leftover(f"podman network {f}", [("rm", str(f))]))
    return out


@register
class Podman(Engine):
    kind: ClassVar[str] = "podman"
    description: ClassVar[str] = ("Podman (rootful, own storage): the image imported; "
                                  "bridge+ports (netavark) or host net; runc/crun/runsc")
    # What a killed run leaves: its own (above), and rules netavark made for isotax's bridge.
    leak_finders: ClassVar[tuple[LeakFinder, ...]] = (podman_leaks, engine_iptables_leaks)
    options: ClassVar[tuple[ParamSpec, ...]] = (
        STORAGE_OPTION,
        runtime_option(("runc", "crun", "runsc"), " (not kata: Kata 2+ has no OCI command-line "
                       "runtime for conmon; kind docker runs it)"),
        PUBLISH_OPTION)

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        return VersionCommand("podman", ("podman", "--version"))

    def available(self) -> Availability:
        lacking = self.missing((("podman", "podman"), ("conmon", "conmon"),
                                ("iptables", "iptables"), ("unshare", "util-linux")))
        if lacking is not None:
            return lacking
        # Every podman command of isotax's names netavark: without it none would run.
        if netavark_binary() is None:
            return Availability.no(
                f"netavark is not installed (podman's network backend; looked in "
                f"{', '.join(HELPER_DIRS)})", "apt-get install netavark aardvark-dns")
        return Availability.yes()

    def start(self, spec: EnvSpec) -> Instance:
        return PodmanInstance(spec)
