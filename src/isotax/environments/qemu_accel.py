"""Which accelerator QEMU can use here: decided by a probe *boot*, not by /dev/kvm existing.

A /dev/kvm that opens is not proof that KVM runs a stock guest: on hosts that are themselves
VMs it may be a paravirtual KVM (kvm_pvm) under which a stock kernel crashes (an MSR assertion
with -cpu host, emulation failures on cmpxchg16b/xrstor), or nested virtualisation may be too
slow to boot. So the probe boots the real image under KVM, bounded in time, and falls back to
TCG saying why. The answer depends only on the host kernel, QEMU and the image, so it is cached
under <cache>/probes/ keyed by those three, and a run does not re-probe.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from isotax.environments.base import Stopwatch
from isotax.environments.qemu_initrd import select_initrd
from isotax.environments.qemu_vm import BootError, Vm, VmConfig, qemu_version, select_kernel
from isotax.image.artifacts import ImageArtifacts
from isotax.image.build import default_cache_dir

PROBE_TIMEOUT_S = 30.0
PROBE_FORMAT = 1  # probe cache file format; history: 1 - first format


@dataclass(frozen=True)
class Probe:
    accel: str  # "kvm" or "tcg"
    reason: str  # why this accelerator (and why not KVM, when TCG)
    probe_s: float = 0.0  # how long the probe boot took (0 when none was needed)
    cached: bool = False  # read from the cache rather than measured now


def kvm_openable() -> str:
    """"" when /dev/kvm can be opened read-write, else why not."""
    if not os.path.exists("/dev/kvm"):
        return "no /dev/kvm (KVM module not loaded, or no virtualisation extensions)"
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        return f"/dev/kvm cannot be opened: {e.strerror}"
    os.close(fd)
    return ""


def probe_key(image: ImageArtifacts) -> tuple[str, dict[str, str]]:
    inputs = {"host_kernel": platform.release(), "qemu": qemu_version(),
              "image": image.recipe_hash}
    blob = json.dumps(inputs, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16], inputs


def probe_accelerator(image: ImageArtifacts, cache_dir: Path | None = None,
                      refresh: bool = False, timeout: float = PROBE_TIMEOUT_S) -> Probe:
    """KVM if the image boots under it to the ready marker within timeout, else TCG."""
    why_not = kvm_openable()
    if why_not:
        return Probe("tcg", why_not)
    cache = (cache_dir or default_cache_dir()) / "probes"
    key, inputs = probe_key(image)
    path = cache / f"qemu-accel-{key}.json"
    if not refresh and path.exists():
        try:
            d = json.loads(path.read_text())
            if d.get("format") == PROBE_FORMAT:
                return Probe(d["accel"], d["reason"], float(d["probe_s"]), cached=True)
        except (OSError, ValueError, KeyError):
            pass  # unreadable: probe again
    probe = _probe_boot(image, cache, timeout)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"format": PROBE_FORMAT, **asdict(probe), "inputs": inputs,
                               "probed_at": datetime.now(UTC).isoformat()}, indent=1))
    os.replace(tmp, path)
    return probe


def _probe_boot(image: ImageArtifacts, cache: Path, timeout: float) -> Probe:
    cache.mkdir(parents=True, exist_ok=True)
    # On the cache's file system, next to the image: O_DIRECT works there (not on tmpfs).
    workdir = Path(tempfile.mkdtemp(prefix="itx-probe-", dir=cache))
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
            return Probe("tcg", f"a probe boot under KVM failed ({e}), so QEMU uses TCG",
                         time.monotonic() - t0)
        return Probe("kvm", f"a probe boot under KVM reached ITX-READY in "
                            f"{vm.sw.marks.get('ready', 0.0):.1f} s", time.monotonic() - t0)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
