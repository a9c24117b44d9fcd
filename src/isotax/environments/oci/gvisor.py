"""gVisor: runsc as an OCI runtime over the same bundle as runc and crun (kind "gvisor").

The workload runs on gVisor's user-space kernel, the Sentry, which serves its system calls;
a Gofer process serves the bundle's files to it. Both are host processes of the instance, so
its memory footprint and CPU cost include them (host_pids()).

Plan options (spec.options):
  platform  how the Sentry intercepts the workload's system calls: "systrap" (runsc's default,
            seccomp traps plus patched syscall sites), "ptrace" (the old, slow one) or "kvm"
            (the Sentry as a guest kernel; needs real hardware virtualisation: probed at start,
            and refused with the reason where it fails or hangs).
  overlay2  runsc's --overlay2 (e.g. "none", "root:memory"); unset keeps runsc's default,
            root:self. describe() says what it does with the plan's storage.
The plan's network: "bridge" = gVisor's own netstack (--network=sandbox) on the veth of the
network namespace isotax makes for the container, joined through the OCI netns path, like
runc's; "host" = --network=host, the Sentry's sockets are host kernel sockets (hostinet).

Only a current runsc has systrap and a netstack that works here: Debian bookworm's build
(20221219) has ptrace alone and its netstack refuses to start. scripts/setup.sh builds the
pinned version the way a user would, `go install gvisor.dev/gvisor/runsc@<version>`, into
RUNSC_PATH; runsc_path() is the binary isotax uses (the container engines use it too).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from isotax.environments.base import (
    EnvironmentBase,
    gvisor_socket_stack,
    process_gone,
    register,
)
from isotax.environments.container_fs import VOLUME_DIR
from isotax.environments.oci.instance import OciInstance, same_process
from isotax.environments.oci.runtime import OCI_STATE_ROOT, Runtime, RuntimeLeftovers, probe
from isotax.parsers import procfs
from isotax.protocols import (
    STORAGES,
    Availability,
    EnvSpec,
    Facts,
    Instance,
    Isolation,
    LeakFinder,
    ParamSpec,
    Unavailable,
    VersionCommand,
)

# Where scripts/setup.sh installs isotax's runsc (the version is pinned there, and only there).
RUNSC_DIR = Path("/opt/isotax/runsc")
RUNSC_PATH = RUNSC_DIR / "runsc"
INSTALL_FIX = ("bash scripts/setup.sh as root (builds the runsc version it pins with "
               f"`go install gvisor.dev/gvisor/runsc@<version>` into {RUNSC_PATH})")

PLATFORMS = ("systrap", "ptrace", "kvm")
DEFAULT_PLATFORM = "systrap"
# The plan's network -> runsc's --network.
NETWORKS = {"bridge": "sandbox", "host": "host", "none": "none"}
# The plan's options (the module's docstring says what each does).
OPTION_SPECS = (
    ParamSpec("platform", str, DEFAULT_PLATFORM, "how the Sentry intercepts system calls: "
              "systrap, ptrace or kvm (needs real hardware virtualisation; probed at start)",
              choices=PLATFORMS),
    ParamSpec("overlay2", str, None, "runsc's --overlay2 (e.g. none, root:memory); unset: "
              "runsc's default, root:self"),
)
OPTIONS = tuple(o.name for o in OPTION_SPECS)
# A platform that hangs (kvm on a host whose /dev/kvm is not the real thing) is given this long
# to run /bin/true before it is declared unusable.
PLATFORM_PROBE_S = 20.0


def runsc_path() -> str | None:
    """The runsc isotax runs: its own build (scripts/setup.sh) when installed, else the first
    runsc on PATH (Debian's, which available() explains), else None."""
    if os.access(RUNSC_PATH, os.X_OK):
        return str(RUNSC_PATH)
    return shutil.which("runsc")


def runsc_flags(platform: str, network: str, overlay2: str | None = None) -> list[str]:
    """runsc's global flags for one sandbox. Pure.

    --gofer-network-namespace=new: by default (null) runsc pins one empty network namespace
    for all Gofers with a bind mount under --root that nothing ever removes; a fresh empty one
    per Gofer (gone with it) leaves nothing behind, for a namespace creation per start.
    """
    if platform not in PLATFORMS:
        raise ValueError(f"options.platform {platform!r}: runsc has " + ", ".join(PLATFORMS))
    if network not in NETWORKS:
        raise ValueError(f"network {network!r}: gvisor supports " + ", ".join(NETWORKS))
    flags = [f"--platform={platform}", f"--network={NETWORKS[network]}",
             "--gofer-network-namespace=new"]
    if overlay2 is not None:
        flags.append(f"--overlay2={overlay2}")
    return flags


def parse_state_pids(text: str) -> list[int]:
    """The Sentry's (sandbox) and the Gofer's host pids from a runsc state file (JSON written
    under --root as `<container>_sandbox:<sandbox>.state`). Pure."""
    state = json.loads(text)
    pids = [state.get("sandbox", {}).get("pid", 0), state.get("goferPid", 0)]
    return [int(p) for p in pids if isinstance(p, int) and p > 0]


def overlay_words(overlay2: str | None, storage: str) -> str:
    """What runsc's --overlay2 does with the bundle isotax gives it. Pure."""
    setting = overlay2 or "root:self (runsc's default)"
    if storage == "volume":
        # runsc skips the root overlay for a read-only root, and overlays submounts only with
        # "all:...": the volume is served by the Gofer, writes reach the host directory.
        if overlay2 and overlay2.startswith("all:"):
            return (f"--overlay2={setting}: read-only root not overlaid; the volume at "
                    f"{VOLUME_DIR} IS overlaid, writes stay in the sandbox's overlay")
        return (f"--overlay2={setting}: none in effect (runsc does not overlay a read-only "
                f"root; the volume at {VOLUME_DIR} is a Gofer bind mount, writes reach the host)")
    if overlay2 == "none":
        return "--overlay2=none: writes go through the Gofer to the host's overlayfs root"
    return (f"--overlay2={setting}: a sandbox-internal overlay over the writable root, its "
            "upper layer a tmpfs in the Sentry backed by a filestore file in the rootfs "
            "directory on the host: root writes stay in the sandbox (page cache + that file)")


# -- what hostinet (--network=host) cannot do ---------------------------------------------------

# Measured with the pinned runsc (tests/data/gvisor/hostinet-*.txt): hostinet passes only some
# netdevice ioctls to the host, and SIOCGIFADDR is not one of them (ENOTTY); and its IPv6
# support is probed with os.Stat("/proc/net/if_inet6") from inside the Sentry's chroot, whose
# /proc is a minimal tmpfs without net/, so the probe fails: the sandbox has no
# /proc/net/if_inet6, tcp6 or udp6, although AF_INET6 sockets work (they are host sockets).
# PMIx (Open MPI's mpirun) finds its interfaces exactly that way (SIOCGIFADDR for IPv4,
# /proc/net/if_inet6 for IPv6), finds none, and cannot open the TCP listener its ranks connect
# to; no PMIx or mpirun setting gives it an address another way.
# -- platform probes (kvm) -----------------------------------------------------------------------

_PLATFORM_OK: dict[tuple[str, str], Availability] = {}


def kvm_hint() -> str:
    """What the host's /dev/kvm is, to explain a kvm platform that fails."""
    if not os.path.exists("/dev/kvm"):
        return "no /dev/kvm"
    if os.path.isdir("/sys/module/kvm_pvm"):
        return "/dev/kvm is kvm_pvm (PVM, not hardware virtualisation)"
    return "/dev/kvm present"


def platform_available(binary: str, platform: str) -> Availability:
    """Whether runsc runs /bin/true on `platform` here; probed once per process."""
    key = (binary, platform)
    if key not in _PLATFORM_OK:
        if platform == "kvm" and not os.path.exists("/dev/kvm"):
            _PLATFORM_OK[key] = Availability.no(
                "gvisor platform kvm: no /dev/kvm here", "use options.platform = \"systrap\"")
        else:
            OCI_STATE_ROOT.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(prefix="itx-panic-", dir=OCI_STATE_ROOT) as log:
                # The Sentry's own words (runsc run only says the sandbox went away).
                rt = Runtime("runsc", binary,
                             [*runsc_flags(platform, "bridge"), f"--panic-log={log.name}"])
                a = probe(rt, timeout=PLATFORM_PROBE_S)
                why = first_panic(Path(log.name).read_text(errors="replace"))
            if not a.ok:
                reason = f"{a.reason} ({why})" if why else a.reason
                if platform == "kvm":
                    reason = f"{kvm_hint()}: {reason}"
                fix = (a.fix if platform == DEFAULT_PLATFORM
                       else f"use options.platform = \"{DEFAULT_PLATFORM}\"")
                a = Availability.no(f"gvisor platform {platform}: {reason}", fix)
            _PLATFORM_OK[key] = a
    return _PLATFORM_OK[key]


def first_panic(text: str) -> str:
    """The first `panic: ...` line of a runsc --panic-log, "" when it has none. Pure."""
    for line in text.splitlines():
        if line.startswith("panic: "):
            return line.strip()
    return ""


# -- the instance --------------------------------------------------------------------------------

STOP_GRACE_S = 5.0


def _start_time(pid: int) -> int | None:
    """A process's start time (field 22 of /proc/PID/stat): with the pid, it names one
    process, never a later one that got the same pid."""
    try:
        return procfs.parse_pid_stat(Path(f"/proc/{pid}/stat").read_text()).starttime
    except OSError:
        return None


def _alive(pid: int, start: int | None) -> bool:
    """Still running (not a zombie) and still the same process."""
    return start is not None and same_process(pid, start)

class GvisorInstance(OciInstance):
    """An OciInstance run by runsc: the same bundle, runsc's flags, the Sentry and the Gofer
    counted as the instance's host processes."""

    freezes_its_cgroup = False  # runsc pause stops the sandbox itself

    def __init__(self, runtime: Runtime, spec: EnvSpec, platform: str,
                 overlay2: str | None) -> None:
        self.platform = platform
        self.overlay2 = overlay2
        # The Sentry serves the sockets: through the host's stack on the host's network
        # (hostinet), else through gVisor's own netstack.
        self.socket_stack = gvisor_socket_stack(spec.network)
        super().__init__(runtime, spec)

    def state_file(self) -> Path:
        # isotax's containers are each their own sandbox: sandbox id = container id.
        return self.rt.root / f"{self.cid}_sandbox:{self.cid}.state"

    def host_pids(self) -> Sequence[int]:
        """The Sentry (runsc-sandbox) and the Gofer (runsc-gofer) from runsc's state file, and
        whatever else sits in the container's cgroup; the Sentry's children (systrap's stub
        processes, ptrace's tracees) count as its descendants."""
        pids: list[int] = []
        with contextlib.suppress(OSError, ValueError):
            pids += parse_state_pids(self.state_file().read_text())
        pids += [p for p in super().host_pids() if p not in pids]
        return [p for p in pids if os.path.exists(f"/proc/{p}")]

    def alive(self) -> str:
        """The Sentry and the Gofer from runsc's state file, by pid (`runsc state` still
        says "running" after the sandbox was killed)."""
        if self._stopped:
            return "the sandbox was stopped"
        try:
            state = json.loads(self.state_file().read_text())
        except (OSError, ValueError):
            return f"runsc has no state for the sandbox ({self.state_file().name})"
        for program, pid in (("runsc-sandbox", state.get("sandbox", {}).get("pid", 0)),
                             ("runsc-gofer", state.get("goferPid", 0))):
            if isinstance(pid, int) and pid > 0 and (gone := process_gone(pid)):
                what = "the gVisor sandbox" if program == "runsc-sandbox" else "its Gofer"
                return f"{what} ({program}, pid {pid}) {gone}"
        return ""

    def stop(self) -> None:
        """OciInstance.stop(), then wait until the sandbox's host processes are gone: `runsc
        delete` returns before the Gofer (and systrap's stubs) have exited. Any that outlive
        the grace period are killed by pid, once their start time shows that the pid still
        names the same process."""
        pids = [] if self._stopped else [(p, _start_time(p)) for p in self.host_pids()]
        try:
            super().stop()
        finally:  # the sandbox's processes go whatever else could not be removed
            deadline = time.monotonic() + STOP_GRACE_S
            while time.monotonic() < deadline and any(_alive(p, t) for p, t in pids):
                time.sleep(0.01)
            for p, t in pids:
                if _alive(p, t):
                    with contextlib.suppress(OSError):
                        os.kill(p, signal.SIGKILL)

    def facts(self) -> Facts:
        base = super().facts()
        return dataclasses.replace(
            base, kind="gvisor", runtime=f"runsc {self.rt.version()} ({self.rt.binary})",
            words={**base.words, **self._gvisor_words()})

    def _gvisor_words(self) -> dict[str, str]:
        return {
            "platform": self.platform,
            "netstack": {
                "bridge": "gVisor netstack (--network=sandbox) on the veth in isotax's netns",
                "host": "host kernel sockets (--network=host, hostinet): no SIOCGIFADDR "
                        "ioctl, no /proc/net/{if_inet6,tcp6,udp6} inside, so no mpirun (PMIx "
                        "finds no interface address)",
                "none": "none (--network=none): loopback only",
            }.get(self.network, self.network),
            "overlay2": overlay_words(self.overlay2, self.storage),
            "gofer": "runsc-gofer serves the rootfs and volume (directfs: the Sentry opens "
                     "files itself once the Gofer hands them over); own empty netns",
            "runsc_flags": " ".join(self.rt.flags),
            "affinity": "taskset/sched_setaffinity inside the sandbox binds only gVisor's own "
                        "tasks; the Sentry's host threads run on any CPU of the container's "
                        "cpuset" + (f" (node {self.spec.numa_node}'s)"
                                    if self.spec.numa_node is not None else " (every host CPU)"),
            "first_instruction": "seen in the log (the sandbox's CLOCK_MONOTONIC is its own, "
                                 "not the host's, so the marker's stamp is not used)",
        }


def _options(spec: EnvSpec) -> tuple[str, str | None]:
    unknown = sorted(set(spec.options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"gvisor options {', '.join(unknown)}: known are " + ", ".join(OPTIONS))
    platform = str(spec.options.get("platform", DEFAULT_PLATFORM))
    overlay2 = spec.options.get("overlay2")
    return platform, None if overlay2 is None else str(overlay2)


@register
class Gvisor(EnvironmentBase):
    kind: ClassVar[str] = "gvisor"
    description: ClassVar[str] = ("gVisor (runsc) sandbox over the runc bundle: platform "
                                  "systrap/ptrace/kvm, its netstack on a bridge or host net")
    isolation: ClassVar[Isolation] = Isolation.SANDBOX
    # numa_node: the bundle's cpuset (bundle.py) holds the Sentry, the Gofer and the stubs.
    supports_numa: ClassVar[bool] = True
    # Its sandboxes under runsc's --root, the Sentry (runsc-sandbox) and the Gofer.
    leak_finders: ClassVar[tuple[LeakFinder, ...]] = (RuntimeLeftovers("runsc", runsc_path),)
    options: ClassVar[tuple[ParamSpec, ...]] = OPTION_SPECS
    networks: ClassVar[tuple[str, ...]] = tuple(NETWORKS)  # its netstack, hostinet, or none
    storages: ClassVar[tuple[str, ...]] = STORAGES  # as runc's (overlay2 decides the rest)

    @classmethod
    def recognises(cls, release: str, dmesg: str) -> bool:
        """The Sentry reports a kernel release of its own ("4.4.0" with "gvisor" in some
        versions) and greets in its dmesg."""
        return "gvisor" in release.lower() or "Starting gVisor" in dmesg

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        """The runsc isotax runs (its own build where installed)."""
        return VersionCommand("runsc", (runsc_path() or "runsc", "--version"))

    def available(self) -> Availability:
        try:
            return self._available()
        except Exception as e:  # a probe that breaks is a reason, not a crash
            return Availability.no(f"gvisor probe failed: {e}")

    def _available(self) -> Availability:
        binary = runsc_path()
        if binary is None:
            return Availability.no("runsc is not installed", INSTALL_FIX)
        if os.geteuid() != 0:
            return Availability.no("runsc needs root here (rootless is not supported)",
                                   "run isotax as root")
        a = platform_available(binary, DEFAULT_PLATFORM)
        if a.ok or binary == str(RUNSC_PATH):
            return a
        version = Runtime("runsc", binary).version()
        return Availability.no(
            f"only {binary} (runsc {version}) is installed, and it cannot run isotax's sandbox "
            "(Debian bookworm's 20221219 build lacks systrap and today's flags, and its "
            f"netstack fails here); its probe said: {a.reason}", INSTALL_FIX)

    def start(self, spec: EnvSpec) -> Instance:
        platform, overlay2 = _options(spec)
        flags = runsc_flags(platform, spec.network, overlay2)  # checks the values first
        binary = runsc_path()
        if binary is None:
            raise Unavailable(Availability.no("runsc is not installed", INSTALL_FIX))
        if platform != DEFAULT_PLATFORM:
            a = platform_available(binary, platform)
            if not a.ok:
                raise Unavailable(a)
        return GvisorInstance(Runtime("runsc", binary, flags), spec, platform, overlay2)

