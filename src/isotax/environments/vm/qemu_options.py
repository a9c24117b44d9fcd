"""The plan options every QEMU kind declares (qemu, microvm, vm9p): their types, defaults and
choices, checked when the plan is loaded; qemu.py's docstring says what each does."""

from __future__ import annotations

from isotax.environments.vm.qemu_tuning import KNOB_OPTIONS
from isotax.protocols import ParamSpec

DEFAULT_BOOT_TIMEOUT_S = 120.0
DEFAULT_DATA_DISK_GIB = 4.0
MACHINES = ("pc", "microvm")


def vm_options(machine: str) -> tuple[ParamSpec, ...]:
    """The plan options every QEMU kind reads (the module's docstring), its machine type
    defaulting to `machine`, then the profile and the tuning knobs (qemu_tuning)."""
    return (
        ParamSpec("accel", str, "auto", "auto (a probe boot decides: KVM where a KVM guest "
                  "really boots, else TCG), kvm or tcg", choices=("auto", "kvm", "tcg")),
        ParamSpec("kernel", str, "auto", "auto (= vmlinux, faster under TCG), vmlinux or "
                  "vmlinuz", choices=("auto", "vmlinux", "vmlinuz")),
        ParamSpec("initrd", str, "auto", "auto (= minimal), minimal (isotax's own) or image "
                  "(the image's Debian one)", choices=("auto", "minimal", "image")),
        ParamSpec("disk_cache", str, None, "QEMU -drive cache=; unset: none where the workdir "
                  "takes O_DIRECT, else writeback",
                  choices=("none", "writeback", "writethrough", "directsync", "unsafe")),
        ParamSpec("disk_aio", str, None, "QEMU -drive aio=; unset: native with cache none or "
                  "directsync, else threads", choices=("threads", "native", "io_uring")),
        ParamSpec("boot_timeout", float, DEFAULT_BOOT_TIMEOUT_S, "seconds the VM may take to "
                  "boot (TCG on a busy host is slow)", minimum=1),
        ParamSpec("data_disk_gib", float, DEFAULT_DATA_DISK_GIB, "size of the data disk, GiB "
                  "(storage \"volume\"; a sparse file)", minimum=0.1),
        ParamSpec("quiet", bool, False, "true: the kernel logs quietly on the console",
                  also=(str,), choices=(True, False, "on", "off")),
        ParamSpec("machine", str, machine, "the QEMU machine type: pc or microvm",
                  choices=MACHINES),
        *KNOB_OPTIONS,
    )
