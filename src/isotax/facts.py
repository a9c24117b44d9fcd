"""What a running instance is, typed (Instance.facts()): the runner, the load generator, the
parity check, the identity check and the report read these attributes; the words the report
shows are rendered from them (Facts.display()), and nothing parses those words back.

Stored with each environment of a run (the `facts` entry of its stored description, with its
FACTS_VERSION). A run stored before facts were typed has only its display words: stored_facts()
reads those once, here, the one place that knows their old wording.

The bottom of the import layers beside isotax.model: it imports nothing of isotax.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

FACTS_VERSION = 1
FACTS_KEY = "facts"  # where a stored description keeps the typed facts


class Isolation(StrEnum):
    """What an environment is, as its instances can prove from inside (isotax.run.identity):
    the values are the words the identity check and the report use."""

    HOST = "host"  # the host itself: same kernel, same boot, the initial PID namespace
    CONTAINER = "container"  # the host's kernel behind namespaces and cgroups
    SANDBOX = "sandbox"  # a user-space kernel (gVisor's Sentry) serves the system calls
    VM = "vm"  # a kernel of its own on virtual hardware


class Reach(StrEnum):
    """How a load generator on the host reaches an instance's servers."""

    HOST = "host"  # the host's own network stack: native, a container on the host network
    BRIDGE = "bridge"  # the instance's own address on a bridge isotax made, behind its DNAT
    PUBLISHED = "published"  # an engine's bridge, its ports published by the engine (-p)
    TAP = "tap"  # a VM's NIC on a tap in a bridge, routed
    ROUTED = "routed"  # its own address, routed by the host (a pod on its CNI bridge)
    SERVICE = "service"  # a virtual address kube-proxy translates to its own (a ClusterIP)
    NONE = "none"  # no network: loopback only


def reach_of(network: str) -> Reach:
    """How an instance on the plan's network ("host", "bridge", "none") is reached, where
    that alone decides it (a container on an isotax bridge; not an engine's, nor a VM's)."""
    return {"host": Reach.HOST, "bridge": Reach.BRIDGE}.get(network, Reach.NONE)


@dataclass(frozen=True)
class Facts:
    """One running instance's facts. `words` are the kind's own lines for the report (its
    rootfs, its seccomp, its knobs...): display only, never read back."""

    kind: str
    reach: Reach
    # Where the instance decides what it is (an engine running runsc is a sandbox, one
    # running Kata a VM); None: its kind's declared isolation.
    isolation: Isolation | None = None
    runtime: str = ""  # the runtime and its version in words: "runc 1.1.5+ds1"
    bridge: str = ""  # the bridge its network hangs off ("" without one)
    published: str = ""  # the host address an engine published its ports on
    container_address: str = ""  # its own address behind those published ports
    memory_limit_mib: int | None = None  # a cgroup limit on its memory; None: no limit
    guest_memory_mib: int | None = None  # the memory a VM's guest was given
    vcpus: int | None = None  # the CPUs it may use; None: all of the host's
    emulated: bool = False  # under software emulation (a VM under TCG): ratios measure it
    accelerator: str = ""  # a VM's: "kvm" or "tcg"
    accelerator_reason: str = ""  # why that accelerator (a KVM probe boot's outcome)
    hugepages: str = "none"  # how its memory is backed by huge pages, where it says
    # Where it runs when that is not this host ("node w3 of the cluster of ~/.kube/config"):
    # native, on this host, is then no baseline for it.
    elsewhere: str = ""
    words: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def seated(cls, kind: str, network: str, runtime: str, bridge: str, memory_mib: int | None,
               vcpus: int | None, words: Mapping[str, str]) -> Facts:
        """A container isotax seats itself (an OCI runtime's, nspawn's): reached as the plan's
        network says, on its own bridge where it has one ("" without), limited as the plan
        says (0 or None: no limit)."""
        return cls(kind, reach_of(network), runtime=runtime, bridge=bridge,
                   memory_limit_mib=memory_mib or None, vcpus=vcpus or None, words=words)

    def display(self) -> dict[str, str]:
        """The lines shown for it: kind and runtime, the kind's own words, then the typed
        facts those words do not already say."""
        out = {"kind": self.kind}
        if self.runtime:
            out["runtime"] = self.runtime
        out.update(self.words)
        typed = {"network": self.reach.value, "bridge": self.bridge,
                 "published": self.published, "container_address": self.container_address,
                 "accelerator": self.accelerator,
                 "emulated": ("yes" if self.emulated else "no") if self.accelerator else "",
                 "accelerator_reason": self.accelerator_reason, "elsewhere": self.elsewhere}
        for key, value in typed.items():
            if value and key not in out:
                out[key] = value
        return out

    def to_stored(self) -> dict[str, Any]:
        """The typed facts as JSON (the kind's words are stored as displayed, beside it)."""
        return {"version": FACTS_VERSION, "kind": self.kind, "reach": self.reach.value,
                "isolation": self.isolation.value if self.isolation else None,
                "runtime": self.runtime, "bridge": self.bridge, "published": self.published,
                "container_address": self.container_address,
                "memory_limit_mib": self.memory_limit_mib,
                "guest_memory_mib": self.guest_memory_mib, "vcpus": self.vcpus,
                "emulated": self.emulated, "accelerator": self.accelerator,
                "accelerator_reason": self.accelerator_reason, "hugepages": self.hugepages,
                "elsewhere": self.elsewhere}


def stored_description(facts: Facts) -> dict[str, Any]:
    """What a run stores of an instance: its display lines and, under FACTS_KEY, its typed
    facts (host.description.EnvironmentDescription adds the rest of the record)."""
    return {**facts.display(), FACTS_KEY: facts.to_stored()}


def stored_facts(description: Mapping[str, Any]) -> Facts:
    """The typed facts of a stored environment: FACTS_KEY where the run stored them, else
    (a run stored before facts were typed) read from its display words, as they were worded
    then. An environment that never started (an empty description) reads as kind "?"."""
    raw = description.get(FACTS_KEY)
    if isinstance(raw, Mapping) and int(raw.get("version", 0)) >= 1:
        return _from_version_1(raw)
    return _from_words(description)


def _from_version_1(raw: Mapping[str, Any]) -> Facts:
    iso = raw.get("isolation")
    return Facts(
        kind=str(raw.get("kind", "?")), reach=_reach(str(raw.get("reach", "none"))),
        isolation=Isolation(iso) if iso in {i.value for i in Isolation} else None,
        runtime=str(raw.get("runtime") or ""), bridge=str(raw.get("bridge") or ""),
        published=str(raw.get("published") or ""),
        container_address=str(raw.get("container_address") or ""),
        memory_limit_mib=_int(raw.get("memory_limit_mib")),
        guest_memory_mib=_int(raw.get("guest_memory_mib")), vcpus=_int(raw.get("vcpus")),
        emulated=bool(raw.get("emulated")), accelerator=str(raw.get("accelerator") or ""),
        accelerator_reason=str(raw.get("accelerator_reason") or ""),
        hugepages=str(raw.get("hugepages") or "none"),
        elsewhere=str(raw.get("elsewhere") or ""))


def _from_words(d: Mapping[str, Any]) -> Facts:
    """Facts from the display words of a run stored before they were typed (describe() of
    isotax up to 2026-11-27): the one reader of those words."""
    net = str(d.get("network", ""))
    published = str(d.get("published") or "")
    if net == "host":
        reach = Reach.HOST
    elif net == "bridge":
        reach = Reach.PUBLISHED if published else Reach.BRIDGE
    elif net.startswith("bridge ") and "tap" in net:
        reach = Reach.TAP
    else:
        reach = Reach.NONE
    limit = re.match(r"(\d+) MiB \(limit\)", str(d.get("memory", "")))
    return Facts(kind=str(d.get("kind", "?")), reach=reach, runtime=str(d.get("runtime", "")),
                 bridge=str(d.get("bridge", "")), published=published,
                 container_address=str(d.get("container_address") or ""),
                 memory_limit_mib=int(limit.group(1)) if limit else None,
                 guest_memory_mib=_int(d.get("memory_mib")), vcpus=_int(d.get("vcpus")),
                 emulated=str(d.get("emulated", "")).lower() in ("yes", "true", "1"),
                 accelerator=str(d.get("accelerator", "")).strip(),
                 accelerator_reason=str(d.get("accelerator_reason", "")).strip(),
                 hugepages=str(d.get("hugepages", "none")))


def _reach(value: str) -> Reach:
    return Reach(value) if value in {r.value for r in Reach} else Reach.NONE


def _int(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None
