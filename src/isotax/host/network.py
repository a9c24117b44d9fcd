"""Bridges, network namespaces, veth pairs and taps: created by isotax and always removed.

A Bridge is a Linux bridge with a gateway address on a /24 of 10.213.0.0/16 and a MASQUERADE
rule, like Docker's default bridge. Containers get a lease on it: their own netns joined to the
bridge by a veth pair. VMs get a lease too: a persistent tap that QEMU opens by name. Netlink
work goes through pyroute2; NAT and FORWARD rules through the iptables CLI, each rule tagged
`-m comment --comment isotax` so that leaks.find_leaks() and the user can see exactly ours.

Every name starts with `itx` and fits IFNAMSIZ (15 characters). down() removes everything this
Bridge created, whether or not its leases were released.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from pyroute2 import IPRoute, netns

from isotax.host import command
from isotax.host.facts.parity import parse_ethtool_features
from isotax.host.locks import exclusive
from isotax.protocols import Completed

COMMENT = "isotax"
SUPERNET = ipaddress.IPv4Network("10.213.0.0/16")
STATE_DIR = Path("/run/isotax")
# Serialises subnet choice between isotax processes: two bridges must never pick the same /24.
LOCK = STATE_DIR / "network.lock"
# The value of net.ipv4.ip_forward before the first isotax bridge turned it on (restored by the
# last bridge to go down), so isotax leaves the host's sysctl as it found it.
IP_FORWARD_SAVED = STATE_DIR / "ip_forward.saved"
_IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
_TAG = re.compile(r"^[a-z0-9]{1,8}$")  # "itx-v" + tag + "c" must fit in 15 characters
# iptables waits up to 10 s for the xtables lock (-w 10); past this it is stuck.
_IPTABLES_TIMEOUT_S = 60.0


class NetworkError(Exception):
    """A network resource could not be created; the message says which and why."""


@dataclass(frozen=True)
class Lease:
    ip: str  # the address the instance gets, e.g. "10.213.0.2"
    prefixlen: int  # 24
    gateway: str  # bridge address, e.g. "10.213.0.1"
    iface: str  # host-side name: veth or tap, e.g. "itx-v3" / "itx-t3"
    netns: str | None  # "itx-ns3" for containers; None for taps


def iptables(*args: str) -> Completed:
    """Run iptables; -w waits for the xtables lock that other software may hold."""
    argv = ["iptables", "-w", "10", *args]
    if shutil.which("iptables") is None:
        return Completed(tuple(argv), command.NOT_FOUND, "", "iptables not found: apt-get "
                         "install iptables", 0.0)
    return command.run(argv, _IPTABLES_TIMEOUT_S)


def _check_tag(tag: str) -> None:
    if not _TAG.match(tag):
        raise ValueError(f"network tag {tag!r}: use 1-8 characters of [a-z0-9] "
                         "(interface names must fit in 15 characters)")


def used_networks(ipr: IPRoute, exclude_oif: int | None = None) -> list[ipaddress.IPv4Network]:
    """IPv4 networks the host already routes (all tables), except those via exclude_oif."""
    nets = []
    for r in ipr.route("dump", family=2):
        if exclude_oif is not None and r.get("oif") == exclude_oif:
            continue
        dst = r.get("dst") or "0.0.0.0"
        if r["dst_len"] == 0:
            continue  # a default route collides with nothing
        nets.append(ipaddress.IPv4Network(f"{dst}/{r['dst_len']}", strict=False))
    return nets


def pick_subnet(preferred: ipaddress.IPv4Network,
                used: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """The preferred /24 when no route overlaps it, else the first free /24 of 10.213.0.0/16."""
    candidates = [preferred, *SUPERNET.subnets(new_prefix=24)]
    for net in candidates:
        if not any(net.overlaps(u) for u in used):
            return net
    raise NetworkError(f"no free /24 left in {SUPERNET}: remove stale itx-* bridges "
                       "(isotax doctor lists them)")


@dataclass
class TaggedRule:
    table: str
    chain: str
    spec: tuple[str, ...]


def uplink_mtu(ipr: IPRoute) -> int:
    """The MTU of the interface the host's default route leaves by (1500 without one).

    Every link isotax makes gets it, so a bridged container, a VM's tap and the load
    generator's veth carry the same packet sizes as the host's own network: Docker's bridge
    keeps 1500 whatever the uplink has (a classic source of fragmentation and of an unequal
    comparison), and isotax.host.facts.parity would flag the difference.
    """
    for route in ipr.get_default_routes(family=socket.AF_INET):
        oif = route.get_attr("RTA_OIF")
        if oif is not None:
            links = ipr.get_links(oif)
            if links and links[0].get_attr("IFLA_MTU"):
                return int(links[0].get_attr("IFLA_MTU"))
    return 1500


# ethtool's short names for the offloads parity compares (isotax.host.facts.parity.OFFLOADS).
_OFFLOAD_SHORT = {"rx-checksumming": "rx", "tx-checksumming": "tx", "scatter-gather": "sg",
                  "tcp-segmentation-offload": "tso", "generic-segmentation-offload": "gso",
                  "generic-receive-offload": "gro", "large-receive-offload": "lro"}


def _ethtool_k(dev: str, netns: str | None) -> dict[str, str]:

    pre = ["nsenter", f"--net={netns_path(netns)}"] if netns else []
    p = command.run([*pre, "ethtool", "-k", dev], 10)
    return parse_ethtool_features(p.stdout) if p.returncode == 0 else {}


def match_uplink_offloads(ipr: IPRoute, dev: str, netns: str | None = None) -> None:
    """Give a link isotax made the host uplink's offloads where the driver lets them change
    (a veth starts with GRO off while most NICs have it on: an unequal comparison that
    isotax.host.facts.parity would flag). Best effort: without ethtool, or for fixed
    features, the link keeps its own and parity reports the difference."""
    if shutil.which("ethtool") is None:
        return
    uplink = next((links[0].get_attr("IFLA_IFNAME")
                   for r in ipr.get_default_routes(family=socket.AF_INET)
                   if (oif := r.get_attr("RTA_OIF")) is not None and (links := ipr.get_links(oif))),
                  None)
    if uplink is None:
        return
    want, have = _ethtool_k(uplink, None), _ethtool_k(dev, netns)
    args = [a for name, short in _OFFLOAD_SHORT.items()
            if name in want and name in have and want[name] != have[name]
            for a in (short, want[name])]
    if args:
        pre = ["nsenter", f"--net={netns_path(netns)}"] if netns else []
        command.run([*pre, "ethtool", "-K", dev, *args], 10)


def add_tagged_rule(table: str, chain: str, *spec: str, insert: bool = False) -> TaggedRule:
    """Append (or insert) an iptables rule tagged with isotax's comment; the rule, for its
    owner to delete later."""
    full = (*spec, "-m", "comment", "--comment", COMMENT)
    p = iptables("-t", table, "-I" if insert else "-A", chain, *full)
    if p.returncode != 0:
        raise NetworkError(f"iptables -t {table} {chain} {' '.join(spec)}: {p.stderr.strip()}")
    return TaggedRule(table, chain, full)


def admit_only(admitted: dict[tuple[str, str, int, str], TaggedRule], source: str, chain: str,
               address: str, port: int, proto: str) -> None:
    """Reject what arrives for address:port/proto from anywhere but source: a REJECT rule
    inserted first in the filter table's chain (INPUT for a server on the host's own stack,
    FORWARD, after any DNAT, for one behind it), tagged isotax; once per (chain, address,
    port, proto), recorded in admitted for its owner to delete. NetworkError when iptables
    refuses it."""
    key = (chain, address, port, proto)
    if key not in admitted:
        admitted[key] = add_tagged_rule("filter", chain, "-d", address, "-p", proto, "--dport",
                                        str(port), "!", "-s", source, "-j", "REJECT",
                                        insert=True)


def delete_tagged_rule(rule: TaggedRule) -> str | None:
    """Delete a rule add_tagged_rule made; an error's words, or None (gone already is fine)."""
    p = iptables("-t", rule.table, "-D", rule.chain, *rule.spec)
    if p.returncode != 0 and "does a matching rule exist" not in p.stderr \
            and "Bad rule" not in p.stderr:
        return f"iptables -t {rule.table} -D {rule.chain}: {p.stderr.strip()}"
    return None


def veth_into_netns(ipr: IPRoute, iface: str, ns: str, address: str, prefixlen: int,
                    gateway: str, master: int | None = None,
                    host_address: str | None = None) -> None:
    """A veth pair: `iface` on the host (in bridge `master`, or with `host_address`), its
    peer as eth0 in netns `ns` with `address` and a default route via `gateway`; lo up
    there too. Both ends get the host uplink's MTU and offloads."""
    mtu = uplink_mtu(ipr)
    ipr.link("add", ifname=iface, kind="veth", peer={"ifname": f"{iface}c", "net_ns_fd": ns})
    idx = ipr.link_lookup(ifname=iface)[0]
    if host_address is not None:
        ipr.addr("add", index=idx, address=host_address, prefixlen=prefixlen)
    if master is not None:
        ipr.link("set", index=idx, master=master)
    ipr.link("set", index=idx, mtu=mtu, state="up")
    with IPRoute(netns=ns) as inside:
        inside.link("set", index=inside.link_lookup(ifname="lo")[0], state="up")
        c = inside.link_lookup(ifname=f"{iface}c")[0]
        inside.link("set", index=c, ifname="eth0", mtu=mtu)
        inside.addr("add", index=c, address=address, prefixlen=prefixlen)
        inside.link("set", index=c, state="up")
        inside.route("add", dst="default", gateway=gateway)
    match_uplink_offloads(ipr, iface)
    match_uplink_offloads(ipr, "eth0", ns)


def _remove_netns_and_link(name: str | None, iface: str) -> list[str]:
    """Remove a network namespace isotax made (which takes its veth pair with it) and the
    host-side link iface; what could not be removed, in words ([] when all is gone: a link
    already gone with the namespace is fine)."""
    errors = []
    if name and name in netns.listnetns():
        try:
            netns.remove(name)
        except OSError as e:
            errors.append(f"netns {name}: {e}")
    try:
        with IPRoute() as ipr:
            for idx in ipr.link_lookup(ifname=iface):
                ipr.link("del", index=idx)
    except Exception as e:
        if iface in _link_names():
            errors.append(f"link {iface}: {e}")
    return errors


def _up(net: ipaddress.IPv4Network | None, what: str) -> ipaddress.IPv4Network:
    """The subnet of a link isotax brought up; NetworkError where it is not up yet."""
    if net is None:
        raise NetworkError(f"{what} is not up: call up() first")
    return net


@dataclass
class Bridge:
    """One bridge and what hangs off it. Not thread-safe; one owner at a time."""

    name: str = "itx-br0"
    subnet: str = "10.213.0.0/24"
    _net: ipaddress.IPv4Network | None = field(default=None, init=False, repr=False)
    _next_host: int = field(default=2, init=False, repr=False)
    _created_link: bool = field(default=False, init=False, repr=False)
    _rules: list[TaggedRule] = field(default_factory=list, init=False, repr=False)
    _leases: list[Lease] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name.startswith("itx") or len(self.name) > 15:
            raise ValueError(f"bridge name {self.name!r}: must start with 'itx', <= 15 chars")
        try:
            pref = ipaddress.IPv4Network(self.subnet)
        except ValueError:
            pref = None
        if pref is None or pref.prefixlen != 24 or not pref.subnet_of(SUPERNET):
            raise ValueError(f"bridge subnet {self.subnet}: must be a /24 inside {SUPERNET}")

    # -- addresses --------------------------------------------------------------------------
    @property
    def network(self) -> ipaddress.IPv4Network:
        return _up(self._net, f"bridge {self.name}")

    @property
    def gateway(self) -> str:
        return str(self.network.network_address + 1)

    def _next_ip(self) -> str:
        if self._next_host >= self.network.num_addresses - 1:
            raise NetworkError(f"bridge {self.name}: all addresses of {self._net} leased")
        ip = self.network.network_address + self._next_host
        self._next_host += 1
        return str(ip)

    # -- lifecycle --------------------------------------------------------------------------
    def up(self) -> None:
        if self._net is not None:
            return
        try:
            with exclusive(LOCK), IPRoute() as ipr:
                if ipr.link_lookup(ifname=self.name):
                    raise NetworkError(
                        f"link {self.name} already exists: another isotax run uses it or a "
                        "run crashed (isotax doctor lists leftovers)")
                net = pick_subnet(ipaddress.IPv4Network(self.subnet), used_networks(ipr))
                ipr.link("add", ifname=self.name, kind="bridge")
                self._created_link = True
                idx = ipr.link_lookup(ifname=self.name)[0]
                ipr.link("set", index=idx, mtu=uplink_mtu(ipr))
                ipr.addr("add", index=idx, address=str(net.network_address + 1),
                         prefixlen=24)
                ipr.link("set", index=idx, state="up")
                self._net = net
                self._enable_forwarding()
            # Outbound NAT, like Docker's default bridge.
            self._add_rule("nat", "POSTROUTING", "-s", str(net), "!", "-o", self.name,
                           "-j", "MASQUERADE")
            # br_netfilter sends bridged frames through FORWARD; a DROP policy (Docker sets
            # one) would cut instances off from each other and from the load generator.
            self._add_rule("filter", "FORWARD", "-i", self.name, "-j", "ACCEPT", insert=True)
            self._add_rule("filter", "FORWARD", "-o", self.name, "-j", "ACCEPT", insert=True)
        except BaseException:
            self.down()
            raise

    def _add_rule(self, table: str, chain: str, *spec: str, insert: bool = False) -> None:
        self._rules.append(add_tagged_rule(table, chain, *spec, insert=insert))

    def _enable_forwarding(self) -> None:
        # The load generator's netns reaches instances through the host's routing.
        enable_forwarding()

    def _restore_forwarding(self) -> None:
        restore_forwarding(self.name)

    def add_netns(self, tag: str) -> Lease:
        """A new netns itx-ns<tag> joined to the bridge by veth itx-v<tag>; inside: lo up,
        eth0 with the leased address and a default route via the bridge."""
        _check_tag(tag)
        lease = Lease(self._next_ip(), 24, self.gateway, f"itx-v{tag}", f"itx-ns{tag}")
        self._leases.append(lease)  # recorded first, so a half-made lease is still removed
        try:
            assert lease.netns is not None
            netns.create(lease.netns)
            with IPRoute() as ipr:
                veth_into_netns(ipr, lease.iface, lease.netns, lease.ip, lease.prefixlen,
                                lease.gateway, master=ipr.link_lookup(ifname=self.name)[0])
        except BaseException:
            self.release(lease)
            raise
        return lease

    def add_tap(self, tag: str) -> Lease:
        """A persistent tap itx-t<tag> on the bridge, up; QEMU opens it with
        `-netdev tap,ifname=itx-t<tag>,script=no,downscript=no`. The lease's ip is for the
        guest to configure on its own interface."""
        _check_tag(tag)
        lease = Lease(self._next_ip(), 24, self.gateway, f"itx-t{tag}", None)
        self._leases.append(lease)
        try:
            with IPRoute() as ipr:
                ipr.link("add", ifname=lease.iface, kind="tuntap", mode="tap")
                idx = ipr.link_lookup(ifname=lease.iface)[0]
                br = ipr.link_lookup(ifname=self.name)[0]
                ipr.link("set", index=idx, master=br, mtu=uplink_mtu(ipr), state="up")
        except BaseException:
            self.release(lease)
            raise
        return lease

    def release(self, lease: Lease) -> None:
        """Remove the lease's netns and host-side link; idempotent."""
        errors = _remove_netns_and_link(lease.netns, lease.iface)
        if lease in self._leases:
            self._leases.remove(lease)
        if errors:
            raise NetworkError("; ".join(errors))

    def down(self) -> None:
        """Remove every lease, the bridge, our iptables rules; restore ip_forward. Idempotent;
        tries everything and then raises one error naming what could not be removed."""
        errors: list[str] = []
        for lease in list(self._leases):
            try:
                self.release(lease)
            except Exception as e:
                errors.append(str(e))
        errors += [err for rule in reversed(self._rules) if (err := delete_tagged_rule(rule))]
        self._rules.clear()
        with exclusive(LOCK):  # bridge count and the saved sysctl change together
            if self._created_link:
                try:
                    with IPRoute() as ipr:
                        for idx in ipr.link_lookup(ifname=self.name):
                            ipr.link("del", index=idx)
                    self._created_link = False
                except Exception as e:
                    errors.append(f"bridge {self.name}: {e}")
            try:
                self._restore_forwarding()
            except OSError as e:
                errors.append(f"ip_forward: {e}")
        self._net = None
        self._next_host = 2
        if errors:
            raise NetworkError("; ".join(errors))

    def __enter__(self) -> Bridge:
        self.up()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()


def _link_names() -> list[str]:
    with IPRoute() as ipr:
        return [ln.get("ifname") or "" for ln in ipr.get_links()]


def netns_path(name: str) -> str:
    """Where a named netns lives: what OCI's linux.namespaces path and nsenter --net want."""
    return f"/run/netns/{name}"


@dataclass
class VethNamespace:
    """A network namespace itx-ns... joined to the host by a routed veth pair: the host end
    (`name`) holds .1 of a free /24 of 10.213.0.0/16, the namespace end (eth0) holds .2 and a
    default route via .1. Nothing is bridged: the namespace reaches the host's own addresses
    directly and everything else through the host's routing, like a second machine on a
    point-to-point link. Extra host-end addresses (`add_host_address`) let a DNAT rule own a
    whole address, as `docker -p ADDR:PORT:PORT` does. down() removes all of it."""

    name: str  # host end, e.g. "itx-lg1a2b"; the netns gets the same name
    subnet: str = "10.213.250.0/24"
    _net: ipaddress.IPv4Network | None = field(default=None, init=False, repr=False)
    _next_host: int = field(default=10, init=False, repr=False)
    _created: bool = field(default=False, init=False, repr=False)
    _rules: list[TaggedRule] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.name.startswith("itx") or len(self.name) > 14:
            raise ValueError(f"veth name {self.name!r}: must start with 'itx', <= 14 chars "
                             "(the peer adds a 'c')")

    @property
    def network(self) -> ipaddress.IPv4Network:
        return _up(self._net, self.name)

    @property
    def host_ip(self) -> str:
        return str(self.network.network_address + 1)

    @property
    def ns_ip(self) -> str:
        return str(self.network.network_address + 2)

    @property
    def netns(self) -> str:
        return self.name

    def up(self) -> None:
        if self._net is not None:
            return
        try:
            with exclusive(LOCK), IPRoute() as ipr:
                if ipr.link_lookup(ifname=self.name) or self.name in netns.listnetns():
                    raise NetworkError(
                        f"{self.name} already exists: another isotax run uses it or a run "
                        "crashed (isotax doctor lists leftovers)")
                net = pick_subnet(ipaddress.IPv4Network(self.subnet), used_networks(ipr))
                self._created = True  # from here on, down() has something to remove
                netns.create(self.name)
                self._net = net
                veth_into_netns(ipr, self.name, self.name, self.ns_ip, 24, self.host_ip,
                                host_address=self.host_ip)
            # Traffic between the namespace and bridged instances is forwarded by the host: a
            # DROP policy on FORWARD (Docker sets one) must not cut it.
            self.add_rule("filter", "FORWARD", "-i", self.name, "-j", "ACCEPT", insert=True)
            self.add_rule("filter", "FORWARD", "-o", self.name, "-j", "ACCEPT", insert=True)
        except BaseException:
            self.down()
            raise

    def mtu(self) -> int:
        with IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=self.name)
            if not idx:
                raise NetworkError(f"link {self.name} is gone")
            return int(ipr.get_links(idx[0])[0].get("IFLA_MTU") or 0)

    def add_host_address(self) -> str:
        """One more address of the /24 on the host end (.10, .11, ...), for a port mapping."""
        if self._next_host >= self.network.num_addresses - 1:
            raise NetworkError(f"{self.name}: all addresses of {self._net} used")
        ip = str(self.network.network_address + self._next_host)
        self._next_host += 1
        with IPRoute() as ipr:
            ipr.addr("add", index=ipr.link_lookup(ifname=self.name)[0], address=ip,
                     prefixlen=24)
        return ip

    def add_rule(self, table: str, chain: str, *spec: str, insert: bool = False) -> None:
        """An iptables rule tagged with isotax's comment, removed by down()."""
        self._rules.append(add_tagged_rule(table, chain, *spec, insert=insert))

    def down(self) -> None:
        """Remove our rules, the namespace and the veth pair (with its addresses). Idempotent;
        tries everything, then raises one error naming what could not be removed."""
        errors: list[str] = []
        errors += [err for rule in reversed(self._rules) if (err := delete_tagged_rule(rule))]
        self._rules.clear()
        if self._created:
            errors += _remove_netns_and_link(self.name, self.name)
            self._created = False
        self._net = None
        self._next_host = 10
        if errors:
            raise NetworkError("; ".join(errors))


@dataclass(frozen=True)
class BridgeSeat:
    """One instance's place on an isotax bridge (a container, an nspawn machine): the bridge,
    and the lease of its network namespace (a veth on the bridge). For now each bridged
    instance owns its bridge (and its subnet and NAT rule); sharing one bridge between
    instances is a change here only."""

    bridge: Bridge
    lease: Lease

    @classmethod
    def take(cls, tag: str) -> BridgeSeat:
        """A new bridge itx-br<tag> with a namespace leased on it."""
        bridge = Bridge(name=f"itx-br{tag}")
        try:
            bridge.up()
            return cls(bridge, bridge.add_netns(tag))
        except BaseException:
            bridge.down()
            raise

    @property
    def netns(self) -> str:
        """The path of the instance's network namespace, for its runtime."""
        assert self.lease.netns is not None  # add_netns leases a namespace
        return netns_path(self.lease.netns)

    @property
    def address(self) -> str:
        return self.lease.ip

    def release(self) -> None:
        """The lease released and the bridge taken down (its NAT rule with it)."""
        try:
            self.bridge.release(self.lease)
        finally:
            self.bridge.down()


# The links of isotax's that need the host to forward between its interfaces: its bridges
# (itx-br<tag>) and the local Kubernetes cluster's CNI bridge (itxcni0).
FORWARDING_LINKS = ("itx-br", "itxcni")


def enable_forwarding() -> None:
    """Turn net.ipv4.ip_forward on, saving its value for the last such link to restore.
    Call with LOCK held (isotax.host.locks.exclusive): bridges and the cluster share it."""
    if _IP_FORWARD.read_text().strip() == "1":
        return
    if not IP_FORWARD_SAVED.exists():
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        IP_FORWARD_SAVED.write_text("0\n")
    _IP_FORWARD.write_text("1\n")


def restore_forwarding(leaving: str) -> None:
    """Restore the saved net.ipv4.ip_forward when `leaving` was the last link of isotax's that
    needs forwarding (FORWARDING_LINKS): others may still need it."""
    if not IP_FORWARD_SAVED.exists():
        return
    with IPRoute() as ipr:
        others = [ln.get("ifname") for ln in ipr.get_links()
                  if (ln.get("ifname") or "").startswith(FORWARDING_LINKS)
                  and ln.get("ifname") != leaving]
    if others:
        return
    _IP_FORWARD.write_text(IP_FORWARD_SAVED.read_text())
    IP_FORWARD_SAVED.unlink(missing_ok=True)
