"""A container's filesystem layout, shared by every kind that runs the workload image's rootfs
as a container (the OCI runtimes, the engines, nspawn): where disk workloads write per the
plan's storage, where scratch lives, and the writable overlayfs root. Below the plugins, so
that none imports another's (the import contract in pyproject.toml)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from isotax.host import command
from isotax.protocols import Availability, Unavailable

# Where disk workloads write inside a container (Instance.data_dir), per plan storage:
# "volume": a host directory bind-mounted on the image's (empty) /mnt, which exists in the
# image, so the runtime never has to create a mount point in the shared, read-only rootfs;
# "rootfs": a directory in the container's own overlayfs root filesystem.
VOLUME_DIR = "/mnt"
ROOTFS_DATA_DIR = "/var/lib/itx-data"
SCRATCH = "/tmp"


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
