"""A minimal initramfs for the VM, made from the image's own files and cached beside the image.

Why: the image's Debian initrd (initramfs-tools) starts udev, coldplugs every device and runs
its script stages; under TCG that is ≈7 s of a ≈12 s boot (measured here: /init at 4.7 s,
root mounted at 11.2 s). The VM needs none of it: its devices are fixed (virtio-pci disk,
console port, NIC). This initramfs holds only the image's busybox and the C library it links,
the kernel modules for those devices (from the image's /lib/modules, with the lines of its
modules.dep that concern them), and a dozen-line /init that loads them, mounts /dev/vda and
switch_roots to the kernel command line's init=. Uncompressed, so the kernel unpacks it with
no decompression. The image's initrd stays available (plan option initrd = "image").
"""

from __future__ import annotations

import lzma
import os
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

from isotax.environments.vm.qemu_share import Share
from isotax.image.artifacts import ImageArtifacts

NAME = "initrd-itx.cpio"
FORMAT = 3  # bump when the content below changes: it is part of the cached file's name
# What the VM's devices need, in load order; dependencies come from modules.dep.
MODULES = ("virtio_pci", "virtio_blk", "crc32c_generic", "ext4", "virtio_console", "virtio_net")
# Also packed, loaded when the kernel command line's itx.mods= names them: microvm's
# virtio-mmio transport and the shared-directory file systems (a root or volume over 9p or
# virtio-fs). Not loaded by default: each module load costs time under TCG.
EXTRA_MODULES = ("virtio_mmio", "9pnet_virtio", "9p", "virtiofs")
LIBS = ("ld-linux-x86-64.so.2", "libc.so.6", "libresolv.so.2", "libm.so.6")

INIT = """#!/bin/busybox sh
# isotax minimal initramfs: load the VM's drivers, mount the root disk, hand over to init=.
/bin/busybox mkdir -p /proc /sys /dev /root
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev
init=/sbin/init
mods="{modules}"
root=/dev/vda
fstype=ext4
flags=rw
for w in $(/bin/busybox cat /proc/cmdline); do
    case "$w" in
        init=*) init=${{w#init=}} ;;
        itx.mods=*) mods=$(echo "${{w#itx.mods=}}" | /bin/busybox tr , " ") ;;
        itx.root=*) root=${{w#itx.root=}} ;;
        itx.rootfstype=*) fstype=${{w#itx.rootfstype=}} ;;
        itx.rootflags=*) flags=${{w#itx.rootflags=}} ;;
    esac
done
# One modprobe for all (each process start costs ~0.1 s under TCG); deps from modules.dep.
/bin/busybox modprobe -a $mods || echo "initrd: modprobe $mods failed"
i=0
case "$root" in /dev/*)
    while [ ! -b "$root" ] && [ $i -lt 500 ]; do /bin/busybox usleep 10000; i=$((i+1)); done ;;
esac
# A share (9p, virtio-fs) may need a moment after its driver probed: retry briefly.
until /bin/busybox mount -t "$fstype" -o "$flags" "$root" /root; do
    i=$((i+1))
    if [ $i -gt 200 ]; then echo "initrd: cannot mount $root ($fstype)"; exec /bin/busybox sh; fi
    /bin/busybox usleep 20000
done
/bin/busybox mount --move /dev /root/dev
/bin/busybox mount --move /proc /root/proc
/bin/busybox mount --move /sys /root/sys
exec /bin/busybox switch_root /root "$init"
"""


def _module_order(moddir: Path, wanted: tuple[str, ...]) -> list[str]:
    """Relative paths of wanted modules and their dependencies, dependencies first."""
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
        base = os.path.basename(path).split(".ko")[0]
        by_name[base.replace("-", "_")] = path
    order: list[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        # modules.dep lists a module's whole dependency closure, the deepest last.
        for d in reversed(deps.get(path, [])):
            visit(d)
        order.append(path)

    for name in wanted:
        if name not in by_name:
            if (moddir / "modules.builtin").exists() and any(
                    os.path.basename(ln).split(".ko")[0].replace("-", "_") == name
                    for ln in (moddir / "modules.builtin").read_text().splitlines()):
                continue  # built into the kernel: nothing to load
            raise FileNotFoundError(f"module {name} not in {moddir}/modules.dep")
        visit(by_name[name])
    return order


def _deps(moddir: Path, rel: str) -> list[str]:
    for line in (moddir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        if path == rel:
            return rest.split()
    return []


def _module_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if path.name.endswith(".xz"):
        return lzma.decompress(data)
    if path.name.endswith(".zst"):
        return subprocess.run(["zstd", "-dc", str(path)], capture_output=True,
                              check=True).stdout
    return data


def _find_lib(root: Path, name: str) -> Path | None:
    for d in ("usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu", "usr/lib64", "lib64"):
        p = root / d / name
        if p.exists():
            return p.resolve()
    return None


class _Cpio:
    """Writer of the "newc" cpio format the kernel unpacks (initramfs-buffer-format.rst)."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"") -> None:
        fields = [self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name) + 1, 0]
        hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
        self.ino += 1
        blob = hdr + name.encode() + b"\0"
        blob += b"\0" * (-len(blob) % 4)
        blob += data + b"\0" * (-len(data) % 4)
        self.parts.append(blob)

    def dir(self, name: str) -> None:
        self._entry(name, stat.S_IFDIR | 0o755)

    def file(self, name: str, data: bytes, mode: int = 0o755) -> None:
        self._entry(name, stat.S_IFREG | mode, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def bytes(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        out = b"".join(self.parts)
        return out + b"\0" * (-len(out) % 512)


def build_minimal_initrd(image: ImageArtifacts) -> bytes:
    root = image.rootfs
    kdirs = sorted((root / "lib/modules").iterdir())
    if len(kdirs) != 1:
        raise FileNotFoundError(f"expected one kernel in {root}/lib/modules, found {len(kdirs)}")
    moddir = kdirs[0]
    busybox = root / "bin/busybox"
    if not busybox.exists():
        raise FileNotFoundError(f"no busybox in {root}")
    c = _Cpio()
    for d in ("bin", "lib", "lib64", "lib/modules", "dev", "proc", "sys", "root"):
        c.dir(d)
    c.file("bin/busybox", busybox.resolve().read_bytes())
    c.symlink("bin/sh", "busybox")
    for name in LIBS:
        lib = _find_lib(root, name)
        if lib is None:
            if name in ("ld-linux-x86-64.so.2", "libc.so.6"):
                raise FileNotFoundError(f"no {name} in {root}")
            continue
        c.file(f"lib/{name}", lib.read_bytes())
    c.symlink("lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-x86-64.so.2")
    # The modules at their usual place, with a modules.dep of just them, for busybox modprobe.
    kdir = f"lib/modules/{moddir.name}"
    dep_lines = []
    made = {"lib/modules"}
    for rel in _module_order(moddir, MODULES + EXTRA_MODULES):
        plain = rel.removesuffix(".xz").removesuffix(".zst")
        parts = f"{kdir}/{plain}".split("/")[:-1]
        for i in range(2, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in made:
                c.dir(d)
                made.add(d)
        c.file(f"{kdir}/{plain}", _module_bytes(moddir / rel), 0o644)
        deps = [d.removesuffix(".xz").removesuffix(".zst") for d in _deps(moddir, rel)]
        dep_lines.append(f"{plain}: {' '.join(deps)}".rstrip())
    c.file(f"{kdir}/modules.dep", ("\n".join(dep_lines) + "\n").encode(), 0o644)
    c.file("init", INIT.format(modules=" ".join(MODULES)).encode())
    return c.bytes()


def ensure_minimal_initrd(image: ImageArtifacts) -> Path:
    """The cached minimal initramfs of this image, built on first use (≈0.2 s)."""
    path = image.root / f"{NAME}.{FORMAT}"
    if path.exists():
        return path
    data = build_minimal_initrd(image)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)  # atomic: a concurrent VM sees all of it or nothing
    finally:
        tmp.unlink(missing_ok=True)
    return path


def select_initrd(image: ImageArtifacts, choice: str = "auto") -> tuple[Path | None, str]:
    """(initrd to boot, what it is). "auto": the minimal one, else the image's own."""
    if choice not in ("auto", "minimal", "image"):
        raise ValueError(f"initrd {choice!r}: use auto, minimal or image")
    why = ""
    if choice in ("auto", "minimal"):
        try:
            return ensure_minimal_initrd(image), "minimal (isotax, from the image's files)"
        except (OSError, subprocess.CalledProcessError) as e:
            if choice == "minimal":
                raise ValueError(f"cannot make the minimal initrd: {e}") from e
            why = f" (minimal one failed: {e})"
    if image.initrd.exists():
        return image.initrd, "image (initramfs-tools)" + why
    return None, "none" + why


def guest_modules(machine: str, disk: bool, net: bool, shares: Sequence[Share]) -> tuple[str, ...]:
    """The modules the minimal initrd loads for this VM (itx.mods=), in load order. Pure."""
    mods = ["virtio_mmio" if machine == "microvm" else "virtio_pci"]
    if disk:
        mods += ["virtio_blk", "crc32c_generic", "ext4"]
    mods.append("virtio_console")
    if net:
        mods.append("virtio_net")
    if any(sh.transport == "9p" for sh in shares):
        mods += ["9pnet_virtio", "9p"]
    if any(sh.transport == "virtiofs" for sh in shares):
        mods.append("virtiofs")
    return tuple(mods)
