"""A container's filesystem layout, shared by every kind that runs the workload image's rootfs
as a container (the OCI runtimes, the engines, nspawn): where disk workloads write per the
plan's storage, where scratch lives, and the writable overlayfs root. Below the plugins, so
that none imports another's (the import contract in pyproject.toml)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from isotax.environments.base import Removals, remove_tree
from isotax.host import command
from isotax.host.facts.filesystems import host_storage
from isotax.protocols import Availability, EnvSpec, Unavailable

# Where disk workloads write inside a container (Instance.data_dir), per plan storage:
# "volume": a host directory bind-mounted on the image's (empty) /mnt, which exists in the
# image, so the runtime never has to create a mount point in the shared, read-only rootfs;
# "rootfs": a directory in the container's own overlayfs root filesystem.
VOLUME_DIR = "/mnt"
ROOTFS_DATA_DIR = "/var/lib/itx-data"
SCRATCH = "/tmp"


def image_rootfs(spec: EnvSpec, needs: str, lacking: str) -> Path:
    """The workload image's rootfs, the lower layer of a container's root, where it has what
    the kind starts (`needs`: bin/ for a command, lib/systemd/systemd for nspawn's init);
    Unavailable with `lacking` and the fix otherwise."""
    rootfs = spec.image.rootfs.resolve()
    if not (rootfs / needs).exists():
        raise Unavailable(Availability.no(f"{lacking} ({rootfs})",
                                          "rebuild it: isotax image build"))
    return rootfs


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
        p = command.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(self.merged)], 30)
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
            if command.run(["umount", str(self.merged)], 30).returncode != 0:
                command.run(["umount", "-l", str(self.merged)], 30)
            self.mounted = os.path.ismount(self.merged)
        if self.mounted:
            raise RuntimeError(f"overlay {self.merged} is still mounted")
        for d in (self.merged, self.upper, self.work):
            shutil.rmtree(d, ignore_errors=True)


class ContainerStorage:
    """A container's storage for the plan's `storage`, made on the host (the OCI kinds' and
    nspawn's; the engines ask their engine for a volume instead):

    - "volume": the image rootfs, read-only, is the root, and a host directory
      <workdir>/<name>-volume is bind-mounted read-write at VOLUME_DIR, where data_dir is
      (`docker run --read-only -v`);
    - "rootfs": an OverlayRoot over the image rootfs is a writable root, data_dir
      ROOTFS_DATA_DIR in it, so disk I/O goes through overlayfs (Docker's overlay2).
    """

    def __init__(self, workdir: Path, name: str, storage: str) -> None:
        self.storage = storage
        self.overlay = OverlayRoot(workdir, name)
        self._volume_dir = workdir / f"{name}-volume"
        self.volume: Path | None = None  # the volume's host directory, once made
        self.data_dir = ROOTFS_DATA_DIR if storage == "rootfs" else VOLUME_DIR

    def root(self, rootfs: Path) -> Path:
        """The container's root over the image's rootfs, made: the rootfs itself beside the
        volume, or the mounted overlay."""
        if self.storage == "rootfs":
            return self.overlay.mount(rootfs)
        self._volume_dir.mkdir(parents=True, exist_ok=True)
        self.volume = self._volume_dir
        return rootfs

    def remove(self, out: Removals) -> None:
        """Unmount and remove the overlay and the volume, each an attempt of out."""
        out.attempt("its overlay root", self.overlay.remove)
        if self.volume is not None:
            volume = self.volume
            out.attempt(f"volume {volume}", lambda: remove_tree(volume))

    def rootfs_words(self, tmpfs: str) -> str:
        """The report's words for the root, with the tmpfs mounts the kind adds."""
        return ("overlayfs over the image rootfs, writable" if self.storage == "rootfs"
                else "image rootfs, read-only") + f"; tmpfs {tmpfs}"

    def words(self) -> str:
        """The report's words for where the data goes, and on which host filesystem."""
        if self.storage == "rootfs":
            return (f"overlayfs rootfs (lower: image rootfs, upper: "
                    f"{host_storage(self.overlay.upper)}), data in {self.data_dir}")
        where = host_storage(self.volume) if self.volume else "unknown"
        return f"bind-mounted volume at {VOLUME_DIR} (host directory, {where})"
