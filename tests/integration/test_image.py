"""The workload image for real: the C guest helpers (compiled here with gcc and run), and the
built image itself (root + debootstrap)."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import requires_root_and

from isotax import protocols
from isotax.image.build import ImageError, ensure_image, remove_image, show_images
from isotax.image.recipe import (
    CFLAGS,
    default_guest_dir,
    guest_files,
    image_hash,
)

GUEST = default_guest_dir()
# sha256 of `itx-corpus --bytes 1M --seed 1` (CORPUS_VERSION 1). The corpus is defined to be
# the same on every machine and compiler: a change here means the workload input changed, and
# results before and after are not comparable (bump CORPUS_VERSION in itx-corpus.c).
CORPUS_1M_SEED1 = "bbdff9fea3131b2ed5e1728f5830ccef1e19baaa6b65029da4ce929ba2b7d6a1"


# ------------------------------------------------------------------- the C guest helpers


@pytest.fixture(scope="module")
def helpers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed (apt-get install gcc libc6-dev)")
    out = tmp_path_factory.mktemp("helpers")
    for src in sorted(GUEST.glob("*.c")):
        subprocess.run(["gcc", *CFLAGS, "-Werror", "-o", str(out / src.stem), str(src)],
                       check=True, capture_output=True, text=True)
    return out


def test_itx_time_reports_exit_status_and_rusage(helpers: Path) -> None:
    p = subprocess.run([str(helpers / "itx-time"), "--", "sh", "-c", "sleep 0.2; exit 3"],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 3
    rec = json.loads(p.stderr.strip().splitlines()[-1])
    assert set(rec) >= {"wall_ns", "utime_us", "stime_us", "maxrss_kb", "exit", "signal"}
    assert rec["exit"] == 3 and rec["signal"] == 0
    assert 0.2e9 <= rec["wall_ns"] < 5e9
    assert rec["maxrss_kb"] > 0


def test_itx_time_counts_cpu_time_of_the_child(helpers: Path) -> None:
    # ~0.3 s of pure CPU in the child: utime must see it, wall must be at least that.
    burn = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass\n"
    p = subprocess.run([str(helpers / "itx-time"), sys.executable, "-c", burn],
                       capture_output=True, text=True, check=False)
    rec = json.loads(p.stderr.strip().splitlines()[-1])
    assert p.returncode == 0
    assert rec["utime_us"] + rec["stime_us"] >= 250_000
    assert rec["wall_ns"] >= 250_000_000


def test_itx_time_signal_file_output_and_errors(helpers: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    p = subprocess.run([str(helpers / "itx-time"), "-o", str(out), "sh", "-c", "kill -9 $$"],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 137 and p.stderr == ""
    rec = json.loads(out.read_text())
    assert rec["signal"] == 9 and rec["exit"] == 137
    missing = subprocess.run([str(helpers / "itx-time"), "/nonexistent/itx-x"],
                             capture_output=True, text=True, check=False)
    assert missing.returncode == 127
    assert subprocess.run([str(helpers / "itx-time")], capture_output=True,
                          check=False).returncode == 125
    bad_out = subprocess.run([str(helpers / "itx-time"), "-o", "/nonexistent/dir/f", "true"],
                             capture_output=True, text=True, check=False)
    assert bad_out.returncode == 125 and "cannot open" in bad_out.stderr


def _corpus(helpers: Path, nbytes: str, seed: str) -> bytes:
    return subprocess.run([str(helpers / "itx-corpus"), "--bytes", nbytes, "--seed", seed],
                          capture_output=True, check=True).stdout


def test_itx_corpus_is_deterministic_and_exact(helpers: Path) -> None:
    a = _corpus(helpers, "1M", "1")
    assert len(a) == 1 << 20
    assert a == _corpus(helpers, "1048576", "1")
    assert hashlib.sha256(a).hexdigest() == CORPUS_1M_SEED1
    assert _corpus(helpers, "1M", "2") != a
    assert _corpus(helpers, "1000", "1") == a[:1000]  # a prefix, whatever the length
    assert _corpus(helpers, "0", "1") == b""
    bad = subprocess.run([str(helpers / "itx-corpus"), "--bytes", "12X"], capture_output=True,
                         check=False)
    assert bad.returncode == 2 and b"usage" in bad.stderr


def test_itx_corpus_compresses_like_english(helpers: Path) -> None:
    data = _corpus(helpers, "4M", "1")
    text = data.decode("ascii")  # plain ASCII text
    assert text.count("\n") > 1000 and text.count(". ") > 10_000
    ratio = len(data) / len(lzma.compress(data, preset=2))
    assert 3.3 <= ratio <= 4.8, ratio


def test_itx_ready_prints_marker_and_exits(helpers: Path) -> None:
    before = time.monotonic_ns()
    p = subprocess.run([str(helpers / "itx-ready")], capture_output=True, text=True, check=True)
    word, ns = p.stdout.split()
    assert word == "ITX-READY" and before <= int(ns) <= time.monotonic_ns()


def test_itx_ready_hold_stops_on_sigterm(helpers: Path) -> None:
    p = subprocess.Popen([str(helpers / "itx-ready"), "--hold"], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().startswith("ITX-READY ")
        time.sleep(0.1)
        assert p.poll() is None  # holding
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=5) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


@requires_root_and("unshare", "nsenter", root_for="a PID namespace")
def test_itx_ready_as_pid1_reaps_orphans_and_obeys_sigterm(helpers: Path) -> None:
    """As PID 1 of a PID namespace (a container's init): orphans re-parented to it are
    reaped, and SIGTERM from outside stops it with status 0."""
    p = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child",
                          str(helpers / "itx-ready"), "--hold"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().startswith("ITX-READY ")
        init = int(Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()[0])
        # sh exits at once; its background sleep is orphaned to itx-ready, then exits.
        subprocess.run(["nsenter", f"--target={init}", "--pid", "sh", "-c", "sleep 0.2 &"],
                       check=True)
        children = Path(f"/proc/{init}/task/{init}/children")
        deadline = time.monotonic() + 5
        while children.read_text().split() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children.read_text().split() == []  # the exited orphan is gone, not a zombie
        os.kill(init, signal.SIGTERM)
        assert p.wait(timeout=5) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# ----------------------------------------------------------------------- cache housekeeping


@requires_root_and(root_for="mounting a tmpfs")
def test_remove_image_refuses_while_something_is_mounted_inside(tmp_path: Path) -> None:
    target = tmp_path / "images/abcd1234abcd1234/rootfs/proc"
    target.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "itx-test", str(target)], check=True)
    try:
        (target / "keep").write_text("x")
        with pytest.raises(ImageError, match="in use"):
            remove_image("all", tmp_path)
        assert (target / "keep").exists()
    finally:
        subprocess.run(["umount", str(target)], check=True)


# --------------------------------------------------------------------------- the image


@pytest.mark.integration
def test_image_is_complete_and_exports_agree(image) -> None:  # type: ignore[no-untyped-def]
    assert image.complete() and image.rootfs.is_dir()
    m = image.manifest()
    assert m["recipe_hash"] == image.recipe_hash == image.root.name
    pkgs = image.package_versions()
    assert pkgs["xz-utils"] and pkgs["hpcc"] and pkgs["libopenblas0-pthread"]
    assert f"linux-image-{image.kernel_version()}" in pkgs  # the kernel exported is installed
    fsck = subprocess.run(["e2fsck", "-fn", str(image.ext4)], capture_output=True, text=True,
                          check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    tar = subprocess.run(["tar", "-tf", str(image.tar), "./opt/isotax/bin/itx-time"],
                         capture_output=True, text=True, check=False)
    assert tar.returncode == 0
    assert image.kernel.read_bytes()[:4] == b"\x7fELF"
    assert image.initrd.stat().st_size > 1_000_000


@pytest.mark.integration
def test_image_has_every_guest_file_executable(image) -> None:  # type: ignore[no-untyped-def]
    for name in guest_files(GUEST):
        dest = image.helpers / name.removesuffix(".c") if name.endswith(".c") \
            else image.helpers / name
        assert dest.exists(), name
        assert dest.stat().st_mode & 0o777 == 0o755, name


@pytest.mark.integration
def test_helpers_run_inside_the_image(image, helpers: Path) -> None:  # type: ignore[no-untyped-def]
    root = str(image.rootfs)
    ready = subprocess.run(["chroot", root, "/opt/isotax/bin/itx-ready"], capture_output=True,
                           text=True, check=True)
    assert ready.stdout.startswith("ITX-READY ")
    # itx-time around the image's own xz: the JSON parses and the exit status passes through.
    t = subprocess.run(["chroot", root, "/opt/isotax/bin/itx-time", "xz", "--version"],
                       capture_output=True, text=True, check=False)
    assert t.returncode == 0 and "xz (XZ Utils)" in t.stdout
    assert json.loads(t.stderr.strip().splitlines()[-1])["exit"] == 0
    # The corpus: same bytes from the image's binary (twice) and from the one built here.
    sums = {hashlib.sha256(subprocess.run(
        ["chroot", root, "/opt/isotax/bin/itx-corpus", "--bytes", "1M", "--seed", "1"],
        capture_output=True, check=True).stdout).hexdigest() for _ in range(2)}
    sums.add(hashlib.sha256(_corpus(helpers, "1M", "1")).hexdigest())
    assert sums == {CORPUS_1M_SEED1}


@pytest.mark.integration
def test_hpcc_in_the_image_uses_openblas(image) -> None:  # type: ignore[no-untyped-def]
    ldd = subprocess.run(["chroot", str(image.rootfs), "ldd", "/usr/bin/hpcc"],
                         capture_output=True, text=True, check=True).stdout
    assert "libopenblas.so.0" in ldd
    alt = subprocess.run(["chroot", str(image.rootfs), "update-alternatives", "--query",
                          "libblas.so.3-x86_64-linux-gnu"], capture_output=True, text=True,
                         check=True).stdout
    assert "Value: /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3" in alt


@pytest.mark.integration
def test_initrd_carries_the_vm_drivers(image) -> None:  # type: ignore[no-untyped-def]
    kver = image.kernel_version()
    listing = subprocess.run(["chroot", str(image.rootfs), "lsinitramfs",
                              f"/boot/initrd.img-{kver}"], capture_output=True, text=True,
                             check=True).stdout
    mods = {Path(line).name.split(".ko")[0].replace("-", "_")
            for line in listing.splitlines() if ".ko" in line}
    for m in ("virtio_blk", "virtio_pci", "virtio_net", "virtio_console", "ext4", "9p",
              "9pnet_virtio"):
        assert m in mods, m
    assert image.initrd.read_bytes() == (image.rootfs / f"boot/initrd.img-{kver}").read_bytes()


@pytest.mark.integration
def test_ensure_image_returns_the_cached_image_quickly(image) -> None:  # type: ignore[no-untyped-def]
    t0 = time.monotonic()
    recipe = protocols.image_recipe()
    again = ensure_image(recipe)
    assert again == image and time.monotonic() - t0 < 2
    assert any(e["hash"] == image.recipe_hash and e["complete"] for e in show_images(recipe))


@pytest.mark.integration
def test_failed_helpers_build_leaves_nothing_behind(image, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A helper that does not compile: a clear error naming the file, and no image directory,
    no temporary directory and no mount left in the cache."""
    guest = tmp_path / "guest"
    guest.mkdir()
    (guest / "itx-broken.c").write_text("int main(void) { return }\n")
    cache = image.root.parent.parent
    recipe = protocols.image_recipe()
    ihash = image_hash(recipe, guest_files(guest))
    with pytest.raises(ImageError, match=r"compiling itx-broken\.c failed.*fix itx-broken\.c"):
        ensure_image(recipe, cache, guest_dir=guest)
    images = cache / "images"
    assert not (images / ihash).exists()
    assert not [p for p in images.iterdir() if p.name.startswith(f".tmp-{ihash}")]
    assert str(cache) not in Path("/proc/self/mountinfo").read_text()
