"""vm9p: a container inside a lightweight VM, the Kata Containers shape.

The image's rootfs directory (the one the OCI bundles use) is shared read-only with a microvm
guest over virtio-9p, or over virtio-fs where a virtiofsd exists; isotax's initrd mounts that
share as the guest's root and hands over to itx-init, so the workload runs on the container's
files, not on a disk image. The volume (storage "volume", Instance.data_dir = /mnt) is, as in
Kata, a host directory on the storage path shared over the same transport (options.volume =
"share", the default), or a virtio-blk disk like the VMs' (options.volume = "disk", Kata's
block volumes).

Plan options, besides the qemu ones (machine defaults to microvm):
    share          9p | virtiofs          the transport (default 9p: Kata's old default, and
                                          what StackHPC measured)
    volume         share | disk
    msize_9p       9p payload size in bytes (default 8192, Kata's msize_9p)
    cache_9p       the guest's 9p cache mode (default mmap, as Kata's agent mounts)
    virtiofs_cache virtiofsd cache mode (default auto, Kata's virtio_fs_cache)
storage "rootfs" is refused: the root is a read-only share of the image.

virtio-fs needs vhost-user, whose notifications need ioeventfd, which virtio-mmio lacks under
TCG (tried here: QEMU 7.2 logs "vhost_set_vring_call failed" and the guest never sees its
root): on an emulated host use machine = "pc" with share = "virtiofs" (start() says so).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from isotax.environments.base import register
from isotax.environments.vm.qemu import RUN_DIR, Qemu, QemuInstance
from isotax.environments.vm.qemu_options import vm_options
from isotax.environments.vm.qemu_share import (
    KATA_MSIZE_9P,
    ReadonlyBind,
    Share,
    find_virtiofsd,
)
from isotax.protocols import Availability, ParamSpec, Unavailable

SHARES = ("9p", "virtiofs")
VOLUMES = ("share", "disk")
ROOT_TAG = "itxroot"
VOLUME_TAG = "itxvol"


class Vm9pInstance(QemuInstance):
    kind = "vm9p"
    default_machine = "microvm"

    def _check_options(self) -> None:
        opts = self.spec.options
        self.share = str(opts.get("share", "9p"))
        self.volume = str(opts.get("volume", "share"))
        if self.share not in SHARES:
            raise Unavailable(Availability.no(
                f"vm9p: share {self.share!r} is not 9p or virtiofs",
                'set options.share = "9p" or "virtiofs"'))
        if self.volume not in VOLUMES:
            raise Unavailable(Availability.no(
                f"vm9p: volume {self.volume!r} is not share or disk",
                'set options.volume = "share" or "disk"'))
        if self.spec.storage == "rootfs":
            raise Unavailable(Availability.no(
                "vm9p: storage \"rootfs\" is impossible: the guest's root is the image shared "
                "read-only", 'use storage = "volume" (a shared host directory at /mnt)'))
        try:
            self.msize = int(opts.get("msize_9p", KATA_MSIZE_9P))
        except (TypeError, ValueError):
            self.msize = 0
        if self.msize < 4096:
            raise Unavailable(Availability.no(
                f"vm9p: msize_9p {opts.get('msize_9p')!r} is not a size of at least 4096",
                "set options.msize_9p to bytes, e.g. 8192 (Kata) or 524288"))
        if self.share == "virtiofs" and find_virtiofsd() is None:
            raise Unavailable(Availability.no(
                "vm9p: share virtiofs needs virtiofsd, and none is installed",
                "apt-get install qemu-system-common (QEMU 7.2 ships /usr/lib/qemu/virtiofsd), "
                "or cargo install virtiofsd"))

    def _share(self, tag: str, path: Path, readonly: bool) -> Share:
        opts = self.spec.options
        if self.share == "9p":
            return Share(tag, "9p", path, readonly, msize=self.msize,
                         cache=str(opts.get("cache_9p", "")))
        return Share(tag, "virtiofs", path, readonly,
                     socket=str(RUN_DIR / f"itx-vfs-{self._tag}-{tag}.sock"),
                     cache=str(opts.get("virtiofs_cache", "")))

    def _shares(self, workdir: Path) -> tuple[Share | None, list[Share]]:
        if self.share == "virtiofs" and self.machine == "microvm" and self.probe.accel != "kvm":
            raise Unavailable(Availability.no(
                "vm9p: virtio-fs on microvm does not start under TCG (virtio-mmio has no "
                "ioeventfd there; QEMU's vhost-user setup fails: vhost_set_vring_call)",
                'set options.machine = "pc" for share = "virtiofs" on this host'))
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        root_dir = self.spec.image.rootfs
        if self.share == "virtiofs":
            # virtiofsd (QEMU 7.2's) cannot serve read-only: a read-only bind mount does.
            bind = ReadonlyBind(root_dir, RUN_DIR / f"itx-root-{self._tag}")
            self._binds.append(bind)
            bind.mount()
            root_dir = bind.target
        root = self._share(ROOT_TAG, root_dir, True)
        if self.spec.storage != "volume" or self.volume == "disk":
            return root, []
        self._volume_dir = workdir / "itx-vol"
        self._volume_dir.mkdir(parents=True, exist_ok=True)
        return root, [self._share(VOLUME_TAG, self._volume_dir, False)]


@register
class Vm9p(Qemu):
    kind: ClassVar[str] = "vm9p"
    description: ClassVar[str] = ("a container in a lightweight VM (Kata's shape): the image's "
                                  "rootfs shared into a microvm over virtio-9p or virtio-fs")
    instance_class: ClassVar[type[QemuInstance]] = Vm9pInstance
    options: ClassVar[tuple[ParamSpec, ...]] = (
        *vm_options("microvm"),
        ParamSpec("share", str, "9p", "how the rootfs (and the volume) reach the guest: 9p "
                  "(Kata's old default) or virtiofs (needs virtiofsd; machine = \"pc\" under "
                  "TCG)", choices=SHARES),
        ParamSpec("volume", str, "share", "the volume: share (a host directory over the same "
                  "transport) or disk (a virtio-blk disk, Kata's block volumes)", choices=VOLUMES),
        ParamSpec("msize_9p", int, KATA_MSIZE_9P, "9p payload size in bytes (Kata's 8192)",
                  minimum=4096),
        # The 9p cache modes of the image's kernel (Debian 12's 6.1).
        ParamSpec("cache_9p", str, None, "the guest's 9p cache mode; unset: mmap, as Kata's "
                  "agent mounts", choices=("none", "loose", "fscache", "mmap")),
        ParamSpec("virtiofs_cache", str, None, "virtiofsd's cache mode; unset: auto (Kata's "
                  "virtio_fs_cache)"),
    )
    # The guest's root is the image shared read-only: "rootfs" has nowhere to write.
    storages: ClassVar[tuple[str, ...]] = ("volume",)
