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
import shlex
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from isotax.environments.base import GUEST_PATH
from isotax.host import command, owners
from isotax.host.network import NetworkError, VethNamespace, netns_path
from isotax.model import NotApplicable, SanityError
from isotax.parsers import procfs
from isotax.protocols import (
    Completed,
    ExecError,
    Instance,
    Isolation,
    LoadGenDescription,
    Reach,
    isolation_of,
)
from isotax.telemetry.cpuacct import CpuGroup
from isotax.telemetry.footprint import process_parents, with_descendants

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


@contextlib.contextmanager
def open_loadgen() -> Iterator[NamespaceLoadGen]:
    """The load generator for one run: created on entry, removed on exit whatever happens."""
    lg = NamespaceLoadGen()
    try:
        lg.up()
        yield lg
    finally:
        lg.close()


# -- servers inside an environment --------------------------------------------------------

# A socket's state in /proc/net/{tcp,udp}*: LISTEN for TCP; for UDP, bound and unconnected (07).
_LISTEN_STATE = {"tcp": "0A", "udp": "07"}
_POLL_S = 0.05


def _listening_script(table: str) -> str:
    """Inside the instance: wait until something listens on the port (LISTEN in /proc/net/tcp*,
    or bound in /proc/net/udp*), for $1 s; with $6 = once, look once and exit 2 if not yet.
    Exit 3 when the server ($4) has exited."""
    return (
        'end=$(( $(date +%s) + $1 )); '
        'while :; do '
        '  [ -d /proc/$4 ] || { echo "server exited" >&2; exit 3; }; '
        f'  cat /proc/net/{table} /proc/net/{table}6 2>/dev/null | '
        '  awk -v p=":$2" -v s="$3" \'toupper($2) ~ p"$" && $4 == s {f=1} END {exit !f}\' '
        '  && exit 0; '
        '  [ "$6" = once ] && exit 2; '
        '  [ "$(date +%s)" -le "$end" ] || break; '
        '  sleep 0.05; '
        'done; echo "nothing listens on port $5 after $1 s" >&2; exit 1'
    )


def _wait_listening(inst: Instance, port: int, proto: str, pid: int, timeout: float) -> None:
    """Wait until the server started as pid listens on port: seen in the instance's own /proc
    (natively, in containers and in a guest alike) or, for an instance on the host's network,
    as a socket of the instance's host processes in the host kernel's tables (host_listener)."""
    table, state = proto, _LISTEN_STATE[proto]
    argv = ["sh", "-c", _listening_script(table), "sh", str(max(1, int(timeout))),
            f"{port:04X}", state, str(pid), str(port)]
    if network_of(inst)[1] != Reach.HOST:
        done = inst.exec(argv, timeout + 30)
        if done.returncode != 0:
            raise SanityError(f"server did not start listening on {proto} port {port}: "
                              f"{(done.stderr or done.stdout).strip()[:200]}")
        return
    # The host's network: the environment's /proc/net may not list its own sockets (gVisor's
    # hostinet lists its AF_INET ones but has no tcp6/udp6 at all: its Sentry cannot see the
    # host's /proc/net/if_inet6 from its chroot, so iperf3's dual-stack socket is invisible
    # inside). Look inside once per round (that also tells whether the server still runs),
    # then at the host's tables.
    deadline = time.monotonic() + timeout
    while True:
        done = inst.exec([*argv, "once"], 60)
        if done.returncode == 0:
            return
        if done.returncode != 2:
            raise SanityError(f"server did not start listening on {proto} port {port}: "
                              f"{(done.stderr or done.stdout).strip()[:200]}")
        if host_listener(inst, port, proto) is not None:
            return
        if time.monotonic() > deadline:
            raise SanityError(
                f"server did not start listening on {proto} port {port}: nothing of the "
                f"environment listens on it after {timeout:.0f} s (neither its /proc/net nor "
                "the host kernel's tables of its host processes show one)")
        time.sleep(_POLL_S)


def listening_inodes(table: str, port: int, state: str) -> set[int]:
    """The inodes of the sockets bound to `port` in `state` (hex, "0A" = LISTEN) in the text
    of a /proc/net/{tcp,tcp6,udp,udp6} table. Pure."""
    out: set[int] = set()
    for line in table.splitlines()[1:]:
        f = line.split()
        if len(f) < 10 or ":" not in f[1] or not f[9].isdigit():
            continue
        if f[1].rsplit(":", 1)[1].upper() == f"{port:04X}" and f[3] == state and f[9] != "0":
            out.add(int(f[9]))
    return out


def socket_inodes(fd_links: Iterable[str]) -> set[int]:
    """The socket inodes among a process's fd link targets ("socket:[123]"). Pure."""
    return {int(t[8:-1]) for t in fd_links
            if t.startswith("socket:[") and t.endswith("]") and t[8:-1].isdigit()}


def _fd_links(pid: int) -> list[str]:
    out = []
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    for name in names:
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/{pid}/fd/{name}"))
    return out


def host_listener(inst: Instance, port: int, proto: str = "tcp") -> int | None:
    """The host pid of the instance's process that holds a socket bound to port (LISTEN for
    tcp), as the host kernel sees it in that process's own network namespace; None if none.

    Only a socket the instance itself holds counts (its inode must be one of the fds of
    inst.host_pids() or their descendants), so a host service on the same port does not pass
    for the environment's server. It finds the sockets of environments whose sockets are host
    kernel sockets (native, containers; gVisor's hostinet: the Sentry holds them)."""
    state = _LISTEN_STATE[proto]
    listening: dict[int, set[int]] = {}  # network namespace inode -> listening socket inodes
    for pid in with_descendants(inst.host_pids(), process_parents()):
        held = socket_inodes(_fd_links(pid))
        if not held:
            continue
        try:
            netns = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            continue
        if netns not in listening:
            found: set[int] = set()
            for table in (proto, f"{proto}6"):
                with contextlib.suppress(OSError):
                    text = Path(f"/proc/{pid}/net/{table}").read_text()
                    found |= listening_inodes(text, port, state)
            listening[netns] = found
        if held & listening[netns]:
            return pid
    return None


def start_server(inst: Instance, argv: Sequence[str], port: int, proto: str = "tcp",
                 timeout: float = 30, program: str | None = None) -> int:
    """Start argv in the background inside inst (stdio to /dev/null, so the exec returns at
    once in every environment), wait until it listens on port; return its PID there."""
    cmd = f"{shlex.join(argv)} >/dev/null 2>&1 </dev/null & echo $!"
    done = inst.exec(["sh", "-c", cmd], timeout)
    try:
        done.check()
        pid = int(done.stdout.strip().splitlines()[-1])
    except (ExecError, ValueError, IndexError) as e:
        raise SanityError(f"could not start {argv[0]} in the environment: {e}") from e
    try:
        _wait_listening(inst, port, proto, pid, timeout)
    except BaseException:
        stop_server(inst, pid, program or argv[0])
        raise
    return pid


def stop_server(inst: Instance, pid: int, program: str, timeout: float = 10) -> None:
    """Stop the server by PID, only if that PID still runs `program` (a PID can be reused);
    TERM, then KILL after a grace period. Never raises: it runs in finally blocks."""
    comm = program.rsplit("/", 1)[-1][:15]
    script = (
        'alive() { [ "$(cat /proc/$1/comm 2>/dev/null)" = "$2" ] && '
        '! grep -q "^State:.*Z" /proc/$1/status 2>/dev/null; }; '
        'alive "$1" "$2" || exit 0; kill "$1" 2>/dev/null; '
        'for i in $(seq 1 40); do alive "$1" "$2" || exit 0; sleep 0.05; done; '
        'kill -9 "$1" 2>/dev/null; exit 0'
    )
    with contextlib.suppress(Exception):
        inst.exec(["sh", "-c", script, "sh", str(pid), comm], timeout)


@contextlib.contextmanager
def serving(inst: Instance, argv: Sequence[str], port: int, proto: str = "tcp",
            program: str | None = None, timeout: float = 30) -> Iterator[int]:
    """A server running inside inst for the duration of the block; always stopped. program:
    the server's name when argv starts with a wrapper that execs it (taskset); timeout: how
    long it may take to listen."""
    pid = start_server(inst, argv, port, proto, timeout=timeout, program=program)
    try:
        yield pid
    finally:
        stop_server(inst, pid, program or argv[0])


# -- where client and server run ----------------------------------------------------------

# On one host the client and the server share its CPUs, and where they run decides what an
# RR test measures: on this 2-vCPU Firecracker guest a wake-up on the other CPU costs ~60 µs
# (an IPI through the hypervisor) against ~6 µs on the same CPU, and an unpinned run flips
# between the two as the scheduler pleases. A placement makes it a choice of the plan:
#   free      no pinning (the kernel decides; what an unpinned benchmark gets)
#   same-cpu  client and server on CPU 0 (the cost of the path itself, no cross-CPU wake-up)
#   split     client on CPU 0, server on the environment's last CPU (two "machines")
PLACEMENTS = ("free", "same-cpu", "split")


def pinning(inst: Instance, placement: str) -> tuple[list[str], list[str]]:
    """(client prefix, server prefix) argv wrappers for a placement, on the CPUs the
    environment may use (its Cpus_allowed_list: a VM's vCPUs, a container's cpuset, which a
    static CPU manager may make CPU 1 alone): same-cpu puts both on its first, split the
    client on its first and the server on its last."""
    if placement == "free":
        return [], []
    if placement not in ("same-cpu", "split"):
        raise ValueError(f"placement {placement!r}: use one of {', '.join(PLACEMENTS)}")
    # gVisor's /proc/self/status has no Cpus_allowed_list: its CPUs are then 0..nproc-1.
    done = inst.exec(["sh", "-c", "grep '^Cpus_allowed_list:' /proc/self/status || echo "
                      "\"Cpus_allowed_list: 0-$(($(nproc) - 1))\""], 30)
    try:
        cpus = procfs.parse_cpulist(done.stdout.partition(":")[2].strip())
    except ValueError:
        cpus = []
    if not cpus:
        raise SanityError(f"the CPUs the environment may use: {done.stderr.strip()[:100]}")
    first = str(cpus[0])
    if placement == "same-cpu":
        return ["taskset", "-c", first], ["taskset", "-c", first]
    if len(cpus) < 2:
        # The server would share the client's CPU: that is same-cpu, mislabelled.
        raise NotApplicable(f"placement split needs 2 CPUs in the environment, it may use "
                            f"{len(cpus)}; use placement same-cpu, or give it vcpus >= 2")
    return ["taskset", "-c", first], ["taskset", "-c", str(cpus[-1])]
