"""What the workload image is made of, and the hashes that name it in the cache.

Two layers, each named by a hash of exactly what goes into it:
  base    - debootstrap of Debian packages + the post-install steps (the workloads' image
            hooks, such as HPCC's BLAS choice; the initrd); slow (minutes), so it is cached on
            its own and changes only with the package list and the hooks.
  image   - base + isotax's guest helpers (compiled C, scripts); fast (seconds).
The image hash covers the base hash and the bytes of every guest file, so editing a helper
rebuilds only the second layer. Pure functions: unit-tested without root or network.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from isotax.image.distribution import DISTRIBUTIONS, FALLBACK, MIRROR

_DEFAULT = DISTRIBUTIONS[FALLBACK]
# Bump when the post-debootstrap steps in build.py change what the base contains.
BASE_STEPS_VERSION = 2
# Bump when the helpers layer / exports change (compiler flags, export formats, layout).
IMAGE_STEPS_VERSION = 1

# What the image needs whatever runs in it: a VM boots the image's own kernel. The workloads'
# own packages are each workload's `packages`; the caller passes them (Recipe.for_workloads:
# isotax.image is below the plugin registry, so it cannot ask it).
BASE_PACKAGES: tuple[str, ...] = (
    "python3",  # the VM's command agent (itx-agent.py) uses the standard library's json
    "procps",
    "iproute2",
    "kmod",
    "busybox",
    "linux-image-amd64",
    # The system container (nspawn) boots the image's own init; VMs and OCI containers start
    # isotax's helpers instead (init=itx-init, itx-ready), so systemd never runs there.
    "systemd-sysv",
    # Parity checks read the NIC offloads inside every environment (isotax.host.facts.parity).
    "ethtool",
)

# Kernel modules the VM's initrd must carry to reach its root disk and its channels
# (virtio-pci for `-M pc`, virtio-mmio for `-M microvm`). Dependencies come along by modprobe.
INITRD_MODULES: tuple[str, ...] = (
    "virtio_pci",
    "virtio_mmio",
    "virtio_blk",
    "virtio_net",
    "virtio_console",
    "ext4",
    "crc32c_generic",
    "9p",
    "9pnet_virtio",
)
# The subset a boot cannot do without: checked in the generated initrd.
INITRD_REQUIRED: tuple[str, ...] = (
    "virtio_blk",
    "virtio_pci",
    "virtio_net",
    "virtio_console",
    "ext4",
    "9p",
    "9pnet_virtio",
)

# Host compiler flags for the guest C helpers: static, so the same binary runs in the image,
# on the host (native runs) and in any container, with no libc version dependence.
CFLAGS: tuple[str, ...] = ("-O2", "-static", "-s", "-Wall", "-Wextra")

HASH_LEN = 16  # hex digits used as cache directory names


@dataclass(frozen=True)
class ImageHook:
    """A workload's step in the base layer beyond apt packages, declared by the workload
    (its `image_hooks`): `commands` run in the image's chroot, in order, after the packages
    are installed; then `check` runs there, its output's lines matching `keep` (a regular
    expression) are recorded in the image's manifest under `name`, and one of them must
    contain `expect`, else the build fails with `fail`. A tool apt does not have is built
    or fetched by its commands. Part of the base hash: a changed hook builds a new base."""

    name: str
    commands: tuple[tuple[str, ...], ...] = ()
    check: tuple[str, ...] = ()
    keep: str = ""
    expect: str = ""
    fail: str = ""


@dataclass(frozen=True)
class Recipe:
    # The Debian release (image.distribution: a choice, recorded with the run) and its
    # suites; for_workloads(distribution=...) sets them together. The suite is part of the
    # base hash, so each release's image has its own place in the cache.
    suite: str = _DEFAULT.codename
    mirror: str = MIRROR
    # netperf lives in non-free on the same mirror.
    components: tuple[str, ...] = _DEFAULT.components
    # Point-release and security updates, as a Debian host has in its sources: the image's
    # tools must be the same versions the host's apt gives native runs.
    update_suites: tuple[str, ...] = _DEFAULT.update_suites
    security: str = _DEFAULT.security
    variant: str = "minbase"
    # Every package debootstrap installs: BASE_PACKAGES and the workloads' (for_workloads).
    # No default: a recipe without the workloads' packages would name another image.
    packages: tuple[str, ...] = field(kw_only=True)
    initrd_modules: tuple[str, ...] = INITRD_MODULES
    cflags: tuple[str, ...] = CFLAGS
    base_steps: int = BASE_STEPS_VERSION
    image_steps: int = IMAGE_STEPS_VERSION
    extra: Mapping[str, str] = field(default_factory=dict)  # reserved; part of the base hash
    hooks: tuple[ImageHook, ...] = ()  # the workloads' image hooks, in registry order

    @classmethod
    def for_workloads(cls, workload_packages: Iterable[str],
                      hooks: Iterable[ImageHook] = (), distribution: str = FALLBACK,
                      **settings: Any) -> Recipe:
        """The recipe for an image that runs these workloads on `distribution` (a codename
        of image.distribution.DISTRIBUTIONS: its suites and components): BASE_PACKAGES and
        theirs, each once, and their image hooks (the callers pass
        isotax.protocols.workload_packages() and .workload_image_hooks(), or
        protocols.image_recipe() does)."""
        d = DISTRIBUTIONS[distribution]
        suites: dict[str, Any] = {"suite": d.codename, "components": d.components,
                                  "update_suites": d.update_suites, "security": d.security}
        return cls(packages=tuple(dict.fromkeys((*BASE_PACKAGES, *workload_packages))),
                   hooks=tuple(dict.fromkeys(hooks)), **{**suites, **settings})

    @property
    def distribution(self) -> str:
        """The Debian release's codename (the suite debootstrap installs)."""
        return self.suite

    def base_inputs(self) -> dict[str, object]:
        """Everything the base layer depends on (the package list in a canonical order)."""
        return {
            "suite": self.suite,
            "mirror": self.mirror.rstrip("/"),
            "components": sorted(self.components),
            "update_suites": list(self.update_suites),
            "security": self.security,
            "variant": self.variant,
            "packages": sorted(set(self.packages)),
            "initrd_modules": sorted(set(self.initrd_modules)),
            "base_steps": self.base_steps,
            "extra": dict(sorted(self.extra.items())),
            "hooks": [asdict(h) for h in self.hooks],
        }

    def base_hash(self) -> str:
        return _digest(self.base_inputs())

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["extra"] = dict(self.extra)
        return d


def _digest(obj: object) -> str:
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:HASH_LEN]


def default_guest_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "guest"


def guest_files(guest_dir: Path) -> dict[str, bytes]:
    """The guest files that go into the image: every regular file, except hidden files,
    editor backups and byte-code caches (not part of the source)."""
    out: dict[str, bytes] = {}
    if not guest_dir.is_dir():
        return out
    for p in sorted(guest_dir.iterdir()):
        if not p.is_file() or p.name.startswith(".") or p.name.endswith(("~", ".pyc", ".swp")):
            continue
        out[p.name] = p.read_bytes()
    return out


def image_hash(recipe: Recipe, guest: Mapping[str, bytes]) -> str:
    """The full recipe hash: base hash + helpers-layer steps + every guest file's name and bytes."""
    return _digest({
        "base": recipe.base_hash(),
        "image_steps": recipe.image_steps,
        "cflags": list(recipe.cflags),
        "guest": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(guest.items())},
    })
