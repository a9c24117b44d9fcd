"""The load generator: the studies' "other machine", as a network namespace on this host.

A namespace itx-lg<tag> is joined to the host by a routed veth pair (1500 MTU) on its own /24
of 10.213.0.0/16. Every network client runs there, so every environment, native included, is
reached over a real network path, and each environment adds only its own layers:

- native, and containers on the host's network: the host's address on the veth pair;
- a container on a bridge: a port mapping on the host, as Docker's default `-p` makes it:
  DNAT (iptables nat PREROUTING) from an address of the host's veth end to the container's
  address, then the bridge. Each mapped container gets its own host address, so the port
  numbers stay the same on both sides (netperf tells its client which data port to use) and
  no mapping can shadow a server of the host's own;
- a VM on a tap: the guest's address on its bridge, routed by the host.

Servers run inside the environment (`serving`), on the ports their workload declares
(its `ports`: unusual numbers, so they do not clash with a service of the host's when the
environment shares the host's network), started in the background and stopped by PID.
Both ends share this host's CPUs: the client's cost is the same for every environment, so
differences between environments are the environments' own.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from isotax.environments.base import GUEST_PATH
from isotax.host import command, owners
from isotax.host.network import NetworkError, VethNamespace, netns_path
from isotax.loadgen.base import listen_address, network_of, path_words
from isotax.model import SanityError
from isotax.protocols import (
    ClientsCpu,
    Completed,
    Instance,
    LoadGenDescription,
    Reach,
)
from isotax.telemetry.cpuacct import CpuGroup

# A clean, defined environment for clients: nothing inherited from the caller's shell.
_CLIENT_ENV = {"PATH": GUEST_PATH, "HOME": "/root", "LANG": "C.UTF-8"}


class NamespaceLoadGen:
    """The LoadGen protocol (isotax.protocols.LoadGen) on a local network namespace."""

    where = "a network namespace on this host"

    def __init__(self, tag: str | None = None) -> None:
        self.tag = tag or owners.new_tag(3)
        self.veth = VethNamespace(name=f"itx-lg{self.tag}")
        # (container address, port, proto) -> (host address, port), and the host address
        # each mapped container owns.
        self._mapped: dict[tuple[str, int, str], tuple[str, int]] = {}
        self._published: dict[str, str] = {}
        # (chain, address, port, proto) of the REJECT rules that admit only the load generator
        self._admitted: set[tuple[str, str, int, str]] = set()
        self._mtu = 0
        # Every client joins this group: the load generator's exact CPU per run (telemetry.cpuacct),
        # which tells when the client, not the environment, was the limit.
        self.cpu_group: CpuGroup | None = None

    # -- lifecycle ---------------------------------------------------------------------
    def up(self) -> None:
        self.cpu_group = CpuGroup(f"itx-lg-{self.tag}")
        self.veth.up()
        self._mtu = self.veth.mtu()
        # A connection per request (redis keepalive = false) leaves each closed one's local
        # port in TIME_WAIT for 60 s, per destination: three such cells to the host's address
        # within a minute took 30,000 of the 28,232 ports, and the third ran at a quarter of
        # its rate (measured). The clients' own namespace reuses them (its sysctl only;
        # TCP timestamps keep that safe), as redis-benchmark itself asks.
        done = self.exec(["sysctl", "-qw", "net.ipv4.tcp_tw_reuse=1"], 30)
        if done.returncode != 0:
            raise NetworkError(f"load generator namespace {self.netns}: tcp_tw_reuse: "
                               f"{done.stderr.strip()[:200]}")

    def close(self) -> None:
        self._mapped.clear()
        self._admitted.clear()
        self._published.clear()
        self.veth.down()
        if self.cpu_group is not None:
            self.cpu_group.remove()
            self.cpu_group = None

    @property
    def netns(self) -> str:
        return self.veth.netns

    def clients_cpu(self) -> ClientsCpu | None:
        return self.cpu_group

    def clients_netns(self) -> int | None:
        try:
            return Path(netns_path(self.netns)).stat().st_ino
        except OSError:
            return None

    def describe(self) -> LoadGenDescription:
        return LoadGenDescription(kind="local", where=self.where, netns=self.netns,
                                  host_address=self.veth.host_ip,
                                  client_address=self.veth.ns_ip, mtu=str(self._mtu))

    @contextlib.contextmanager
    def scratch_file(self, prefix: str, suffix: str) -> Iterator[str]:
        # The namespace shares this host's files.
        # Tagged with this process's tag: a file a killed run left is known as its.
        fd, path = tempfile.mkstemp(prefix=owners.temp_prefix(prefix.removeprefix("itx-")
                                                              .rstrip("-")), suffix=suffix)
        os.close(fd)
        try:
            yield path
        finally:
            Path(path).unlink(missing_ok=True)

    def read_text(self, path: str) -> str:
        return Path(path).read_text(errors="replace")

    # -- the protocol ------------------------------------------------------------------
    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        # nsenter joins only the network namespace (`ip netns exec` would also remount /sys).
        cmd = ["nsenter", f"--net={netns_path(self.netns)}", "--", *argv]
        if self.cpu_group is not None:
            cmd = self.cpu_group.wrap(cmd)
        done = command.run(cmd, timeout, env=_CLIENT_ENV)
        # Report the client's own argv, not the wrapper.
        return Completed(tuple(argv), done.returncode, done.stdout, done.stderr, done.wall_s)

    def target(self, inst: Instance, port: int, proto: str = "tcp") -> tuple[str, int]:
        # A cell that cannot be reached fails with its reason; the run goes on.
        try:
            return self._target(inst, port, proto)
        except NetworkError as e:
            raise SanityError(f"load generator: {e}") from e

    def listen(self, inst: Instance) -> str:
        return listen_address(inst, self.veth.host_ip)

    def _admit_only_us(self, chain: str, address: str, port: int, proto: str) -> None:
        """Only the load generator reaches the server: anything else arriving for its port
        (by another interface: another namespace, this host itself) is rejected, on INPUT for
        a server on the host's network, on FORWARD (after any DNAT) for one behind the host.
        Tagged isotax, inserted first, removed with the veth at close."""
        key = (chain, address, port, proto)
        if key in self._admitted:
            return
        # By the interface the load generator's packets come in by (its veth, whose name
        # carries this run's tag, so a rule a killed run left is known as its).
        self.veth.add_rule("filter", chain, "-d", address, "-p", proto, "--dport",
                           str(port), "!", "-i", self.veth.name, "-j", "REJECT", insert=True)
        self._admitted.add(key)

    def _target(self, inst: Instance, port: int, proto: str) -> tuple[str, int]:
        if proto not in ("tcp", "udp"):
            raise ValueError(f"protocol {proto!r}: use tcp or udp")
        f = inst.facts()
        kind, mode = f.kind, f.reach
        if mode != Reach.NONE:
            self._admit_only_us("INPUT" if mode == Reach.HOST else "FORWARD", self.listen(inst),
                                port, proto)
        if mode == Reach.HOST:
            return self.veth.host_ip, port
        if mode in (Reach.TAP, Reach.ROUTED):
            return inst.address, port
        if mode == Reach.SERVICE:
            # kube-proxy translates the Service's address to the pod's (iptables DNAT).
            return f.published, port
        if mode == Reach.BRIDGE:
            return self._map(inst.address, port, proto)
        if mode == Reach.PUBLISHED:
            # The engine published the port itself (docker/podman -p) on a host address.
            return f.published, port
        raise NetworkError(f"{kind}: network {mode!r} cannot be reached from the load "
                           "generator; give it network = \"host\" or \"bridge\" in the plan")

    def _map(self, address: str, port: int, proto: str) -> tuple[str, int]:
        key = (address, port, proto)
        if key in self._mapped:
            return self._mapped[key]
        pub = self._published_for(address)
        # What Docker's -p installs: DNAT on the way in. The FORWARD accepts are the bridge's
        # and the load generator's own (network.Bridge, VethNamespace).
        self.veth.add_rule("nat", "PREROUTING", "-i", self.veth.name, "-d", pub, "-p", proto,
                           "--dport", str(port), "-j", "DNAT", "--to-destination",
                           f"{address}:{port}")
        self._mapped[key] = (pub, port)
        return pub, port

    def _published_for(self, address: str) -> str:
        """The host address that fronts a bridged container (one each; made on first use)."""
        if address not in self._published:
            self._published[address] = self.veth.add_host_address()
        return self._published[address]

    def path(self, inst: Instance) -> str:
        head = f"loadgen netns {self.netns} -> veth {self.veth.name} (MTU {self._mtu})"
        bridge_front = "host DNAT"
        if network_of(inst)[1] == Reach.BRIDGE:
            try:
                bridge_front = f"host DNAT {self._published_for(inst.address)}"
            except NetworkError as e:
                raise SanityError(f"load generator: {e}") from e
        return path_words(head, inst, bridge_front, "host routing")


@contextlib.contextmanager
def open_loadgen() -> Iterator[NamespaceLoadGen]:
    """The load generator for one run: created on entry, removed on exit whatever happens."""
    lg = NamespaceLoadGen()
    try:
        lg.up()
        yield lg
    finally:
        lg.close()
