"""What every load generator shares (local, ssh, pod: each a plugin of its own that imports
no other): the words of the path from its link to an instance, the address a server inside an
instance listens on for it, and the refusal a load generator gives a run it cannot serve."""

from __future__ import annotations

from isotax.model import SanityError
from isotax.protocols import Instance, Isolation, Reach, isolation_of


class LoadGenRefused(Exception):
    """The load generator cannot serve this run; one line naming the problem and the fix."""


def path_words(head: str, inst: Instance, bridge_front: str, tap_front: str) -> str:
    """The layers from a load generator's link (`head`) to inst, in words: the host's stack,
    or how a bridged container (`bridge_front`: its port mapping) or a VM's tap (`tap_front`)
    is reached, then the bridge, veth or tap and what is behind it."""
    f = inst.facts()
    kind, mode = f.kind, f.reach
    if mode == Reach.HOST:
        where = kind if isolation_of(kind) is Isolation.HOST \
            else f"{kind} container sharing the host's netns"
        return f"{head} -> host network stack ({where})"
    if mode == Reach.BRIDGE:
        return (f"{head} -> {bridge_front} -> {inst.address} (iptables nat, as docker -p) "
                f"-> bridge {f.bridge or '?'} -> veth -> {kind} container netns")
    if mode == Reach.PUBLISHED:
        return (f"{head} -> host {f.published} -> {kind}'s own port mapping (-p: "
                f"iptables DNAT) -> bridge {f.bridge or '?'} -> veth -> {kind} "
                "container netns")
    if mode == Reach.ROUTED:
        return (f"{head} -> {tap_front} -> {inst.address} -> bridge {f.bridge or '?'} -> veth "
                f"-> {kind} netns ({f.runtime or '?'})")
    if mode == Reach.SERVICE:
        return (f"{head} -> Service {f.published} (kube-proxy: iptables DNAT) -> "
                f"{f.container_address} -> bridge {f.bridge or '?'} -> veth -> {kind} netns "
                f"({f.runtime or '?'})")
    if mode == Reach.TAP:
        emulated = ", emulated" if f.emulated else ""
        return (f"{head} -> {tap_front} -> {f.display().get('network')} -> guest kernel "
                f"({kind}, {f.accelerator or '?'}{emulated})")
    return f"{head} -> unreachable ({kind}, network {mode})"


def listen_address(inst: Instance, host_address: str) -> str:
    """Where a server inside inst listens for a load generator that reaches this host at
    host_address: that address for an instance on the host's network, else the instance's
    own (a container behind an engine's port mapping: its facts' container_address)."""
    f = inst.facts()
    kind, mode = f.kind, f.reach
    if mode == Reach.HOST:
        return host_address
    own = f.container_address if mode in (Reach.PUBLISHED, Reach.SERVICE) else inst.address
    if not own:
        raise SanityError(f"{kind}: network {mode!r} gives the instance no address of its own "
                          "for a server to listen on; give it network = \"host\" or "
                          "\"bridge\" in the plan")
    return own


def network_of(inst: Instance) -> tuple[str, Reach]:
    """(kind, how the load generator reaches it): its facts'."""
    f = inst.facts()
    return f.kind, f.reach
