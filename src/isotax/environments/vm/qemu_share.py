"""Host directories shared into a VM: virtio-9p (QEMU's own 9p server) or virtio-fs (a
virtiofsd daemon per share, over vhost-user), as Kata Containers shares a container's rootfs
and volumes with its VM.

9p mount options follow Kata's defaults (msize 8192, cache=mmap): what StackHPC measured.
virtio-fs follows Kata's too (cache=auto, one thread pool per daemon). The image's rootfs is
shared read-only: by QEMU (fsdev readonly=on) for 9p; for virtio-fs by a read-only bind mount
of it under the workdir that virtiofsd serves (virtiofsd from QEMU 7.2 has no read-only mode).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from isotax.host import command

# Kata Containers' defaults (configuration-qemu.toml: msize_9p = 8192; the agent mounts 9p
# with cache=mmap; virtio_fs_cache = "auto").
KATA_MSIZE_9P = 8192
KATA_9P_CACHE = "mmap"
KATA_VIRTIOFS_CACHE = "auto"
# Where virtiofsd may be: the Rust daemon (cargo install virtiofsd) first, then QEMU's C one
# (Debian's qemu-system-common 7.2 ships it in /usr/lib/qemu).
VIRTIOFSD_CANDIDATES = ("virtiofsd", "/usr/libexec/virtiofsd", "/usr/lib/qemu/virtiofsd")


@dataclass(frozen=True)
class Share:
    """One shared directory: tag is what the guest mounts (mount -t 9p|virtiofs TAG DIR)."""

    tag: str
    transport: str  # "9p" or "virtiofs"
    path: Path  # the host directory (9p) or the directory virtiofsd serves
    readonly: bool
    socket: str = ""  # virtiofs: the vhost-user socket (relative to the VM's workdir)
    msize: int = KATA_MSIZE_9P
    cache: str = ""  # guest 9p cache= / virtiofsd cache=

    def guest_fstype(self) -> str:
        return "9p" if self.transport == "9p" else "virtiofs"

    def guest_options(self) -> str:
        """The guest's mount options for this share."""
        ro = "ro" if self.readonly else "rw"
        if self.transport == "9p":
            return (f"trans=virtio,version=9p2000.L,msize={self.msize},"
                    f"cache={self.cache or KATA_9P_CACHE},{ro}")
        return ro


def share_argv(share: Share, machine: str, index: int) -> list[str]:
    """QEMU arguments for one share (golden-tested). Pure."""
    mmio = machine == "microvm"
    if share.transport == "9p":
        # security_model=none: QEMU (root) accesses files as itself, like Kata's;
        # multidevs=remap: inode numbers stay unique if the tree spans file systems.
        fsdev = (f"local,id=fs{index},path={share.path},security_model=none,"
                 f"multidevs=remap" + (",readonly=on" if share.readonly else ""))
        dev = "virtio-9p-device" if mmio else "virtio-9p-pci"
        return ["-fsdev", fsdev, "-device", f"{dev},fsdev=fs{index},mount_tag={share.tag}"]
    if share.transport == "virtiofs":
        dev = "vhost-user-fs-device" if mmio else "vhost-user-fs-pci"
        return ["-chardev", f"socket,id=vfs{index},path={share.socket}",
                "-device", f"{dev},chardev=vfs{index},tag={share.tag},queue-size=1024"]
    raise ValueError(f"share transport {share.transport!r}: use 9p or virtiofs")


def find_virtiofsd() -> str | None:
    for c in VIRTIOFSD_CANDIDATES:
        path = shutil.which(c) if "/" not in c else (c if os.access(c, os.X_OK) else None)
        if path:
            return path
    return None


def virtiofsd_flavour(path: str) -> str:
    """"rust" or "c": their command lines differ. The C daemon prints "usage: ... [options]"
    with "-o source=PATH"; the Rust one takes --shared-dir."""
    out = command.run([path, "--help"], 10)
    return "rust" if "--shared-dir" in out.stdout + out.stderr else "c"


def virtiofsd_argv(binary: str, flavour: str, share: Share, socket: str) -> list[str]:
    """The daemon's command line (golden-tested). Pure. Kata passes --thread-pool-size=1."""
    cache = share.cache or KATA_VIRTIOFS_CACHE
    if flavour == "rust":
        argv = [binary, f"--socket-path={socket}", f"--shared-dir={share.path}",
                f"--cache={cache}", "--thread-pool-size=1", "--sandbox=chroot"]
        return argv + (["--readonly"] if share.readonly else [])
    return [binary, f"--socket-path={socket}", "-o", f"source={share.path}",
            "-o", f"cache={cache}", "-o", "sandbox=chroot", "--thread-pool-size=1"]


class Virtiofsd:
    """One virtiofsd serving one share; started before QEMU (QEMU connects to its socket)."""

    def __init__(self, binary: str, share: Share, workdir: Path,
                 prefix: Sequence[str] = ()) -> None:
        self.binary = binary
        self.flavour = virtiofsd_flavour(binary)
        self.share = share
        self.workdir = workdir
        self.prefix = list(prefix)  # e.g. numactl binding it to the VM's NUMA node
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / f"virtiofsd-{share.tag}.log"

    def start(self, timeout: float = 20.0) -> None:
        sock = self.workdir / self.share.socket
        sock.unlink(missing_ok=True)
        argv = self.prefix + virtiofsd_argv(self.binary, self.flavour, self.share, str(sock))
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, cwd=self.workdir, stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while not sock.exists():
            if self.proc.poll() is not None:
                raise OSError(f"virtiofsd exited {self.proc.returncode}: {self.why()}")
            if time.monotonic() > deadline:
                raise OSError(f"virtiofsd made no socket in {timeout:.0f} s: {self.why()}")
            time.sleep(0.01)

    def why(self) -> str:
        try:
            lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln]
        except OSError:
            return "no log"
        return " | ".join(lines[-3:])[-300:] or "no output"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """Idempotent; the daemon ends by itself when QEMU disconnects, else SIGTERM, SIGKILL."""
        p = self.proc
        if p is not None and p.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(2)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if p.poll() is not None:
                    break
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, sig)  # only the daemon this object started
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(3)
        with contextlib.suppress(OSError):
            (self.workdir / self.share.socket).unlink()


class ReadonlyBind:
    """A read-only bind mount of a directory under an itx- path (virtio-fs's read-only root)."""

    def __init__(self, source: Path, target: Path) -> None:
        self.source = source
        self.target = target
        self.mounted = False

    def mount(self) -> None:
        self.target.mkdir(parents=True, exist_ok=True)
        for argv in (["mount", "--bind", str(self.source), str(self.target)],
                     ["mount", "-o", "remount,bind,ro", str(self.target)]):
            p = subprocess.run(argv, capture_output=True, text=True, check=False)
            if p.returncode != 0:
                self.umount()
                raise OSError(f"{' '.join(argv)}: {p.stderr.strip()}")
            self.mounted = True

    def umount(self) -> list[str]:
        errors = []
        if self.mounted:
            p = subprocess.run(["umount", str(self.target)], capture_output=True, text=True,
                               check=False)
            if p.returncode == 0:
                self.mounted = False
            else:
                errors.append(f"umount {self.target}: {p.stderr.strip()}")
        if not self.mounted:
            with contextlib.suppress(OSError):
                self.target.rmdir()
        return errors
