"""The plan that measures exactly what a set of claims needs (`isotax claims --budget`, and
the built-in plan `studies`, which is this plan for the built-in claims on a host with KVM).

Each claim's environment (and its own baseline, where it names one) becomes an environment
of the plan, unless one already there has every setting the claim asks for; each claim's
workload point becomes a workload entry, sized as the quick plan sizes that workload (its
first entry, the claim's own parameters over it), so a budget of an hour judges them all on a
small host. Native is the baseline, and its A/A canary says what this host's noise is.

A claim that cannot be measured here is left out, and with it every environment only it needs:
one with `not_measurable`, one that requires KVM on a host whose QEMU would run under TCG, one
that requires NUMA on a host with one node. Its verdict still says why (claim_verdicts).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from isotax import protocols
from isotax.analysis.claims import PlacedClaim, entry_fits, flat_settings
from isotax.plan import load_plan

_ENV_HEAD = ("kind", "network", "storage")


@dataclass(frozen=True)
class HostCan:
    """What this host can give a claim's ratio its meaning with."""

    kvm: bool  # QEMU runs under KVM here (a probe boot proved it)
    numa_nodes: int


def left_out(placed: PlacedClaim, host: HostCan) -> str:
    """Why a claim is not planned on this host ("" when it is)."""
    c = placed.claim
    if c.not_measurable:
        return c.not_measurable
    if "kvm" in c.requires and not host.kvm:
        return "requires KVM, and QEMU runs under TCG on this host"
    if "numa" in c.requires and host.numa_nodes < 2:
        return "requires more than one NUMA node"
    return ""


def _name(selector: Mapping[str, Any], taken: set[str]) -> str:
    words = [str(selector[k]) for k in _ENV_HEAD if k in selector]
    words += [str(v) for k, v in sorted(flat_settings(selector).items())
              if k not in _ENV_HEAD]
    base = re.sub(r"[^a-z0-9-]+", "-", "-".join(words).lower()).strip("-") or "env"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}-{i}", i + 1
    return name


def _entry(selector: Mapping[str, Any], taken: set[str]) -> dict[str, Any]:
    """A plan environment with the selector's settings; where it names no network, the
    kind's own first one when the plan's default (the host's) is not among them (a VM)."""
    entry = {"name": _name(selector, taken), **selector}
    kind = protocols.environments().get(str(selector.get("kind")))
    networks = kind.networks if kind is not None else ()
    if "network" not in entry and networks and "host" not in networks:
        entry["network"] = networks[0]
    return entry


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def claims_plan(claims: Sequence[PlacedClaim], host: HostCan, name: str = "claims") -> str:
    """The plan's TOML text for the claims planned on this host (see the module's words)."""
    quick, _ = load_plan("quick")
    sizes: dict[str, dict[str, Any]] = {}
    for w in quick.workloads:
        sizes.setdefault(w.name, dict(w.params))
    envs: list[dict[str, Any]] = [{"name": "native", "kind": "native"}]
    points: list[tuple[str, dict[str, Any]]] = []
    planned: list[str] = []
    for placed in claims:
        c = placed.claim
        if left_out(placed, host) or c.environment is None or c.workload is None:
            continue
        planned.append(c.id)
        for sel in (c.environment, c.baseline):
            if not isinstance(sel, Mapping):
                continue  # a name: a run of the user's own plan has it, not this one
            if not any(entry_fits(e, sel) for e in envs):
                envs.append(_entry(sel, {e["name"] for e in envs}))
        params = {**sizes.get(c.workload, {}), **c.params}
        if (c.workload, params) not in points:
            points.append((c.workload, params))
    files = list(dict.fromkeys(p.file for p in claims))
    whose = ("the built-in claims" if all(f.startswith("built-in ") for f in files)
             else "the claims of " + ", ".join(files))
    lines = [f"# What {whose} need (isotax.analysis.claims_plan) on a host "
             f"{'with' if host.kvm else 'without'} KVM and with {host.numa_nodes} NUMA "
             "node(s):",
             f"# {len(planned)} of {len(claims)} claims planned; the rest are not measurable "
             "there, and their verdicts say why.",
             f'name = "{name}"',
             f'description = "{whose}: {len(planned)} of {len(claims)} planned"',
             "seed = 1", 'parity = "flag"', "aa = true", "repetitions = 1", "warmups = 1",
             "timeout_s = 900", "", "[verdicts]", 'margin = "auto"', "max_repetitions = 40",
             "deadline_s = 575", ""]
    for e in envs:
        lines.append("[[environments]]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in e.items()]
        lines.append("")
    for workload, params in points:
        lines += ["[[workloads]]", f'name = "{workload}"']
        if params:
            lines.append(f"params = {_toml_value(params)}")
        lines.append("")
    return "\n".join(lines)
