"""microvm: the workload image in QEMU's minimal machine type (`-M microvm`), the shape of
Firecracker and Cloud Hypervisor: virtio-mmio devices instead of PCI, no firmware (the kernel
is loaded directly, no SeaBIOS), no legacy chipset. Everything else is the qemu environment's:
the same disks, agent, network, knobs (qemu_tuning) and startup milestones.

Two things differ from the pc VM and are handled here rather than left to chance:
- the guest kernel finds virtio-mmio devices through ACPI, and its driver is a module in
  Debian's kernel: isotax's initrd loads virtio_mmio instead of virtio_pci (itx.mods=);
- with no PIT or HPET to calibrate against, the kernel may hang measuring the TSC:
  tsc_early_khz=<host kHz> on the command line (under TCG the guest's TSC runs at the host's).
An iothread is impossible on microvm under TCG (virtio-mmio has no ioeventfd there); the
iothread knob says so in its facts (their words).

Firecracker and Cloud Hypervisor are registered too, so that `isotax envs` says where they
stand; isotax drives neither yet, and says so rather than pretending.
"""

from __future__ import annotations

import shutil
from typing import Any, ClassVar

from isotax.environments.base import EnvironmentBase, register
from isotax.environments.vm.qemu import Qemu, QemuInstance
from isotax.environments.vm.qemu_options import vm_options
from isotax.protocols import (
    STORAGES,
    Availability,
    EnvSpec,
    Instance,
    Isolation,
    LeakFinder,
    ParamSpec,
    Unavailable,
    VersionCommand,
)


class MicrovmInstance(QemuInstance):
    kind = "microvm"
    default_machine = "microvm"


@register
class Microvm(Qemu):
    kind: ClassVar[str] = "microvm"
    description: ClassVar[str] = ("a QEMU microvm (virtio-mmio, no firmware, direct kernel "
                                  "boot) booting the image's kernel")
    instance_class: ClassVar[type[QemuInstance]] = MicrovmInstance
    options: ClassVar[tuple[ParamSpec, ...]] = vm_options("microvm")


class _NotDriven(EnvironmentBase):
    """A VMM isotax knows of but does not drive: available() says whether it is installed
    and that isotax has no driver for it; start() refuses with the same words."""

    binary: ClassVar[str] = ""
    install: ClassVar[str] = ""
    isolation: ClassVar[Isolation] = Isolation.VM
    supports_numa: ClassVar[bool] = False  # not driven: nothing to bind
    leak_finders: ClassVar[tuple[LeakFinder, ...]] = ()  # not driven: nothing started
    options: ClassVar[tuple[ParamSpec, ...]] = ()  # not driven: nothing to set
    networks: ClassVar[tuple[str, ...]] = ("bridge", "none")  # a VM: never the host's stack
    storages: ClassVar[tuple[str, ...]] = STORAGES

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        return None  # not driven: isotax runs nothing of it to record

    def __init__(self, image: Any = None) -> None:
        self.image = image

    def available(self) -> Availability:
        if shutil.which(self.binary) is None:
            return Availability.no(f"{self.binary} is not installed here, and isotax has no "
                                   f"driver for it yet", f"{self.install}; meanwhile kind "
                                   "\"microvm\" (QEMU -M microvm) is the same shape")
        return Availability.no(f"{self.binary} is installed, but isotax has no driver for it "
                               "yet", "use kind \"microvm\" (QEMU -M microvm), the same shape")

    def start(self, spec: EnvSpec) -> Instance:
        raise Unavailable(self.available())


@register
class Firecracker(_NotDriven):
    kind: ClassVar[str] = "firecracker"
    description: ClassVar[str] = "a Firecracker microVM (not driven by isotax yet)"
    binary: ClassVar[str] = "firecracker"
    install: ClassVar[str] = "install firecracker from its GitHub release"


@register
class CloudHypervisor(_NotDriven):
    kind: ClassVar[str] = "cloud-hypervisor"
    description: ClassVar[str] = "a Cloud Hypervisor VM (not driven by isotax yet)"
    binary: ClassVar[str] = "cloud-hypervisor"
    install: ClassVar[str] = "install cloud-hypervisor from its GitHub release"
