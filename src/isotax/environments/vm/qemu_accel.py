"""Which accelerator QEMU can use here: decided by a probe *boot*, not by /dev/kvm existing.

A /dev/kvm that opens is not proof that KVM runs a stock guest: on hosts that are themselves
VMs it may be a paravirtual KVM (kvm_pvm) under which a stock kernel crashes (an MSR assertion
with -cpu host, emulation failures on cmpxchg16b/xrstor), or nested virtualisation may be too
slow to boot. So the probe boots the real image under KVM, bounded in time, and falls back to
TCG saying why. The answer depends only on the host kernel, QEMU and the image, so it is cached
under <cache>/probes/ keyed by those three, and a run does not re-probe.

Before any boot, expected_accelerator() says in advance what QEMU will use here and why (no
/dev/kvm, a kvm_pvm host, a cached probe, or "a probe boot at the first run decides"), for
`isotax envs`, `doctor` and the run's first lines; proven_accelerator() runs the probe for
`doctor` when the image is built.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from isotax import protocols
from isotax.environments.base import Stopwatch
from isotax.environments.vm.qemu_initrd import select_initrd
from isotax.environments.vm.qemu_vm import BootError, Vm, VmConfig, qemu_version, select_kernel
from isotax.host import owners
from isotax.image.artifacts import ImageArtifacts
from isotax.image.build import default_cache_dir
from isotax.image.recipe import default_guest_dir, guest_files, image_hash

PROBE_TIMEOUT_S = 30.0
PROBE_FORMAT = 1  # probe cache file format; history: 1 - first format
KVM_DEVICE = Path("/dev/kvm")
SYS_MODULE = Path("/sys/module")
PROC_MODULES = Path("/proc/modules")
# Hardware KVM's vendor modules; kvm_pvm (PVM) is the paravirtual one that needs a PVM guest.
VENDOR_MODULES = ("kvm_intel", "kvm_amd")
PVM_MODULE = "kvm_pvm"
UNDECIDED = "KVM opens here; a probe boot at the first run decides (cached afterwards)"
PVM_WHAT = f"/dev/kvm is {PVM_MODULE}, a paravirtual KVM that runs only guests with a PVM kernel"
_FAILED = "a probe boot under KVM failed ("  # how _probe_boot's failure reasons begin
_TCG_SUFFIX = ", so QEMU uses TCG"  # and end


@dataclass(frozen=True)
class Probe:
    accel: str  # "kvm" or "tcg"
    reason: str  # why this accelerator (and why not KVM, when TCG)
    probe_s: float = 0.0  # how long the probe boot took (0 when none was needed)
    cached: bool = False  # read from the cache rather than measured now


@dataclass(frozen=True)
class Expectation:
    """What QEMU is expected to use here, told without booting anything."""

    accel: str  # "kvm", "tcg", or "" when a probe boot at the first run decides
    reason: str  # why, worded to follow "because"; the whole sentence when undecided
    proven: bool = False  # the answer of a probe boot (cached or just now), not a forecast

    def words(self) -> str:
        """"TCG here, because ...", "KVM here, because ...", or UNDECIDED's words."""
        if not self.accel:
            return self.reason
        return f"{self.accel.upper()} here, because {self.reason}"


def kvm_openable(device: Path = KVM_DEVICE) -> str:
    """"" when /dev/kvm can be opened read-write, else why not (words that follow "because")."""
    if not os.path.exists(device):
        return (f"there is no {device} (no KVM module loaded, or the CPU has no "
                "virtualisation extensions)")
    try:
        fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        return f"{device} cannot be opened ({e.strerror})"
    os.close(fd)
    return ""


def kvm_modules(sys_module: Path = SYS_MODULE, proc_modules: Path = PROC_MODULES
                ) -> frozenset[str]:
    """The KVM modules the kernel shows (kvm, kvm_intel, kvm_amd, kvm_pvm, ...): the entries
    of /sys/module (loaded modules, and built-in ones with parameters) and /proc/modules."""
    names: set[str] = set()
    with contextlib.suppress(OSError):
        names.update(p.name for p in sys_module.iterdir())
    with contextlib.suppress(OSError):
        names.update(line.split(" ", 1)[0] for line in proc_modules.read_text().splitlines())
    names = {n.replace("-", "_") for n in names}
    return frozenset(n for n in names if n == "kvm" or n.startswith("kvm_"))


def pvm_host(sys_module: Path = SYS_MODULE, proc_modules: Path = PROC_MODULES) -> str:
    """Why a stock guest cannot use this host's KVM when it is kvm_pvm (with no hardware KVM
    module beside it), in words that follow "because"; "" otherwise."""
    modules = kvm_modules(sys_module, proc_modules)
    if PVM_MODULE not in modules or modules.intersection(VENDOR_MODULES):
        return ""
    return f"{PVM_WHAT}; stock kernels such as the image's crash under it"


def probe_inputs(recipe_hash: str, host_kernel: str | None = None,
                 qemu: str | None = None) -> tuple[str, dict[str, str]]:
    """The probe cache's key for an image on this host (or the given kernel and QEMU)."""
    inputs = {"host_kernel": platform.release() if host_kernel is None else host_kernel,
              "qemu": qemu_version() if qemu is None else qemu, "image": recipe_hash}
    blob = json.dumps(inputs, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16], inputs


def probe_key(image: ImageArtifacts) -> tuple[str, dict[str, str]]:
    return probe_inputs(image.recipe_hash)


def _probe_path(cache_dir: Path | None, key: str) -> Path:
    return (cache_dir or default_cache_dir()) / "probes" / f"qemu-accel-{key}.json"


def _read_probe(path: Path) -> Probe | None:
    """The cached probe at path, or None when there is none or it cannot be read."""
    try:
        d = json.loads(path.read_text())
        if isinstance(d, dict) and d.get("format") == PROBE_FORMAT:
            return Probe(str(d["accel"]), str(d["reason"]), float(d["probe_s"]), cached=True)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def with_pvm_reason(probe: Probe, pvm: bool) -> Probe:
    """A failed probe boot's reason led by what the host's KVM is, when it is kvm_pvm (pvm):
    "/dev/kvm is kvm_pvm, ..., and a probe boot of the image's kernel under it failed (...)"."""
    if not pvm or probe.accel != "tcg" or not probe.reason.startswith(_FAILED) \
            or PVM_MODULE in probe.reason:
        return probe
    error = probe.reason.removeprefix(_FAILED).removesuffix(_TCG_SUFFIX).removesuffix(")")
    return replace(probe, reason=f"{PVM_WHAT}, and a probe boot of the image's kernel under it "
                                 f"failed ({error}){_TCG_SUFFIX}")


def _expectation(probe: Probe) -> Expectation:
    """A probe's answer as advance words; on a kvm_pvm host without the boot's error (the
    VM's facts carry it, and a table cell has no room for QEMU's assertion)."""
    if probe.reason.startswith(PVM_WHAT):
        reason = f"{PVM_WHAT}, and the image's kernel failed a probe boot under it"
    else:
        reason = probe.reason.removesuffix(_TCG_SUFFIX)
    return Expectation(probe.accel, reason + (" (cached probe)" if probe.cached else ""),
                       proven=probe.probe_s > 0 or probe.cached)


def expected_accelerator(recipe_hash: str | None, cache_dir: Path | None = None, *,
                         device: Path = KVM_DEVICE, sys_module: Path = SYS_MODULE,
                         proc_modules: Path = PROC_MODULES, host_kernel: str | None = None,
                         qemu: str | None = None) -> Expectation:
    """What QEMU (accel = "auto") will use here and why, without booting: fast, never raises.

    In the order a run decides: no usable /dev/kvm -> TCG (no probe either); a cached probe
    for this image, host kernel and QEMU -> its answer; a kvm_pvm host (with no hardware KVM
    module beside it) -> TCG, since a stock guest kernel crashes under PVM (the first run's
    probe boot proves it); else undecided until that probe. recipe_hash None: no cached probe
    is looked for. The paths and versions are parameters so that tests can feed their own.
    """
    try:
        why_not = kvm_openable(device)
        if why_not:
            return Expectation("tcg", why_not)
        pvm_words = pvm_host(sys_module, proc_modules)
        if recipe_hash:
            key, _ = probe_inputs(recipe_hash, host_kernel, qemu)
            probe = _read_probe(_probe_path(cache_dir, key))
            if probe is not None:
                return _expectation(with_pvm_reason(probe, bool(pvm_words)))
        if pvm_words:
            return Expectation("tcg", pvm_words)
        return Expectation("", UNDECIDED)
    except Exception as e:  # a notice must never fail its caller
        return Expectation("", f"what QEMU will use here could not be told ({e}); a probe "
                               "boot at the first run decides")


def current_image(cache_dir: Path | None = None) -> ImageArtifacts | None:
    """The current recipe's image (built or not; the recipe with every registered workload's
    packages, as the CLI builds it); None when that cannot be told."""
    try:
        recipe = protocols.image_recipe()
        ihash = image_hash(recipe, guest_files(default_guest_dir()))
        return ImageArtifacts(ihash, (cache_dir or default_cache_dir()) / "images" / ihash)
    except Exception:
        return None


def proven_accelerator(image: ImageArtifacts | None = None, cache_dir: Path | None = None,
                       refresh: bool = False) -> Expectation:
    """For `doctor`: the probe boot's answer for image (default: the current image) when it is
    built (probing now, up to PROBE_TIMEOUT_S, if no probe is cached), else the advance words
    of expected_accelerator(). Never raises."""
    image = image if image is not None else current_image(cache_dir)
    try:
        if image is None or not image.complete() or not image.ext4.exists():
            return expected_accelerator(image.recipe_hash if image else None, cache_dir)
        probe = probe_accelerator(image, cache_dir, refresh)
    except Exception as e:
        return Expectation("", f"the probe boot could not run ({type(e).__name__}: {e})")
    return _expectation(probe)


def probe_accelerator(image: ImageArtifacts, cache_dir: Path | None = None,
                      refresh: bool = False, timeout: float = PROBE_TIMEOUT_S) -> Probe:
    """KVM if the image boots under it to the ready marker within timeout, else TCG."""
    why_not = kvm_openable()
    if why_not:
        return Probe("tcg", why_not)
    key, inputs = probe_key(image)
    path = _probe_path(cache_dir, key)
    cache = path.parent
    pvm = bool(pvm_host())
    if not refresh:
        cached = _read_probe(path)  # None when absent or unreadable: probe again
        if cached is not None:
            return with_pvm_reason(cached, pvm)
    probe = _probe_boot(image, cache, timeout)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"format": PROBE_FORMAT, **asdict(probe), "inputs": inputs,
                               "probed_at": datetime.now(UTC).isoformat()}, indent=1))
    os.replace(tmp, path)
    return with_pvm_reason(probe, pvm)


def _probe_boot(image: ImageArtifacts, cache: Path, timeout: float) -> Probe:
    cache.mkdir(parents=True, exist_ok=True)
    # On the cache's file system, next to the image: O_DIRECT works there (not on tmpfs).
    workdir = Path(owners.mark(tempfile.mkdtemp(prefix="itx-probe-", dir=cache)))
    t0 = time.monotonic()
    try:
        cfg = VmConfig(accel="kvm", vcpus=1, memory_mib=1024, kernel=select_kernel(image),
                       initrd=select_initrd(image)[0],
                       backing=image.ext4, hostname="itx-probe")
        vm = Vm(cfg, workdir, Stopwatch())
        try:
            vm.boot(timeout)
            vm.stop()
        except BootError as e:
            return Probe("tcg", f"{_FAILED}{e}){_TCG_SUFFIX}", time.monotonic() - t0)
        return Probe("kvm", f"a probe boot under KVM reached ITX-READY in "
                            f"{vm.sw.marks.get('ready', 0.0):.1f} s", time.monotonic() - t0)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
