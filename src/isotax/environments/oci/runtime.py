"""The OCI runtime's command line (runc, crun, runsc): `<runtime> --root /run/isotax/<runtime>
[global flags] ...`, its probe (a throwaway container running /bin/true), its words for a
missing program, and what its containers leave behind if isotax is killed. isotax keeps the
runtimes' state under its own `--root` so it never sees or touches anybody else's containers.

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
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isotax.environments.oci.bundle import (
    bundle_config,
    new_container_id,
    probe_bundle,
    write_bundle,
)
from isotax.environments.runtime_cli import parse_version
from isotax.host import command, owners
from isotax.host.facts import cgroups
from isotax.host.processes import leftover_processes, names_itx
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import Availability, Completed, Leftover, Stage

# Where isotax keeps OCI runtime state (`--root`), private so we never list others' containers.
OCI_STATE_ROOT = Path("/run/isotax")
# Where a probe's or a start-time measurement's bundle and rootfs go: not under /run, which
# systemd mounts nosuid,nodev,noexec; runsc's gofer remounts the bundle's root read-only
# keeping only nosuid,nodev, and the kernel refuses to drop the locked noexec (EPERM: "Error
# setting up root FS", seen in the guest room's Debian 12 and 13 guests). /var/tmp is on a
# disk, as a run's own workdir is, and the leak finder looks there.
BUNDLE_SCRATCH = Path("/var/tmp")


# -- crun's hybrid-cgroup workaround --------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_MNT_DETACH = 2
_UNIFIED = cgroups.UNIFIED.encode()


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
            _detach_unified_cgroup2 if name == "crun" and cgroups.crun_needs_unified_detached()
            else None)

    def argv(self, *args: str) -> list[str]:
        return [self.binary, "--root", str(self.root), *self.flags, *args]

    def popen(self, *args: str, stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE,
              ) -> subprocess.Popen[str]:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return subprocess.Popen(self.argv(*args), stdin=subprocess.DEVNULL, stdout=stdout,
                                stderr=stderr, text=True, preexec_fn=self.preexec,
                                start_new_session=True)

    def call(self, *args: str, timeout: float = 30) -> Completed:
        """Run a runtime command to completion (host.command.run: a timeout is 124, its process
        group killed; a missing runtime 127)."""
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return command.run(self.argv(*args), timeout, preexec=self.preexec)

    @functools.cached_property
    def _version(self) -> str:
        p = self.call("--version", timeout=10)
        first = (p.stdout.splitlines() or ["unknown"])[0]
        return parse_version(first)

    def version(self) -> str:
        """Asked once per Runtime: describe() runs on every load-generator lookup."""
        return self._version


# -- probe and clean-up --------------------------------------------------------------------------

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
    with tempfile.TemporaryDirectory(prefix=owners.temp_prefix("probe"),
                                     dir=BUNDLE_SCRATCH) as tmp:
        root, mounts = probe_bundle(Path(tmp))
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




# -- what a killed run leaves ---------------------------------------------------------------------

def runtime_state_containers(entries: list[Path]) -> list[str]:
    """Container ids in an OCI runtime's --root: runc's and crun's directories, runsc's state
    files (a runsc root also holds `.lock` files, and may hold a pinned `null-netns`)."""
    out = []
    for p in entries:
        if p.name.endswith(".state") and "_sandbox:" in p.name:
            out.append(p.name.split("_sandbox:", 1)[0])
        elif p.is_dir():
            out.append(p.name)
    return out


@dataclass(frozen=True)
class RuntimeLeftovers:
    """The leak finder of an OCI runtime's kind: the containers in its state root (each has a
    directory there, runsc's a `<container>_sandbox:<sandbox>.state` file; reading the
    directory works even when the runtime binary is broken or gone), and the runtime's
    processes still running for an isotax container (runsc's own are runsc-sandbox, the
    Sentry, and runsc-gofer). A container is removed with `<runtime> delete --force` (which
    thaws a paused one to kill it), named by the program's full path where it is not on PATH
    (isotax's own runsc); `program` says where it is."""

    runtime: str  # the program, and the name of its state root under OCI_STATE_ROOT
    program: Callable[[], str | None] | None = None  # its path; None: `runtime` on PATH

    def __call__(self) -> list[Leftover]:
        out = []
        root = OCI_STATE_ROOT / self.runtime
        binary = (self.program() if self.program else None) or \
            shutil.which(self.runtime) or self.runtime
        if root.is_dir():
            rt = Runtime(self.runtime, binary)
            for d in runtime_state_containers(sorted(root.iterdir())):
                out.append(Leftover(
                    f"{self.runtime} container {d}", [tuple(rt.argv("delete", "--force", d))],
                    stage=Stage.CONTAINER, removal=functools.partial(_delete, rt, d)))
        return out + leftover_processes(self._ours)

    def _ours(self, program: str, args: Sequence[str]) -> bool:
        return (program == self.runtime or program.startswith(f"{self.runtime}-")) \
            and names_itx(args)


def _delete(rt: Runtime, cid: str) -> None:
    p = rt.call("delete", "--force", cid, timeout=60)
    if p.returncode != 0 and rt.root.is_dir() and \
            cid in runtime_state_containers(sorted(rt.root.iterdir())):
        raise OSError(f"{rt.name} delete --force {cid}: {(p.stderr or p.stdout).strip()}")


# -- start time ------------------------------------------------------------------------------------

def start_times_ms(runtime: str, image: ImageArtifacts, n: int = 20,
                   network: str = "new") -> list[float]:
    """Wall time of `<runtime> run` of /bin/true in a fresh container, create through exit and
    delete, n times. network "new" gives each container its own empty netns (as
    `docker --network none`); "host" shares the host's."""
    rt = Runtime(runtime)
    rootfs = image.rootfs.resolve()
    times = []
    with tempfile.TemporaryDirectory(prefix=owners.temp_prefix("start"),
                                     dir=BUNDLE_SCRATCH) as tmp:
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
