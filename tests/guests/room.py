"""The guest room: real hosts of the kinds isotax's users run, made here and booted under QEMU.

This development machine is a hybrid cgroup-v1 host without systemd as init; users run systemd
on the unified cgroup v2 hierarchy (Debian 12 and 13, Ubuntu, Fedora, RHEL). It cannot become
such a host, but it can make and boot one:

1. `base(suite)`: a Debian root filesystem with systemd as init and Debian's own kernel, made
   with debootstrap and cached by its recipe (a few minutes, once per suite).
2. `prepare(suite, checkout)`: isotax installed in it by its own `scripts/setup.sh
   --kubernetes`, run in a chroot, where apt, pip and the rest run at native speed instead of
   under emulation. gVisor's runsc and the local Kubernetes's binaries are copied from this
   host's caches (/opt/isotax), so setup.sh finds them built at its pinned versions, and the
   workload image from this host's image cache, so the guest measures the same bits.
3. `boot(suite, share, timeout)`: the root filesystem as an ext4 disk, booted under QEMU with
   its own kernel and initrd (TCG here, KVM where a probe says the host has it), systemd as
   PID 1. A unit of the guest runs the room's script from a virtio-9p share, writes its output
   there, and powers the guest off.

Nothing here touches this host's network or cgroups: the guest has no network device, and
everything it writes goes to its own disk or the share. The QEMU process is started and stopped
by its PID. Everything is kept under $ISOTAX_GUEST_CACHE (default /var/cache/isotax-guests).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

CACHE = Path(os.environ.get("ISOTAX_GUEST_CACHE", "/var/cache/isotax-guests"))
MIRROR = "http://deb.debian.org/debian"
SECURITY = "http://deb.debian.org/debian-security"
ROOM_FORMAT = 1  # bump when what base() makes changes in a way the key does not see

Log = Callable[[str], None]

# What a host of users' kind boots with and has, beyond debootstrap's minimal base: systemd as
# init (systemd-sysv), udev and D-Bus (systemd's and Podman's), Debian's kernel and initramfs,
# and the tools setup.sh itself calls before it installs anything (ca-certificates for apt over
# https, python3 for its own helpers).
BASE_PACKAGES = ("systemd-sysv", "udev", "dbus", "linux-image-amd64", "initramfs-tools", "kmod",
                 "ca-certificates", "procps", "iproute2", "python3", "util-linux")


@dataclass(frozen=True)
class Guest:
    """One kind of host the room makes: a Debian suite, booted with systemd on cgroup v2."""

    suite: str  # "bookworm" (Debian 12) or "trixie" (Debian 13)
    packages: tuple[str, ...] = BASE_PACKAGES
    memory_mib: int = 10240
    cpus: int = 2
    disk_gib: int = 40
    extra: dict[str, str] = field(default_factory=dict)

    def key(self) -> str:
        text = json.dumps({"suite": self.suite, "packages": sorted(self.packages),
                           "mirror": MIRROR, "format": ROOM_FORMAT}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def dir(self) -> Path:
        return CACHE / f"{self.suite}-{self.key()}"

    @property
    def rootfs(self) -> Path:
        return self.dir / "rootfs"


def _say(msg: str) -> None:
    print(f"guest room: {msg}", flush=True)


def _run(argv: list[str], log: Path | None = None, env: dict[str, str] | None = None,
         timeout: float | None = None) -> None:
    """argv, its output appended to log (or inherited); a failure raises with the log's tail."""
    if log is None:
        subprocess.run(argv, check=True, env=env, timeout=timeout)
        return
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                            timeout=timeout, check=False).returncode
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        raise RuntimeError(f"{argv[0]} exited {rc} (log {log}):\n" + "\n".join(tail))


def deb822_sources(suite: str) -> str:
    """The apt sources a fresh Debian install writes (deb822, /etc/apt/sources.list.d/
    debian.sources): main with its updates and security suites, as users' hosts have them, so
    setup.sh meets what it meets there (it adds non-free itself, for netperf). Pure."""
    return (f"Types: deb\nURIs: {MIRROR}\nSuites: {suite} {suite}-updates\n"
            "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            f"Types: deb\nURIs: {SECURITY}\nSuites: {suite}-security\n"
            "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")


ROOM_UNIT = """\
# the guest room (tests/guests): run the room's script from the share, then power off
[Unit]
Description=isotax guest room
After=basic.target systemd-user-sessions.service
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/guest-room
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity
[Install]
WantedBy=multi-user.target
"""

# Mounts the share (9p over virtio), runs its run.sh with its output in the share and on the
# console, records the exit status, and powers off whatever happened.
ROOM_SCRIPT = """\
#!/bin/sh
# isotax guest room: the share's run.sh, its log and status back in the share, then power off
mkdir -p /mnt/guest-room
modprobe 9pnet_virtio 2>/dev/null
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576 guestroom /mnt/guest-room; then
  mkdir -p /mnt/guest-room/out
  bash /mnt/guest-room/run.sh > /mnt/guest-room/out/run.log 2>&1
  echo $? > /mnt/guest-room/out/status
  sync
  umount /mnt/guest-room
else
  echo "guest-room: the share did not mount"
fi
systemctl poweroff --no-block
"""


def base(g: Guest, say: Log = _say) -> Path:
    """The suite's root filesystem with systemd as init, made once (debootstrap, then the
    guest room's unit and a host's apt sources); the cached one when it is there."""
    done = g.dir / "base.json"
    if done.exists():
        return g.rootfs
    g.dir.mkdir(parents=True, exist_ok=True)
    tmp = g.dir / f".tmp-rootfs-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    if g.rootfs.exists():
        shutil.rmtree(g.rootfs)
    log = g.dir / "debootstrap.log"
    t0 = time.monotonic()
    say(f"{g.suite}: debootstrap ({len(g.packages)} packages beyond minbase), a few minutes")
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(g.packages)}",
          f"--cache-dir={_debs()}", g.suite, str(tmp), MIRROR], log=log)
    (tmp / "etc/apt/sources.list").unlink(missing_ok=True)
    (tmp / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
    (tmp / "etc/apt/sources.list.d/debian.sources").write_text(deb822_sources(g.suite))
    (tmp / "etc/fstab").write_text("# isotax guest room\n/dev/vda / ext4 defaults 0 1\n")
    os.rename(tmp, g.rootfs)
    done.write_text(json.dumps({"suite": g.suite, "key": g.key(),
                                "debootstrap_s": round(time.monotonic() - t0, 1)}) + "\n")
    say(f"{g.suite}: base made in {time.monotonic() - t0:.0f} s")
    return g.rootfs


def install_room_unit(root: Path, suite: str) -> None:
    """The unit that runs the share's script at boot, its script, and the guest's name. Not
    named itx-: they are the room's, not isotax's, and `isotax doctor` in the guest must not
    count them as left behind. No password anywhere: the room logs in nowhere."""
    (root / "etc/hostname").write_text(f"guest-{suite}\n")
    (root / "etc/hosts").write_text(f"127.0.0.1 localhost\n127.0.1.1 guest-{suite}\n")
    (root / "etc/systemd/system/guest-room.service").write_text(ROOM_UNIT)
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "guest-room.service").unlink(missing_ok=True)
    (wants / "guest-room.service").symlink_to("/etc/systemd/system/guest-room.service")
    script = root / "usr/local/sbin/guest-room"
    script.write_text(ROOM_SCRIPT)
    script.chmod(0o755)
    for old in ("etc/systemd/system/itx-guest-room.service", "usr/local/sbin/itx-guest-room",
                "etc/systemd/system/multi-user.target.wants/itx-guest-room.service"):
        (root / old).unlink(missing_ok=True)


def _debs() -> Path:
    d = CACHE / "debs"
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def chroot_mounts(root: Path) -> Iterator[None]:
    """/proc, /sys, /dev, /dev/pts and a /run of its own in the chroot (apt, pip and
    maintainer scripts need them); always unmounted, deepest first."""
    mounted: list[Path] = []
    try:
        # Named for the room, not itx-: isotax's own leftover sweeps (a run's recovery, doctor
        # --fix) remove itx- mounts whose owner they cannot find, this chroot's /proc included.
        for argv, sub in ((["-t", "proc", "guestroom-proc"], "proc"),
                          (["-t", "sysfs", "guestroom-sys"], "sys"),
                          (["--bind", "/dev"], "dev"), (["--bind", "/dev/pts"], "dev/pts"),
                          (["-t", "tmpfs", "guestroom-run"], "run")):
            target = root / sub
            target.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", *argv, str(target)], check=True)
            mounted.append(target)
        yield
    finally:
        for target in reversed(mounted):
            if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", str(target)], capture_output=True)


def _sync_checkout(checkout: Path, dest: Path) -> None:
    """The checkout's tracked and untracked-but-not-ignored files into dest, replacing what
    was there but the guest's own .venv (setup.sh keeps it up to date)."""
    if dest.exists():
        for p in dest.iterdir():
            if p.name != ".venv":
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    dest.mkdir(parents=True, exist_ok=True)
    files = subprocess.run(["git", "-C", str(checkout), "ls-files", "-z", "-co",
                            "--exclude-standard"], check=True, capture_output=True).stdout
    pack = subprocess.Popen(["tar", "-C", str(checkout), "--null", "-T", "-", "-cf", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    unpack = subprocess.Popen(["tar", "-C", str(dest), "-xf", "-"], stdin=pack.stdout)
    assert pack.stdin is not None and pack.stdout is not None
    pack.stdin.write(files)
    pack.stdin.close()
    pack.stdout.close()
    if unpack.wait() != 0 or pack.wait() != 0:
        raise RuntimeError(f"copying {checkout} into {dest} failed")


def _copy_tree(src: Path, dest: Path) -> None:
    """src's content into dest, files that are there already at the same size and time kept."""
    if src.exists():
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", "-u", f"{src}/.", str(dest)], check=True)


def workload_images(cache: Path = Path("/var/cache/isotax")) -> list[Path]:
    """This host's built workload images (complete ones: their manifest written last)."""
    return sorted(p.parent for p in (cache / "images").glob("*/manifest.json"))


# What setup.sh's work in the guest depends on: when none of it changed since the last
# prepare, the guest's root filesystem (and its disk) are kept as they are, and only the
# checkout travels, through the share, at each boot.
SETUP_INPUTS = ("scripts/setup.sh", "scripts/venv.sh", "scripts/kubernetes-build.sh",
                "requirements.lock", "pyproject.toml")


def setup_key(checkout: Path, images: list[Path], kubernetes: bool) -> str:
    h = hashlib.sha256()
    for name in SETUP_INPUTS:
        h.update(name.encode() + b"\0" + (checkout / name).read_bytes())
    h.update(" ".join(sorted(p.name for p in images)).encode())
    h.update(b"kubernetes" if kubernetes else b"")
    # The workload packages are each workload's own declaration (isotax workloads --packages).
    for mod in sorted((checkout / "src/isotax/workloads").glob("*.py")):
        h.update(mod.read_bytes())
    return h.hexdigest()[:16]


def images_for(suite: str, cache: Path = Path("/var/cache/isotax")) -> list[Path]:
    """This host's workload images of the guest's own Debian release (the one isotax picks on
    such a host), by their manifests' distribution; one that names none is bookworm's (built
    before the release was a choice)."""
    out = []
    for img in workload_images(cache):
        try:
            manifest = json.loads((img / "manifest.json").read_text())
        except (OSError, ValueError):
            continue
        if (manifest.get("distribution") or {}).get("codename", "bookworm") == suite:
            out.append(img)
    return out


def prepare(g: Guest, checkout: Path, say: Log = _say, kubernetes: bool = True) -> Path:
    """isotax installed in the guest's root filesystem by its own setup.sh, run in a chroot:
    the checkout copied to /root/isotax, the runtimes isotax builds copied from this host's
    /opt/isotax, the workload images of the guest's release linked from this host's cache;
    then the guest's disk made from it. Nothing is redone when setup.sh's inputs are those of
    the last prepare. Returns setup.sh's log."""
    root = base(g, say)
    log = g.dir / "setup.log"
    images = images_for(g.suite)
    key = setup_key(checkout, images, kubernetes)
    stamp = g.dir / "prepared.json"
    with contextlib.suppress(OSError, ValueError):
        if json.loads(stamp.read_text()).get("key") == key and (g.dir / "disk.raw").exists():
            say(f"{g.suite}: prepared already (setup inputs {key}); its disk kept")
            return log
    log.write_text("")
    install_room_unit(root, g.suite)
    _sync_checkout(checkout, root / "root/isotax")
    for sub in ("runsc", "kubernetes"):
        _copy_tree(Path("/opt/isotax") / sub, root / "opt/isotax" / sub)
    guest_images = root / "var/cache/isotax/images"
    guest_images.mkdir(parents=True, exist_ok=True)
    for old in guest_images.iterdir():
        if old.name not in {p.name for p in images}:
            shutil.rmtree(old)
    for img in images:
        if not (guest_images / img.name / "manifest.json").exists():
            # Hard links: no copy here; mkfs.ext4 -d copies them into the guest's disk.
            subprocess.run(["cp", "-al", str(img), str(guest_images / img.name)], check=True)
    shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
    # The chroot reaches the package registries through this machine's network, so it trusts
    # what this machine trusts there (a machine behind a TLS-inspecting proxy has its CA in
    # /usr/local/share/ca-certificates; setup.sh's pip and Go fetches need it).
    local_cas = sorted(Path("/usr/local/share/ca-certificates").glob("*.crt"))
    for ca in local_cas:
        (root / "usr/local/share/ca-certificates").mkdir(parents=True, exist_ok=True)
        shutil.copy(ca, root / "usr/local/share/ca-certificates" / ca.name)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "LC_ALL": "C.UTF-8", "HOME": "/root", "DEBIAN_FRONTEND": "noninteractive"}
    t0 = time.monotonic()
    say(f"{g.suite}: scripts/setup.sh{' --kubernetes' if kubernetes else ''} in a chroot "
        f"(log {log})")
    with chroot_mounts(root):
        if local_cas:
            _run(["chroot", str(root), "update-ca-certificates"], log=log, env=env)
        _run(["chroot", str(root), "bash", "-c",
              "cd /root/isotax && bash scripts/setup.sh" + (" --kubernetes" if kubernetes
                                                            else "")],
             log=log, env=env, timeout=3600)
    setup_s = round(time.monotonic() - t0, 1)
    say(f"{g.suite}: setup.sh done in {setup_s:.0f} s")
    disk_s = make_disk(g, say)
    stamp.write_text(json.dumps({"key": key, "setup_s": setup_s, "disk_s": disk_s,
                                 "at": time.time()}) + "\n")
    return log


def kernel(root: Path) -> tuple[Path, Path]:
    """The guest's own kernel and initrd (Debian's linux-image-amd64), the newest one."""
    kernels = sorted(root.glob("boot/vmlinuz-*"))
    if not kernels:
        raise RuntimeError(f"no kernel in {root}/boot")
    k = kernels[-1]
    initrd = root / "boot" / k.name.replace("vmlinuz-", "initrd.img-")
    if not initrd.exists():
        raise RuntimeError(f"{initrd} is missing (update-initramfs in the guest)")
    return k, initrd


def make_disk(g: Guest, say: Log = _say) -> float:
    """The prepared root filesystem as an ext4 disk image (sparse, disk.raw); each boot runs
    on a copy-on-write overlay of it, so every boot starts from what prepare() left. Returns
    the seconds it took."""
    disk = g.dir / "disk.raw"
    tmp = g.dir / "disk.raw.tmp"
    tmp.unlink(missing_ok=True)
    t0 = time.monotonic()
    _run(["mkfs.ext4", "-q", "-F", "-L", "guestroot", "-E", "lazy_itable_init=1",
          "-d", str(g.rootfs), str(tmp), f"{g.disk_gib}G"], log=g.dir / "mkfs.log")
    os.rename(tmp, disk)
    seconds = time.monotonic() - t0
    say(f"{g.suite}: disk made in {seconds:.0f} s "
        f"({disk.stat().st_blocks * 512 / 2**30:.1f} GiB used)")
    return round(seconds, 1)


def share_checkout(checkout: Path, share: Path, rev: str | None = None) -> None:
    """The checkout into the share's isotax/, which the guest's script copies over its
    /root/isotax before it runs anything (its .venv, made by setup.sh, is kept): the working
    tree as it is, or with rev (ISOTAX_GUEST_REV, e.g. HEAD) that commit's files, so that
    what the guests run cannot change under them while the tree is being edited (a tree copied
    between two related edits is code that never existed)."""
    dest = share / "isotax"
    if dest.exists():
        shutil.rmtree(dest)
    if rev is None:
        _sync_checkout(checkout, dest)
        return
    dest.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(checkout), "archive", "--format=tar", rev],
                               stdout=subprocess.PIPE)
    unpack = subprocess.run(["tar", "-C", str(dest), "-xf", "-"], stdin=archive.stdout,
                            check=False)
    assert archive.stdout is not None
    archive.stdout.close()
    if archive.wait() != 0 or unpack.returncode != 0:
        raise RuntimeError(f"git archive {rev} of {checkout} into {dest} failed")


# The room's steps (inside.sh), in order. Under TCG the measured pods (`cluster`) are not a
# default step, and the room says why: on 2026-11-29 they waited 16-44 min for the workload
# image's import, then multi-threaded TCG crashed the Debian 13 guest's kernel while its
# gVisor pod ran (an int3 oops in patched kernel text:
# tests/data/guests/console-trixie-gvisor-pod-int3.txt), and single-threaded TCG ran 3648 s
# until the API server stopped answering. A pod of each RuntimeClass is still started under
# TCG, by `sandbox`; ISOTAX_GUEST_STEPS="... cluster ..." runs the measured ones.
ALL_STEPS = "show doctor envs plan sandbox cluster vm"
NOT_UNDER_TCG = {"cluster": "isotax's measured pods: the workload image's import takes 16-44 "
                            "min under TCG, then the gVisor pod crashed the guest's kernel "
                            "under multi-threaded TCG and single-threaded TCG outran the "
                            "control plane's deadlines (3648 s, 2026-11-29); `sandbox` starts a "
                            "pod of each RuntimeClass instead"}


def default_steps(accel: str) -> list[str]:
    """The room's steps where ISOTAX_GUEST_STEPS does not choose: all of them under KVM, all
    but those NOT_UNDER_TCG under TCG."""
    return [s for s in ALL_STEPS.split() if accel == "kvm" or s not in NOT_UNDER_TCG]


def accelerator() -> str:
    """"kvm" where /dev/kvm opens and a probe boot of this room's kernel works under it, else
    "tcg". A KVM device is never assumed to be a working one (this machine's is not)."""
    if os.environ.get("ISOTAX_GUEST_ACCEL") in ("kvm", "tcg"):
        return os.environ["ISOTAX_GUEST_ACCEL"]
    return "tcg"


@dataclass
class Boot:
    """What one boot gave: the share's run.sh status (None: it never wrote one), the
    console's text, the seconds from QEMU's start to its exit, and whether it timed out."""

    status: int | None
    console: str
    seconds: float
    timed_out: bool
    accel: str


def kernel_panic(console: str) -> str:
    """One line naming a guest kernel's panic from its console: the oops, the process it hit
    and the syscall path ("" when the kernel did not panic). Under TCG a guest can die this
    way of the emulator, not of what runs in it: the Debian 13 guest double-faulted in runsc's
    pipe2 on 2026-11-29, its EFLAGS garbage. The room's failure then says so instead of
    "measured nothing"."""
    lines = console.splitlines()
    at = next((i for i, line in enumerate(lines) if "Kernel panic - not syncing" in line), -1)
    if at < 0:
        return ""
    def text(line: str) -> str:
        return line.split("] ", 1)[-1].strip()
    oops = next((text(line) for line in lines[:at] if "Oops:" in line or "BUG:" in line), "")
    comm = next((text(line).split(" Not tainted")[0].split(" Tainted")[0]
                 for line in lines[:at] if " Comm: " in line), "")
    trace: list[str] = []
    for line in lines[:at]:
        word = text(line)
        if "Call Trace" in word:
            trace = []
        elif "+0x" in word and not word.startswith(("?", "RIP", "Code")):
            trace.append(word.split("+")[0])
    rip = next((text(line).removeprefix("RIP: 0010:").split("+")[0]
                for line in lines[:at] if "RIP: 0010:" in line), "")
    calls = " < ".join(([rip] if rip else []) + trace[:6])
    return "; ".join(part for part in (text(lines[at]), oops, comm,
                                       f"in {calls}" if calls else "") if part)


def boot(g: Guest, share: Path, timeout: float, say: Log = _say) -> Boot:
    """Boot the guest once with share at the 9p tag guestroom; wait until it powers off (its
    room script does) or timeout, then stop QEMU by its PID."""
    base_disk = g.dir / "disk.raw"
    if not base_disk.exists():
        raise RuntimeError(f"{base_disk} is missing: prepare() makes it")
    disk = g.dir / "overlay.qcow2"
    disk.unlink(missing_ok=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(base_disk),
                    str(disk)], check=True)
    vmlinuz, initrd = kernel(g.rootfs)
    (share / "out").mkdir(parents=True, exist_ok=True)
    status_file = share / "out/status"
    status_file.unlink(missing_ok=True)
    console = g.dir / "console.log"
    accel = accelerator()
    accel_args = ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else \
        ["-accel", os.environ.get("ISOTAX_GUEST_TCG", "tcg,thread=multi,tb-size=512"),
         "-cpu", os.environ.get("ISOTAX_GUEST_CPU", "max")]
    argv = ["qemu-system-x86_64", "-name", f"guest-room-{g.suite}", *accel_args,
            "-machine", "q35", "-smp", str(g.cpus), "-m", f"{g.memory_mib}M",
            "-nodefaults", "-nographic", "-no-reboot", "-display", "none",
            "-serial", f"file:{console}",
            "-kernel", str(vmlinuz), "-initrd", str(initrd),
            # systemd's defaults on both suites are the unified hierarchy; said outright so a
            # kernel or systemd default change cannot silently hand the room a hybrid host.
            "-append", "root=/dev/vda rw console=ttyS0 panic=-1 "
                       "systemd.unified_cgroup_hierarchy=1 net.ifnames=0",
            "-drive", f"file={disk},format=qcow2,if=virtio,cache=unsafe",
            "-virtfs", f"local,path={share},mount_tag=guestroom,security_model=none,id=guestroom"]
    say(f"{g.suite}: booting under {accel} ({g.cpus} vCPUs, {g.memory_mib} MiB), "
        f"at most {timeout / 60:.0f} min; console in {console}")
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=(g.dir / "qemu.err").open("wb"))
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    seconds = time.monotonic() - t0
    with contextlib.suppress(OSError):
        disk.unlink()
    status = None
    with contextlib.suppress(OSError, ValueError):
        status = int(status_file.read_text().strip())
    text = console.read_text(errors="replace") if console.exists() else ""
    say(f"{g.suite}: guest off after {seconds:.0f} s, status {status}"
        f"{' (timed out)' if timed_out else ''}")
    return Boot(status, text, seconds, timed_out, accel)
