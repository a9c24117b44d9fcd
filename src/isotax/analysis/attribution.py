"""Attribute overhead to layers: compare environments that differ in exactly one setting.

The studies' lesson is that convenience features (NAT, a layered filesystem, an untuned VM, a
sandbox's platform) often cost more than isolation itself. A plan that holds, say, `runc` on a
bridge and `runc-host` on the host network measures NAT alone: the two differ only in
`network`. Every such pair in a run becomes an attribution: the ratio of the second to the
first, per metric, judged by the same machinery as the ratios to the baseline (each round's
pair of values, one confidence sequence, the row's equivalence margin: verdicts.decide_by_round),
so "worse" or "better" means what it means there. A bootstrap interval on the two sets of
values would not: it ignores the rounds' pairing and is checked after every added round.

An environment's settings are the plan's own words: kind, network, storage, vcpus,
memory_mib and each option (`options.profile`, `options.platform`, ...), so a layer is named as
the user named it. A setting left out and one set to its default count as different: the
analysis cannot know a kind's defaults, and a pair it misses is better than a wrong one.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from isotax import protocols
from isotax.plan import DEFAULT_BASELINE

AXES = ("kind", "network", "storage", "vcpus", "memory_mib")


@dataclass(frozen=True)
class Layer:
    """One setting that differs between two environments: `before` -> `after`."""

    axis: str  # e.g. "network", "options.platform"
    before_env: str
    after_env: str
    before: str
    after: str
    meaning: str = ""  # what the change is, where its kind says (a Service: DNAT and SNAT)

    def words(self) -> str:
        head = f"{self.axis}: {self.before} → {self.after}"
        return f"{head} ({self.meaning})" if self.meaning else head


def settings(entry: Mapping[str, Any]) -> dict[str, str]:
    """The plan's settings of one environment, flattened; unset ones are "(unset)"."""
    out = {a: str(entry.get(a, "(unset)")) for a in AXES}
    # The plan's defaults for these two are fixed by plan.py, so an unset one is its default.
    out["network"] = str(entry.get("network", "host"))
    out["storage"] = str(entry.get("storage", "volume"))
    for k, v in sorted(dict(entry.get("options", {})).items()):
        out[f"options.{k}"] = str(v)
    return out


def single_layer_pairs(environments: Sequence[Mapping[str, Any]], available: Sequence[str],
                       baseline: str = DEFAULT_BASELINE) -> list[Layer]:
    """Every pair of environments (both ran) whose settings differ in exactly one axis, in
    the plan's order; the first of the pair is the one before the change. Pairs with the
    baseline are left out: the ratios to the baseline already say what they would."""
    envs = [e for e in environments if e.get("name") in available and e.get("name") != baseline]
    out = []
    for a, b in itertools.combinations(envs, 2):
        sa, sb = settings(a), settings(b)
        keys = sorted(set(sa) | set(sb))
        differ = [k for k in keys if sa.get(k, "(unset)") != sb.get(k, "(unset)")]
        if len(differ) == 1:
            k = differ[0]
            out.append(Layer(k, str(a["name"]), str(b["name"]), sa.get(k, "(unset)"),
                             sb.get(k, "(unset)")))
    return _one_layer_each(out, {str(e.get("name")): settings(e) for e in envs})


def _one_layer_each(pairs: list[Layer], by_name: Mapping[str, Mapping[str, str]]
                    ) -> list[Layer]:
    """The network pairs named for what they are, where the kind says (its network_layer):
    a network that stacks on another (a pod's Service on the pod network) is its own layer
    only against that one. Against any other (hostNetwork -> Service: the pod network and the
    Service) it is two layers: left out where the run has the one between (its two single
    layers are there), else named as the two."""
    out = []
    for lay in pairs:
        if lay.axis != "network":
            out.append(lay)
            continue
        kind = protocols.environments().get(by_name[lay.before_env].get("kind", ""))
        stacked = [(net, kind.network_layer(net)) for net in (lay.after, lay.before)
                   if kind is not None]
        net, found = next(((n, f) for n, f in stacked if f is not None), ("", None))
        if found is None:
            out.append(lay)
            continue
        under, words = found
        other = lay.before if net == lay.after else lay.after
        if other == under:
            out.append(replace(lay, meaning=words))
            continue
        between = {**by_name[lay.before_env], "network": under}
        if any(dict(s) == between for s in by_name.values()):
            continue  # both single layers are in the run: this pair would stack them
        out.append(replace(lay, meaning=f"two layers: the {under} network, and {words}"))
    return out

