"""Where a built image lives. Produced by image.build, consumed by every environment."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ImageArtifacts:
    recipe_hash: str
    root: Path  # the cache directory of this image

    @property
    def rootfs(self) -> Path:
        """The unpacked root filesystem (OCI bundles use it read-only)."""
        return self.root / "rootfs"

    @property
    def ext4(self) -> Path:
        """A raw ext4 disk image of the rootfs (VM disks are copy-on-write overlays of it)."""
        return self.root / "rootfs.ext4"

    @property
    def tar(self) -> Path:
        """A tar of the rootfs (container engines import it)."""
        return self.root / "rootfs.tar"

    @property
    def kernel(self) -> Path:
        """The image's own Debian kernel, uncompressed where possible (direct VM boot): under
        TCG an uncompressed vmlinux boots ≈2.5 s sooner than the bzImage."""
        vmlinux = self.root / "vmlinux"
        return vmlinux if vmlinux.exists() else self.vmlinuz

    @property
    def vmlinuz(self) -> Path:
        """The kernel exactly as Debian ships it (bzImage)."""
        return self.root / "vmlinuz"

    @property
    def helpers(self) -> Path:
        """isotax's guest helpers (itx-time, itx-corpus, ...) inside the rootfs; static, so
        native runs use these same binaries on the host."""
        return self.rootfs / "opt/isotax/bin"

    def kernel_version(self) -> str:
        return str(self.manifest().get("kernel", {}).get("version", ""))  # type: ignore[attr-defined]

    @property
    def initrd(self) -> Path:
        return self.root / "initrd.img"

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def manifest(self) -> Mapping[str, object]:
        """Recipe, build time and package versions; written last, so its presence = complete."""
        return json.loads(self.manifest_path.read_text())

    def distribution(self) -> str:
        """The Debian release the image was built from (its recipe's suite)."""
        recipe = self.manifest().get("recipe", {})
        return str(recipe.get("suite", "")) if isinstance(recipe, Mapping) else ""

    def package_versions(self) -> Mapping[str, str]:
        return dict(self.manifest().get("packages", {}))  # type: ignore[call-overload]

    def complete(self) -> bool:
        return self.manifest_path.exists()
