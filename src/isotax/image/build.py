"""Build and cache the workload image: debootstrap base layer + isotax helpers layer.

    ensure_image(recipe) -> ImageArtifacts  (builds what is missing, else the cached image)
    show_images(recipe)  -> list of dicts   (`isotax image show`)
    remove_image()                      (`isotax image rm`)

Cache layout (default $ISOTAX_CACHE or /var/cache/isotax):
    base/<base_hash>/rootfs, base.json          the debootstrap layer (minutes to build)
    images/<image_hash>/rootfs, rootfs.ext4, rootfs.tar, vmlinuz, vmlinux, initrd.img,
                        manifest.json           the exported image (seconds on top of base)
    debs/                                       debootstrap's package cache
Every layer is built in a `.tmp-*` directory beside its final place and renamed into place
only when complete (base.json / manifest.json written last), so a failed or interrupted build
leaves nothing that looks usable. Whatever is mounted under a build directory is unmounted in
`finally`, before anything is deleted.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from isotax.image.artifacts import ImageArtifacts
from isotax.image.distribution import read_os_release
from isotax.image.kernel import extract_vmlinux
from isotax.image.recipe import (
    INITRD_REQUIRED,
    ImageHook,
    Recipe,
    default_guest_dir,
    guest_files,
    image_hash,
)
from isotax.parsers import procfs
from isotax.parsers.os_release import parse_os_release

Log = Callable[[str], None]
# (directory, bytes needed, what for, the other fix) -> the refusal, or None when it fits
SpaceCheck = Callable[[Path, int, str, str], str | None]

MANIFEST_FORMAT = 1  # manifest.json format; history: 1 - first format
HEADROOM = 512 * 1024 * 1024  # free space left in rootfs.ext4 for workload files
# What a build takes in the cache, with a quarter more for the build's temporary files and a
# larger package set. Measured on the development machine (2026-11-24, `isotax image show` and
# `du -s --block-size=1M`): the image layer fd76eb4b3a742883, 3731 MiB (rootfs 1255, rootfs.tar
# 1242, rootfs.ext4 1150 on disk, vmlinux 63, the rest 21); the base layer 0793dda237c7a576,
# 1254 MiB, and debootstrap's package cache (debs/) 193 MiB.
IMAGE_BUILD_BYTES = 4664 * 1024 * 1024  # 3731 MiB + 25%
BASE_BUILD_BYTES = 1809 * 1024 * 1024  # 1254 + 193 MiB + 25%
CHROOT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LC_ALL": "C",
    "DEBIAN_FRONTEND": "noninteractive",
    "HOME": "/root",
}


class ImageError(Exception):
    """A build could not be done; the message names the problem and the fix in one line."""


def default_cache_dir() -> Path:
    return Path(os.environ.get("ISOTAX_CACHE") or "/var/cache/isotax")


# ---------------------------------------------------------------------------------- public API


def ensure_image(recipe: Recipe, cache_dir: Path | None = None, log: Log | None = None,
                 guest_dir: Path | None = None,
                 space: SpaceCheck | None = None) -> ImageArtifacts:
    """Return the image for the recipe and the guest helpers, building what is missing. The
    caller makes the recipe with the registered workloads' packages:
    isotax.protocols.image_recipe(). Before a build, `space`
    (isotax.host.facts.diskspace.check, from a caller above the host layer) is asked about the
    cache and the bytes the build needs; its line, if it has one, refuses the build."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    say: Log = log or (lambda _msg: None)
    guest = guest_files(guest_dir or default_guest_dir())
    ihash = image_hash(recipe, guest)
    final = cache / "images" / ihash
    art = ImageArtifacts(ihash, final)
    if art.complete():
        return art
    _preflight()
    (cache / "images").mkdir(parents=True, exist_ok=True)
    # Another isotax process may be building the same image: wait for it instead of racing.
    with _lock(cache / "images" / f".lock-{ihash}", say, f"image {ihash}"):
        if art.complete():
            return art
        _clean_stale(final.parent, ihash)
        if space is not None:
            _check_space(cache, recipe, space)
        base_root, base_info = _ensure_base(cache, recipe, say)
        if final.exists():  # no manifest: a leftover of something that was not our rename
            _remove_tree(final)
        t0 = time.monotonic()
        say(f"image {ihash}: building helpers layer on base {recipe.base_hash()}")
        _build_image(base_root, base_info, recipe, guest, ihash, final, t0, say)
        say(f"image {ihash}: ready in {time.monotonic() - t0:.1f} s at {final}")
    return art


def show_images(recipe: Recipe | Sequence[Recipe],
                cache_dir: Path | None = None) -> list[dict[str, object]]:
    """One dict per cached layer (images first, then bases), for `isotax image show`; the
    recipe (as for ensure_image), or one per distribution, tells which layers are current."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    recipes = [recipe] if isinstance(recipe, Recipe) else list(recipe)
    guest = guest_files(default_guest_dir())
    # What the next build of this isotax would use, for each recipe's distribution.
    current = {"image": {image_hash(r, guest) for r in recipes},
               "base": {r.base_hash() for r in recipes}}
    out: list[dict[str, object]] = []
    for layer, marker in (("image", "manifest.json"), ("base", "base.json")):
        parent = cache / ("images" if layer == "image" else "base")
        if not parent.is_dir():
            continue
        for d in sorted(parent.iterdir()):
            if not d.is_dir() or d.name.startswith("."):
                continue
            entry: dict[str, object] = {"layer": layer, "hash": d.name, "path": str(d),
                                        "complete": (d / marker).exists(),
                                        "current": d.name in current[layer],
                                        "size_bytes": _du(d)}
            if (d / marker).exists():
                meta = json.loads((d / marker).read_text())
                entry["built_at"] = meta.get("built_at", "")
                entry["build_s"] = meta.get("build_s")
                entry["packages"] = len(meta.get("packages", {}))
                inputs = meta.get("recipe") or meta.get("inputs") or {}
                entry["distribution"] = inputs.get("suite", "")
                if layer == "image":
                    entry["base_hash"] = meta.get("base_hash", "")
                    entry["kernel"] = meta.get("kernel", {}).get("version", "")
            out.append(entry)
    return out


def remove_image(hash_or_all: str, cache_dir: Path | None = None) -> list[Path]:
    """Remove one cached layer by (a unique prefix of) its hash, or everything with "all".
    Refuses while anything is mounted inside it (a running container or VM uses it)."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    dirs = [d for parent in (cache / "images", cache / "base") if parent.is_dir()
            for d in sorted(parent.iterdir()) if d.is_dir()]
    if hash_or_all == "all":
        targets = dirs
    else:
        if not hash_or_all or hash_or_all.startswith("."):
            raise ImageError(f"no image {hash_or_all!r}: give a hash from `isotax image show`")
        targets = [d for d in dirs if d.name.startswith(hash_or_all)]
        if not targets:
            raise ImageError(f"no cached image or base matches {hash_or_all!r} in {cache} "
                             "(see `isotax image show`)")
        if len(targets) > 1:
            raise ImageError(f"{hash_or_all!r} matches {len(targets)} entries: "
                             "give more digits of the hash")
    for d in targets:
        busy = _mounts_under(d)
        if busy:
            raise ImageError(f"{d} is in use ({busy[0]} is mounted): stop the container/VM "
                             "using it, then retry")
    for d in targets:
        _remove_tree(d)
    return targets


def _check_space(cache: Path, recipe: Recipe, space: SpaceCheck) -> None:
    """Refuse, before anything is written, a build the cache's filesystem has no room for:
    the image layer, and the base layer too when it is not cached."""
    base = (cache / "base" / recipe.base_hash() / "base.json").exists()
    needed = IMAGE_BUILD_BYTES + (0 if base else BASE_BUILD_BYTES)
    what = "building the workload image" + ("" if base else " and its base layer")
    refusal = space(cache, needed, what,
                    "or set ISOTAX_CACHE to a directory on a larger disk, then run it again")
    if refusal:
        raise ImageError(refusal)


# ------------------------------------------------------------------------------- base layer


def _ensure_base(cache: Path, recipe: Recipe, say: Log) -> tuple[Path, dict[str, object]]:
    bhash = recipe.base_hash()
    final = cache / "base" / bhash
    marker = final / "base.json"
    (cache / "base").mkdir(parents=True, exist_ok=True)
    with _lock(cache / "base" / f".lock-{bhash}", say, f"base {bhash}"):
        if marker.exists():
            return final / "rootfs", json.loads(marker.read_text())
        _clean_stale(final.parent, bhash)
        if final.exists():
            _remove_tree(final)
        tmp = cache / "base" / f".tmp-{bhash}-{os.getpid()}"
        t0 = time.monotonic()
        try:
            info = _build_base(tmp, cache, recipe, say)
            info["build_s"] = round(time.monotonic() - t0, 1)
            info["built_at"] = _now()
            (tmp / "base.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
            os.rename(tmp, final)
        finally:
            _cleanup_tmp(tmp)
        say(f"base {bhash}: built in {info['build_s']} s")
        return final / "rootfs", info


def _build_base(tmp: Path, cache: Path, recipe: Recipe, say: Log) -> dict[str, object]:
    root = tmp / "rootfs"
    tmp.mkdir(parents=True)
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    say(f"base: debootstrap {recipe.suite} ({len(recipe.packages)} packages), a few minutes")
    _run(["debootstrap", f"--variant={recipe.variant}",
          f"--components={','.join(recipe.components)}",
          f"--include={','.join(recipe.packages)}",
          f"--cache-dir={debs}",
          recipe.suite, str(root), recipe.mirror],
         what="debootstrap", log_to=tmp / "debootstrap.log",
         fix="check the network path to the mirror and that every package exists in "
             f"{recipe.suite}; the full log is in {tmp / 'debootstrap.log'}")

    # The initrd: only the modules a VM needs (small = faster boot under TCG), never the
    # build host's hardware (MODULES=dep would look at this machine).
    (root / "etc/initramfs-tools/modules").write_text(
        "# isotax: drivers for the VM's root disk and channels\n"
        + "".join(f"{m}\n" for m in recipe.initrd_modules))
    (root / "etc/initramfs-tools/conf.d/isotax.conf").write_text("MODULES=list\n")
    (root / "etc/hostname").write_text("itx\n")

    comps = " ".join(recipe.components)
    (root / "etc/apt/sources.list").write_text(
        "# isotax: the same suites a Debian host has\n"
        + "".join(f"deb {recipe.mirror} {s} {comps}\n"
                  for s in (recipe.suite, *recipe.update_suites))
        + (f"deb {recipe.security} {comps}\n" if recipe.security else ""))

    with _chroot_mounts(root):
        say("base: applying point-release and security updates")
        _chroot(root, ["apt-get", "-q", "update"], what="apt-get update in the image")
        _chroot(root, ["apt-get", "-y", "-q", "upgrade"], what="apt-get upgrade in the image")
        hooked = {h.name: _run_hook(root, h, say) for h in recipe.hooks}
        say("base: generating the initrd")
        _chroot(root, ["update-initramfs", "-u", "-k", "all"], what="update-initramfs")
        kver = _kernel_version(root)
        listing = _chroot(root, ["lsinitramfs", f"/boot/initrd.img-{kver}"], what="lsinitramfs")
        _chroot(root, ["apt-get", "clean"], what="apt-get clean")

    missing = _missing_modules(listing, root / "lib/modules" / kver, INITRD_REQUIRED)
    if missing:
        raise ImageError(f"the image's initrd lacks {', '.join(missing)}: check "
                         "INITRD_MODULES in isotax/image/recipe.py against the kernel")
    return {
        "base_hash": recipe.base_hash(),
        "inputs": recipe.base_inputs(),
        "kernel_version": kver,
        "hooks": hooked,
    }


def _run_hook(root: Path, hook: ImageHook, say: Callable[[str], None]) -> list[str]:
    """A workload's image hook in the chroot (recipe.ImageHook): its commands, then its
    check; the check's kept lines, which must show `expect`."""
    say(f"base: image hook {hook.name}")
    for argv in hook.commands:
        _chroot(root, list(argv), what=f"image hook {hook.name}: {' '.join(argv[:3])}")
    if not hook.check:
        return []
    out = _chroot(root, list(hook.check), what=f"image hook {hook.name}'s check")
    kept = [ln.strip() for ln in out.splitlines() if re.search(hook.keep, ln)]
    if hook.expect and not any(hook.expect in ln for ln in kept):
        raise ImageError(f"image hook {hook.name}: {hook.fail or 'its check failed'} "
                         f"({'; '.join(kept) or 'nothing matched ' + repr(hook.keep)})")
    return kept


def _kernel_version(root: Path) -> str:
    vers = sorted(p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob("vmlinuz-*"))
    if len(vers) != 1:
        raise ImageError(f"expected one kernel in the image's /boot, found {vers or 'none'}: "
                         "check linux-image-amd64 in the package list")
    return vers[0]


def _missing_modules(listing: str, moddir: Path, wanted: Sequence[str]) -> list[str]:
    """Modules neither in the initrd listing nor built into the kernel ('-' and '_' alike)."""
    def norm(s: str) -> str:
        return s.replace("-", "_")
    present = set()
    for line in listing.splitlines():
        name = line.rsplit("/", 1)[-1]
        if ".ko" in name:
            present.add(norm(name.split(".ko", 1)[0]))
    builtin = moddir / "modules.builtin"
    if builtin.exists():
        for line in builtin.read_text().splitlines():
            present.add(norm(line.rsplit("/", 1)[-1].split(".ko", 1)[0]))
    return [m for m in wanted if norm(m) not in present]


# ----------------------------------------------------------------------------- helpers layer


def _build_image(base_root: Path, base_info: dict[str, object], recipe: Recipe,
                 guest: dict[str, bytes], ihash: str, final: Path, t0: float, say: Log) -> None:
    tmp = final.parent / f".tmp-{ihash}-{os.getpid()}"
    try:
        tmp.mkdir(parents=True)
        root = tmp / "rootfs"
        # A real copy (reflink where the filesystem can): the base stays pristine for reuse.
        _run(["cp", "-a", "--reflink=auto", str(base_root), str(root)], what="copying the base")
        helpers = _install_guest(root, tmp / "src", guest, recipe, say)
        # Sanity: the helpers run inside the image's own root.
        out = _run(["chroot", str(root), "/opt/isotax/bin/itx-ready"], what="itx-ready in chroot")
        if not out.startswith("ITX-READY "):
            raise ImageError(f"itx-ready printed {out[:60]!r} in the image: fix itx-ready.c")

        kver = str(base_info["kernel_version"])
        shutil.copyfile(root / f"boot/vmlinuz-{kver}", tmp / "vmlinuz")
        shutil.copyfile(root / f"boot/initrd.img-{kver}", tmp / "initrd.img")
        vmlinux_ok = extract_vmlinux(tmp / "vmlinuz", tmp / "vmlinux")

        packages = _packages(root)
        release = _release(root, recipe)
        say(f"image {ihash}: exporting rootfs.tar and rootfs.ext4")
        _run(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", str(root),
              "-cf", str(tmp / "rootfs.tar"), "."], what="tar of the rootfs")
        used = _du(root)
        size_mib = (used + HEADROOM) // (1024 * 1024) + 1
        _run(["mkfs.ext4", "-q", "-F", "-L", "itx-root", "-m", "0", "-d", str(root),
              str(tmp / "rootfs.ext4"), f"{size_mib}M"], what="mkfs.ext4")
        _run(["e2fsck", "-fn", str(tmp / "rootfs.ext4")], what="e2fsck of rootfs.ext4")

        manifest = {
            "format": MANIFEST_FORMAT,
            "recipe_hash": ihash,
            "base_hash": recipe.base_hash(),
            "recipe": recipe.to_dict(),
            "built_at": _now(),
            "build_s": {"base": base_info.get("build_s"),
                        "helpers": round(time.monotonic() - t0, 1)},
            "base_built_at": base_info.get("built_at"),
            "kernel": {"version": kver, "vmlinux": vmlinux_ok},
            "distribution": release,
            "hooks": base_info.get("hooks"),
            "helpers": helpers,
            "compiler": _first_line(["gcc", "--version"]),
            "sizes": {"rootfs_bytes": used,
                      "rootfs_ext4_bytes": (tmp / "rootfs.ext4").stat().st_size,
                      "rootfs_tar_bytes": (tmp / "rootfs.tar").stat().st_size,
                      "initrd_bytes": (tmp / "initrd.img").stat().st_size},
            "packages": packages,
        }
        shutil.rmtree(tmp / "src", ignore_errors=True)
        # Last: its presence is what makes the image complete.
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        os.rename(tmp, final)
    finally:
        _cleanup_tmp(tmp)


def _install_guest(root: Path, srcdir: Path, guest: dict[str, bytes], recipe: Recipe,
                   say: Log) -> dict[str, dict[str, str]]:
    """Compile every .c on the host (static) and copy every other guest file, all 0755."""
    import hashlib

    bindir = root / "opt/isotax/bin"
    bindir.mkdir(parents=True, exist_ok=True)
    srcdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, dict[str, str]] = {}
    for name, data in sorted(guest.items()):
        if name.endswith(".c"):
            src = srcdir / name
            src.write_bytes(data)
            dest = bindir / name.removesuffix(".c")
            _run(["gcc", *recipe.cflags, "-o", str(dest), str(src)], what=f"compiling {name}",
                 fix=f"fix {name} in src/isotax/guest")
        else:
            dest = bindir / name
            dest.write_bytes(data)
        dest.chmod(0o755)
        os.chown(dest, 0, 0)
        out[dest.name] = {"source": name,
                          "source_sha256": hashlib.sha256(data).hexdigest(),
                          "sha256": hashlib.sha256(dest.read_bytes()).hexdigest()}
        say(f"  helper {dest.name}")
    return out


def _release(root: Path, recipe: Recipe) -> dict[str, str]:
    """The image's own os-release (codename, version, name), which must be the recipe's
    release: debootstrap of one suite with another's sources would make a mixed image."""
    found = parse_os_release(read_os_release(root))
    if found.get("VERSION_CODENAME") != recipe.suite:
        raise ImageError(f"the image's os-release says {found.get('PRETTY_NAME', 'nothing')!r}, "
                         f"not {recipe.suite}: remove it with `isotax image rm all` and rebuild")
    return {"codename": recipe.suite, "version": found.get("VERSION_ID", ""),
            "pretty_name": found.get("PRETTY_NAME", "")}


def _packages(root: Path) -> dict[str, str]:
    text = _chroot(root, ["dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Package}\t"
                          "${Version}\n"], what="dpkg-query")
    pkgs: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0].startswith("ii"):
            pkgs[parts[1]] = parts[2]
    if "xz-utils" not in pkgs:
        raise ImageError("dpkg-query in the image lists no xz-utils: the base layer is broken, "
                         "remove it with `isotax image rm all` and rebuild")
    return pkgs


# --------------------------------------------------------------------------------- plumbing


def _preflight() -> None:
    if os.geteuid() != 0:
        raise ImageError("building the workload image needs root (debootstrap, chroot, "
                         "mkfs): run isotax as root")
    for tool, pkg in (("debootstrap", "debootstrap"), ("gcc", "gcc libc6-dev"),
                      ("mkfs.ext4", "e2fsprogs"), ("chroot", "coreutils"), ("tar", "tar")):
        if shutil.which(tool) is None:
            raise ImageError(f"{tool} not found: apt-get install {pkg}")


def _run(argv: Sequence[str], what: str, fix: str = "", log_to: Path | None = None,
         env: dict[str, str] | None = None) -> str:
    """Run a build step; on failure raise ImageError with its last words."""
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, env=env, check=False)
    except FileNotFoundError as e:
        raise ImageError(f"{what}: {e}") from None
    if log_to is not None:
        log_to.write_text(p.stdout + p.stderr)
    if p.returncode != 0:
        tail = " | ".join((p.stderr.strip() or p.stdout.strip()).splitlines()[-4:])
        raise ImageError(f"{what} failed (exit {p.returncode}): {tail}"
                         + (f"; {fix}" if fix else ""))
    return p.stdout


def _chroot(root: Path, argv: Sequence[str], what: str) -> str:
    return _run(["chroot", str(root), *argv], what=what, env=CHROOT_ENV)


@contextmanager
def _chroot_mounts(root: Path) -> Iterator[None]:
    """/proc and /sys inside the chroot for maintainer tools; always unmounted."""
    mounted: list[Path] = []
    try:
        for fstype, sub in (("proc", "proc"), ("sysfs", "sys")):
            target = root / sub
            target.mkdir(exist_ok=True)
            _run(["mount", "-t", fstype, f"itx-{fstype}", str(target)], what=f"mount {sub}")
            mounted.append(target)
        yield
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", str(target)], capture_output=True, check=False)
        _umount_under(root)


def _mounts_under(path: Path) -> list[str]:
    """Mount points at or below path, deepest first (from /proc/self/mountinfo)."""
    prefix = str(path.resolve())
    try:
        mounts = procfs.parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    except OSError:
        return []
    found = [m.point for m in mounts if m.point == prefix or m.point.startswith(prefix + "/")]
    return sorted(found, key=len, reverse=True)


def _umount_under(path: Path) -> None:
    for mp in _mounts_under(path):
        if subprocess.run(["umount", mp], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", mp], capture_output=True, check=False)


def _remove_tree(path: Path) -> None:
    """Delete a build tree, never across a mount (rmtree would descend into it)."""
    _umount_under(path)
    busy = _mounts_under(path)
    if busy:
        raise ImageError(f"cannot remove {path}: {busy[0]} is still mounted; unmount it first")
    shutil.rmtree(path, ignore_errors=False)


def _clean_stale(parent: Path, h: str) -> None:
    """Remove `.tmp-<hash>-<pid>` left by a build that was killed (SIGKILL, power loss): only
    those whose process is gone; called under the layer's lock."""
    for tmp in parent.glob(f".tmp-{h}-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove_tree(tmp)


def _cleanup_tmp(tmp: Path) -> None:
    if tmp.exists():
        _remove_tree(tmp)


@contextmanager
def _lock(path: Path, say: Log, what: str) -> Iterator[None]:
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"{what}: another isotax process is building it, waiting")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _du(path: Path) -> int:
    """Bytes used on disk under path (hard links counted once), like `du -s`."""
    p = subprocess.run(["du", "-s", "-x", "--block-size=1", str(path)], capture_output=True,
                       text=True, check=False)
    try:
        return int(p.stdout.split()[0])
    except (IndexError, ValueError):
        return 0


def _first_line(argv: Sequence[str]) -> str:
    p = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    return (p.stdout.splitlines() or [""])[0]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
