"""crun: an OCI container of the workload image run by crun (instance.py's OciInstance over
bundle.py's bundle)."""

from __future__ import annotations

from typing import ClassVar

from isotax.environments.base import register
from isotax.environments.oci.instance import OciEnvironment
from isotax.environments.oci.runtime import RuntimeLeftovers
from isotax.protocols import LeakFinder


@register
class Crun(OciEnvironment):
    kind: ClassVar[str] = "crun"
    description: ClassVar[str] = ("crun container: image rootfs (read-only, or overlayfs), "
                                  "host, bridge+NAT or no net")
    leak_finders: ClassVar[tuple[LeakFinder, ...]] = (RuntimeLeftovers("crun"),)
