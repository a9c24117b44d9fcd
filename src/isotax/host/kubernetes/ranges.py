"""The local cluster's address range: one private /16 that holds the nodes' addresses, their
pods' ranges and the Services' (layout.py places them inside it). `isotax cluster up` takes
the first of CANDIDATES that overlaps none of this host's routes (every table) and addresses,
and records it (layout.RANGE_FILE) for every later command, until `cluster down`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from ipaddress import IPv4Network, ip_network

from isotax.host import command

# 10.217.0.0/16 first (the range every earlier cluster had), two neighbours, then two from
# 172.16.0.0/12 for hosts whose VPN or LAN holds all of 10.0.0.0/8. isotax's own bridges use
# 10.213.0.0/16, which none of these touches.
CANDIDATES = ("10.217.0.0/16", "10.218.0.0/16", "10.219.0.0/16", "172.29.0.0/16",
              "172.30.0.0/16")
# A route broader than this routes everything (a default route; a VPN's 0.0.0.0/1 and
# 128.0.0.0/1 halves) and claims no range: the cluster's own routes are more specific.
BROADEST_CLAIM = 8


class RangeError(Exception):
    """No candidate range is free here; one line with what holds them."""


def _net(text: str, prefixlen: int | None = None) -> IPv4Network | None:
    try:
        net = ip_network(text if prefixlen is None else f"{text}/{prefixlen}", strict=False)
    except ValueError:
        return None
    return net if isinstance(net, IPv4Network) else None


def route_prefixes(ip_route_json: str) -> list[IPv4Network]:
    """The destinations of `ip -j -4 route show table all` that claim addresses (broadcast
    and local routes included; default and catch-all routes not). Pure."""
    out = []
    for r in json.loads(ip_route_json or "[]"):
        net = _net(str(r.get("dst", "")))
        if net is not None and net.prefixlen >= BROADEST_CLAIM:
            out.append(net)
    return out


def address_prefixes(ip_addr_json: str) -> list[IPv4Network]:
    """The networks of every IPv4 address in `ip -j -4 addr show` (a link that is down has
    its address but not its route). Pure."""
    out = []
    for link in json.loads(ip_addr_json or "[]"):
        for a in link.get("addr_info", []):
            if a.get("family") == "inet":
                net = _net(str(a.get("local", "")), int(a.get("prefixlen", 32)))
                if net is not None and net.prefixlen >= BROADEST_CLAIM:
                    out.append(net)
    return out


def choose(taken: Sequence[IPv4Network], candidates: Sequence[str] = CANDIDATES
           ) -> IPv4Network:
    """The first candidate that overlaps nothing taken; RangeError naming what holds each
    when none is free. Pure."""
    holders = []
    for c in candidates:
        net = IPv4Network(c)
        hit = next((t for t in taken if t.overlaps(net)), None)
        if hit is None:
            return net
        holders.append(f"{c} ({hit})")
    raise RangeError("every range the local cluster can use overlaps this host's routes or "
                     f"addresses: {', '.join(holders)}; free one of them")


def host_taken() -> list[IPv4Network]:
    """What this host's routes and addresses hold now."""
    routes = command.run(["ip", "-j", "-4", "route", "show", "table", "all"], 30)
    addrs = command.run(["ip", "-j", "-4", "addr", "show"], 30)
    for done in (routes, addrs):
        if done.returncode != 0:
            raise RangeError(f"{' '.join(done.argv)}: {done.stderr.strip()[-200:]}")
    return route_prefixes(routes.stdout) + address_prefixes(addrs.stdout)
