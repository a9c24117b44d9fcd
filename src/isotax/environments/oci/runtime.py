"""runc and crun: an OCI bundle whose root is the workload image's rootfs, read-only (or,
with the plan's storage = "rootfs", an overlayfs over it, as Docker's overlay2 builds).

One implementation, two registered environments (kinds "runc" and "crun"; gvisor.py runs
runsc over the same bundle with its own flags, a Runtime's `flags`). The container's
PID 1 is the image's `itx-ready --hold` (prints the ready marker, then holds the container
open); workloads run through `<runtime> exec`. isotax keeps the runtimes' state under its own
`--root` (/run/isotax/<runtime>) so it never sees or touches anybody else's containers.

crun on a hybrid cgroup host: crun 1.8 refuses to start ("cgroups in hybrid mode not supported,
drop all controllers from cgroupv2") when cgroup2 is mounted at /sys/fs/cgroup/unified with a
controller enabled, as on this kind of machine (hugetlb sits on v2, everything else on v1). The
clean fix that leaves the host untouched is to run every crun command in a private mount
namespace in which that one cgroup2 mount is detached: crun then sees a pure v1 host and works
as it does on any v1 machine. The cost (one unshare + umount, well under a millisecond) is part
of every crun call and therefore part of the start times isotax reports; describe() says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import re
import resource
import secrets
import shlex
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from isotax.environments.base import (
    GUEST_ENV,
    READY_HELPER,
    READY_MARKER,
    Stopwatch,
    bound_cpus,
    parse_ready_marker,
    register,
)
from isotax.environments.native import host_storage
from isotax.host.network import Bridge, Lease, netns_path
from isotax.host.numa import placement_words
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import Availability, Completed, EnvSpec, Instance, Unavailable
from isotax.telemetry.footprint import cgroup_kernel_bytes

# Where disk workloads write inside a container (Instance.data_dir), per plan storage:
# "volume": a host directory bind-mounted on the image's (empty) /mnt, which exists in the
# image, so the runtime never has to create a mount point in the shared, read-only rootfs;
# "rootfs": a directory in the container's own overlayfs root filesystem.
VOLUME_DIR = "/mnt"
ROOTFS_DATA_DIR = "/var/lib/itx-data"
STORAGES = ("volume", "rootfs")
SCRATCH = "/tmp"

# Docker's default capability set: what users of containers usually run with.
DEFAULT_CAPS = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
]
# runc's `spec` defaults: keep the kernel's knobs out of reach, as every engine does.
MASKED_PATHS = [
    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
    "/proc/scsi",
]
READONLY_PATHS = [
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
]

# Where isotax keeps OCI runtime state (`--root`), private so we never list others' containers.
OCI_STATE_ROOT = Path("/run/isotax")


# -- crun's hybrid-cgroup workaround --------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_UNIFIED = b"/sys/fs/cgroup/unified"


def hybrid_cgroup2_with_controllers(mountinfo: str, controllers: str) -> bool:
    """True when the host mounts cgroup v1 hierarchies and, beside them, a cgroup2 at
    /sys/fs/cgroup/unified that has controllers (the layout crun refuses)."""
    v1 = v2_unified = False
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, fstype = left.split(), (right.split() or [""])[0]
        if len(fields) < 5:
            continue
        if fstype == "cgroup" and fields[4].startswith("/sys/fs/cgroup/"):
            v1 = True
        if fstype == "cgroup2" and fields[4] == _UNIFIED.decode():
            v2_unified = True
    return v1 and v2_unified and bool(controllers.split())


def _needs_unified_detached() -> bool:
    try:
        mi = Path("/proc/self/mountinfo").read_text()
        ctl = Path(_UNIFIED.decode(), "cgroup.controllers")
        return hybrid_cgroup2_with_controllers(mi, ctl.read_text() if ctl.exists() else "")
    except OSError:
        return False


def _detach_unified_cgroup2() -> None:
    """preexec_fn for crun: a private mount namespace without /sys/fs/cgroup/unified.
    Propagation is made private *before* the umount, so the host's mount stays untouched."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    if libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "mount --make-rprivate /")
    if libc.umount2(_UNIFIED, _MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "umount /sys/fs/cgroup/unified")


# -- the runtime CLI ----------------------------------------------------------------------------

class Runtime:
    """`<runtime> --root /run/isotax/<runtime> [global flags] ...`, with crun's workaround
    where needed. `binary` is the program to run when it is not `name` on PATH (isotax's own
    runsc build); `flags` are runtime-wide options every command gets before its subcommand
    (runsc's --platform and --network are per sandbox but global on its command line)."""

    def __init__(self, name: str, binary: str | None = None, flags: Sequence[str] = ()) -> None:
        self.name = name
        self.binary = binary or name
        self.flags = list(flags)
        self.root = OCI_STATE_ROOT / name
        self.preexec: Callable[[], None] | None = (
            _detach_unified_cgroup2 if name == "crun" and _needs_unified_detached() else None)

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--root", str(self.root), *self.flags, *args]

    def popen(self, *args: str, stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE,
              ) -> subprocess.Popen[str]:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return subprocess.Popen(self.argv(*args), stdin=subprocess.DEVNULL, stdout=stdout,
                                stderr=stderr, text=True, preexec_fn=self.preexec,
                                start_new_session=True)

    def call(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a runtime command to completion; OSError/timeouts become a failed result."""
        try:
            p = self.popen(*args)
        except OSError as e:
            return subprocess.CompletedProcess(self.argv(*args), 127, "", str(e))
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return subprocess.CompletedProcess(p.args, 124, out, f"timed out after {timeout} s")
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    @functools.cached_property
    def _version(self) -> str:
        p = self.call("--version", timeout=10)
        first = (p.stdout.splitlines() or ["unknown"])[0]
        return parse_version(first)

    def version(self) -> str:
        """Asked once per Runtime: describe() runs on every load-generator lookup."""
        return self._version


def parse_version(first_line: str) -> str:
    """'runc version 1.1.5+ds1' / 'crun version 1.8.1' -> '1.1.5+ds1' / '1.8.1'."""
    m = re.match(r"^\S+ version (\S+)", first_line.strip())
    return m.group(1) if m else first_line.strip()


# -- the bundle --

def _mem_total_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 1 << 30


def bundle_config(*, root: Path, args: Sequence[str], hostname: str, cgroups_path: str,
                  network: str | None, readonly: bool = True, vcpus: int | None = None,
                  memory_mib: int | None = None, extra_mounts: Sequence[Mapping[str, Any]] = (),
                  cpuset: tuple[str, str] | None = None) -> dict[str, Any]:
    """An OCI runtime config. network: None shares the host's netns, "new" gives an empty
    private one, anything else is the path of a netns to join. cpuset: (CPUs, memory nodes)
    of a NUMA placement (numa_node), in place of vcpus' "0-<vcpus-1>" on node 0."""
    mem_bytes = memory_mib * 1024 * 1024 if memory_mib else _mem_total_bytes()
    # /dev/shm: half of memory, like a plain tmpfs, not Docker's 64 MB (MPI and databases use it).
    shm = f"size={mem_bytes // 2 // 1024}k"
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)

    def lim(v: int) -> int:
        return v if v != resource.RLIM_INFINITY else 2**64 - 1

    namespaces: list[dict[str, str]] = [{"type": t} for t in ("pid", "ipc", "uts", "mount")]
    if network == "new":
        namespaces.append({"type": "network"})
    elif network is not None:
        namespaces.append({"type": "network", "path": network})
    resources: dict[str, Any] = {"devices": [{"allow": False, "access": "rwm"}]}
    if cpuset is not None:
        # The runtime writes both into the container's cpuset cgroup before its PID 1 runs:
        # every process in the container, exec'd ones included, inherits them, and the
        # kernel allocates their memory on these nodes only.
        resources["cpu"] = {"cpus": cpuset[0], "mems": cpuset[1]}
    elif vcpus:
        resources["cpu"] = {"cpus": f"0-{vcpus - 1}" if vcpus > 1 else "0", "mems": "0"}
    if memory_mib:
        resources["memory"] = {"limit": memory_mib * 1024 * 1024}
    tmpfs = ["nosuid", "nodev"]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(args),
            "env": [f"{k}={v}" for k, v in {**GUEST_ENV, "TMPDIR": SCRATCH}.items()],
            "cwd": "/",
            "capabilities": {k: DEFAULT_CAPS for k in ("bounding", "effective", "permitted")},
            # The host's own limits: root here lacks CAP_SYS_RESOURCE, so a container may not
            # ask for more, and equal limits keep native and container runs comparable.
            "rlimits": [
                {"type": "RLIMIT_NOFILE", "soft": lim(nofile[0]), "hard": lim(nofile[1])},
                {"type": "RLIMIT_NPROC", "soft": lim(nproc[0]), "hard": lim(nproc[1])},
            ],
            "noNewPrivileges": True,
        },
        "root": {"path": str(root), "readonly": readonly},
        "hostname": hostname,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": [*tmpfs, "noexec", "mode=1777", shm]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
             "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
            {"destination": SCRATCH, "type": "tmpfs", "source": "tmpfs",
             "options": [*tmpfs, "mode=1777"]},
            {"destination": "/run", "type": "tmpfs", "source": "tmpfs",
             "options": [*tmpfs, "mode=755"]},
            *extra_mounts,
        ],
        "linux": {
            "namespaces": namespaces,
            "cgroupsPath": cgroups_path,
            "resources": resources,
            "maskedPaths": MASKED_PATHS,
            "readonlyPaths": READONLY_PATHS,
        },
    }


def write_bundle(bundle: Path, config: Mapping[str, Any]) -> None:
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps(config, indent=1))


def new_container_id(name: str) -> str:
    """itx-<name>-<random>; the name squeezed to what runtimes accept in an id."""
    clean = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:24] or "c"
    return f"itx-{clean}-{secrets.token_hex(3)}"


# -- the network --

def acquire_bridge_lease(tag: str) -> tuple[Bridge, Lease]:
    """A bridge lease for one container. For now each bridged instance owns its bridge (and
    its subnet and NAT rule); sharing one bridge between instances is a change here and in
    release_bridge_lease only."""
    bridge = Bridge(name=f"itx-br{tag}")
    try:
        bridge.up()
        return bridge, bridge.add_netns(tag)
    except BaseException:
        bridge.down()
        raise


def release_bridge_lease(bridge: Bridge, lease: Lease) -> None:
    try:
        bridge.release(lease)
    finally:
        bridge.down()


# -- the instance --

class OverlayRoot:
    """A writable overlayfs root over the image rootfs, as Docker's overlay2 builds: upper
    and work directories under the instance's workdir, mounted on the host (at
    <workdir>/<name>-rootfs, an itx- path find_leaks() sees) and handed to the runtime."""

    def __init__(self, workdir: Path, name: str) -> None:
        self.upper = workdir / f"{name}-upper"
        self.work = workdir / f"{name}-work"
        self.merged = workdir / f"{name}-rootfs"
        self.mounted = False

    def mount(self, lower: Path) -> Path:
        """Mount it and make ROOTFS_DATA_DIR in it; the merged directory."""
        for d in (self.upper, self.work, self.merged):
            d.mkdir(parents=True, exist_ok=True)
        opts = f"lowerdir={lower},upperdir={self.upper},workdir={self.work}"
        p = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(self.merged)],
                           capture_output=True, text=True, check=False, timeout=30)
        if p.returncode != 0:
            raise Unavailable(Availability.no(
                f"overlayfs mount for the rootfs failed: {p.stderr.strip()}",
                "modprobe overlay, or use storage = \"volume\""))
        self.mounted = True
        # Made through the overlay, so it exists in the upper layer only.
        (self.merged / ROOTFS_DATA_DIR.lstrip("/")).mkdir(parents=True, exist_ok=True)
        return self.merged

    def remove(self) -> None:
        """Unmount (lazily if something still holds it), then remove the directories: the
        merged one only once unmounted, so a removal can never reach through the overlay."""
        if self.mounted:
            p = subprocess.run(["umount", str(self.merged)], capture_output=True, check=False,
                               timeout=30)
            if p.returncode != 0:
                subprocess.run(["umount", "-l", str(self.merged)], capture_output=True,
                               check=False, timeout=30)
            self.mounted = os.path.ismount(self.merged)
        if not self.mounted:
            for d in (self.merged, self.upper, self.work):
                shutil.rmtree(d, ignore_errors=True)


class OciInstance:
    scratch = SCRATCH

    def __init__(self, runtime: Runtime, spec: EnvSpec) -> None:
        self.rt = runtime
        self.command_line = ""  # the runtime command that started it
        self.spec = spec
        self.cid = new_container_id(spec.name)
        self.bundle = spec.workdir / f"bundle-{self.cid}"
        self.log = spec.workdir / f"{self.cid}.log"
        self.network = spec.network
        self._bridge: Bridge | None = None
        self._lease: Lease | None = None
        self._stopped = False
        self.address = "127.0.0.1"
        # Storage (see VOLUME_DIR): the host side of the volume, or the overlay's directories.
        self.storage = spec.storage
        self._volume: Path | None = None
        self._overlay = OverlayRoot(spec.workdir, self.cid)
        self.data_dir = ROOTFS_DATA_DIR if spec.storage == "rootfs" else VOLUME_DIR
        self.milestones: Mapping[str, float] = {}
        # NUMA placement: the node's CPUs (the first vcpus of them where the plan limits the
        # count) and its memory, as the container's cpuset.
        self.node_cpus = bound_cpus(self.rt.name, spec)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        sw = Stopwatch()
        spec = self.spec
        rootfs = spec.image.rootfs.resolve()
        if not (rootfs / "bin").exists():
            raise Unavailable(Availability.no(
                f"image rootfs {rootfs} is missing or empty", "build it: isotax image build"))
        if spec.network not in ("host", "bridge", "none"):
            raise ValueError(f"network {spec.network!r}: {self.rt.name} supports host, bridge, "
                             "none")
        if spec.storage not in STORAGES:
            raise ValueError(f"storage {spec.storage!r}: {self.rt.name} supports "
                             + ", ".join(STORAGES))
        netns: str | None = None
        if spec.network == "bridge":
            self._bridge, self._lease = acquire_bridge_lease(self.cid.rsplit("-", 1)[1])
            assert self._lease.netns is not None
            netns = netns_path(self._lease.netns)
            self.address = self._lease.ip
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
        """The bundle's root and extra mounts for the plan's storage.

        "volume" (default): the image rootfs read-only, as before, plus a host directory under
        the workdir bind-mounted read-write at VOLUME_DIR (`docker run --read-only -v`).
        "rootfs": the image rootfs as the lower layer of an overlayfs whose upper and work
        directories are under the workdir, mounted on the host and given to the runtime as a
        writable root, as Docker's overlay2 driver does; data_dir is a directory in it, so disk
        I/O goes through overlayfs (copy-up on first write, then the upper's ext4). Only this
        storage gets the overlay: the read-only image root is every other workload's
        environment (and its start time), and an overlay mount would add a mount and a
        writable root to them for no measured purpose.
        """
        if self.storage == "volume":
            self._volume = self.spec.workdir / f"{self.cid}-volume"
            self._volume.mkdir(parents=True, exist_ok=True)
            return rootfs, [{"destination": VOLUME_DIR, "type": "bind",
                             "source": str(self._volume), "options": ["rbind", "rw"]}]
        return self._overlay.mount(rootfs), []

    def _release_storage(self) -> None:
        """Remove the overlay (OverlayRoot.remove) and the volume."""
        self._overlay.remove()
        if self._volume is not None:
            shutil.rmtree(self._volume, ignore_errors=True)

    def _log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no output)"
        return " | ".join(lines[-3:]) or "(no output)"

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
                os.killpg(p.pid, signal.SIGKILL)
                out, err = p.communicate()
            rc, err = 124, f"timed out after {timeout:.0f} s\n{err}"
        wall = time.monotonic() - t0
        if rc != 0 and rc != 124 and exec_not_found(err):
            rc = 127
        return Completed(tuple(argv), rc, out, err, wall)

    def describe(self) -> Mapping[str, str]:
        return {
            "kind": self.rt.name,
            "runtime": f"{self.rt.name} {self.rt.version()}",
            "command_line": self.command_line,
            "container": self.cid,
            "network": self.network,
            "address": self.address,
            "bridge": self._bridge.name if self._bridge else "",
            "cpus": f"{self.node_cpus} (cpuset)" if self.node_cpus is not None
            else f"0-{self.spec.vcpus - 1} (cpuset)" if self.spec.vcpus else "all (no limit)",
            "memory": f"{self.spec.memory_mib} MiB (limit)" if self.spec.memory_mib
            else "no limit",
            "numa": placement_words(self.spec.numa_node, "cpuset", self.node_cpus),
            "seccomp": "none",
            "rootfs": ("overlayfs over the image rootfs, writable" if self.storage == "rootfs"
                       else "image rootfs, read-only") + "; tmpfs /tmp /run /dev/shm",
            "storage": self._storage_words(),
            "cgroup_workaround": "private mount ns without /sys/fs/cgroup/unified"
            if self.rt.preexec else "none",
            "pid1": " ".join(self.hold),
        }

    def _storage_words(self) -> str:
        if self.storage == "rootfs":
            upper = host_storage(self._overlay.upper)
            return (f"overlayfs rootfs (lower: image rootfs, upper: {upper})"
                    f", data in {self.data_dir}")
        where = host_storage(self._volume) if self._volume else "unknown"
        return f"bind-mounted volume at {VOLUME_DIR} (host directory, {where})"

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
                    return [int(x) for x in (d / "cgroup.procs").read_text().split()]
        return []

    def kernel_memory_bytes(self) -> int | None:
        return cgroup_kernel_bytes(*self._cgroup_dirs())

    def pause(self) -> None:
        p = self.rt.call("pause", self.cid)
        if p.returncode != 0:
            raise RuntimeError(f"{self.rt.name} pause {self.cid}: {p.stderr.strip()}")

    def resume(self) -> None:
        p = self.rt.call("resume", self.cid)
        if p.returncode != 0:
            raise RuntimeError(f"{self.rt.name} resume {self.cid}: {p.stderr.strip()}")

    def stop(self) -> None:
        """Kill, delete, release the network, remove the bundle. Idempotent; never raises."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(Exception):
            # A paused (frozen) container cannot die from KILL until thawed.
            if self.state() == "paused":
                self.rt.call("resume", self.cid)
            self.rt.call("kill", self.cid, "KILL", timeout=10)
        with contextlib.suppress(Exception):
            self.rt.call("delete", "--force", self.cid, timeout=30)
        if self._bridge is not None:
            with contextlib.suppress(Exception):
                if self._lease is not None:
                    release_bridge_lease(self._bridge, self._lease)
                else:
                    self._bridge.down()
        with contextlib.suppress(Exception):
            self._release_storage()
        shutil.rmtree(self.bundle, ignore_errors=True)


def exec_not_found(stderr: str) -> bool:
    """The runtime's words for 'no such program' (runc, crun and runsc say it differently)."""
    # runc: 'exec: "x": executable file not found in $PATH' (or 'exec: "/x": stat /x: no such
    # file or directory'); crun: 'executable file `x` not found in $PATH'; runsc: 'error
    # finding executable "x" in PATH [...]: no such file or directory' (or 'failed to load
    # /x: no such file or directory').
    return bool(re.search(r'executable file (not found|`[^`]*` not found)'
                          r'|exec: \\?"[^"]*": stat [^:]*: no such file'
                          r'|error finding executable "[^"]*" in PATH'
                          r'|in sandbox: failed to load [^:]*: no such file', stderr))


# -- the environments --

def _probe_bundle(dirpath: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A rootfs made of the host's own /usr, bound read-only: enough to run /bin/true without
    depending on a built image."""
    root = dirpath / "rootfs"
    root.mkdir()
    mounts: list[dict[str, Any]] = []
    for d in ("bin", "sbin", "lib", "lib64", "usr"):
        host = Path("/") / d
        if host.is_symlink():  # merged /usr: /bin -> usr/bin
            (root / d).symlink_to(os.readlink(host))
        elif host.is_dir():
            (root / d).mkdir()
            mounts.append({"destination": f"/{d}", "type": "bind", "source": str(host),
                           "options": ["rbind", "ro"]})
    return root, mounts


def remove_cgroups(cid: str, root: Path = Path("/sys/fs/cgroup")) -> None:
    """Remove a container's cgroups (cgroups_path "/<cid>") that its runtime left behind: a
    sandbox that panics at start (runsc on an unusable platform) is deleted without them.
    Only empty groups can go; a few tries while its last processes exit."""
    for _ in range(20):
        left = [d for d in (*root.glob(f"*/{cid}"), root / cid) if d.is_dir()]
        for d in left:
            with contextlib.suppress(OSError):
                d.rmdir()
        if not any(d.is_dir() for d in left):
            return
        time.sleep(0.05)


def probe(runtime: Runtime, timeout: float = 30) -> Availability:
    """Run /bin/true in a throwaway container; say why it failed and what to do."""
    if shutil.which(runtime.binary) is None:
        return Availability.no(f"{runtime.name} is not installed",
                               f"apt-get install {runtime.name}")
    if os.geteuid() != 0:
        return Availability.no(f"{runtime.name} needs root here (rootless is not supported)",
                               "run isotax as root")
    OCI_STATE_ROOT.mkdir(parents=True, exist_ok=True)
    cid = new_container_id("probe")
    with tempfile.TemporaryDirectory(prefix="itx-probe-", dir=OCI_STATE_ROOT) as tmp:
        root, mounts = _probe_bundle(Path(tmp))
        write_bundle(Path(tmp) / "bundle", bundle_config(
            root=root, args=["/bin/true"], hostname=cid, cgroups_path=f"/{cid}",
            network="new", extra_mounts=mounts))
        p = runtime.call("run", "--bundle", str(Path(tmp) / "bundle"), cid, timeout=timeout)
        runtime.call("delete", "--force", cid, timeout=10)
        remove_cgroups(cid)
    if p.returncode != 0:
        msg = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        fix = "see MACHINE-NOTES (crun and hybrid cgroups)" if "hybrid" in msg[0] else \
            f"run `{' '.join(runtime.argv('run', '--bundle', 'B', 'X'))}` by hand"
        return Availability.no(f"{runtime.name} cannot run a container: {msg[0]}", fix)
    return Availability.yes()


class _Oci:
    kind: ClassVar[str]
    description: ClassVar[str]
    # numa_node: the node's CPUs and memory as the container's cpuset (linux.resources.cpu).
    supports_numa: ClassVar[bool] = True

    def available(self) -> Availability:
        try:
            return probe(Runtime(self.kind))
        except Exception as e:  # never raises: a probe that breaks is a reason, not a crash
            return Availability.no(f"{self.kind} probe failed: {e}")

    def start(self, spec: EnvSpec) -> Instance:
        return OciInstance(Runtime(self.kind), spec)


@register
class Runc(_Oci):
    kind: ClassVar[str] = "runc"
    description: ClassVar[str] = ("runc container: image rootfs (read-only, or overlayfs), "
                                  "host, bridge+NAT or no net")


@register
class Crun(_Oci):
    kind: ClassVar[str] = "crun"
    description: ClassVar[str] = ("crun container: image rootfs (read-only, or overlayfs), "
                                  "host, bridge+NAT or no net")


# -- start time ------------------------------------------------------------------------------------

def start_times_ms(runtime: str, image: ImageArtifacts, n: int = 20,
                   network: str = "new") -> list[float]:
    """Wall time of `<runtime> run` of /bin/true in a fresh container, create through exit and
    delete, n times. network "new" gives each container its own empty netns (as
    `docker --network none`); "host" shares the host's."""
    rt = Runtime(runtime)
    rootfs = image.rootfs.resolve()
    times = []
    with tempfile.TemporaryDirectory(prefix="itx-start-", dir=OCI_STATE_ROOT) as tmp:
        for _ in range(n):
            cid = new_container_id("start")
            bundle = Path(tmp) / cid
            write_bundle(bundle, bundle_config(
                root=rootfs, args=["/bin/true"], hostname=cid, cgroups_path=f"/{cid}",
                network=None if network == "host" else "new"))
            t0 = time.perf_counter()
            p = rt.call("run", "--bundle", str(bundle), cid, timeout=30)
            dt = (time.perf_counter() - t0) * 1000
            if p.returncode != 0:
                rt.call("delete", "--force", cid)
                raise RuntimeError(f"{runtime} run /bin/true failed: {p.stderr.strip()}")
            times.append(dt)
            shutil.rmtree(bundle, ignore_errors=True)
    return times


def median_start_ms(runtime: str, image: ImageArtifacts, n: int = 20,
                    network: str = "new") -> float:
    return statistics.median(start_times_ms(runtime, image, n, network))
