"""The load generator on a second machine reached over SSH: the studies' set-up, where the
clients (netperf, iperf3, redis-benchmark, sysbench, ...) run on another host and reach each
environment over a real link, sharing none of its CPUs.

Connection: the OpenSSH client with connection sharing. One master connection per run
(`ssh -M -N`, its control socket in /run/isotax/ssh/itx-ssh-<tag>), and every command goes
through it, so a client starts in milliseconds, not after a handshake. ServerAliveInterval
notices a dead link within ~15 s. A command whose connection is lost fails its cell with ssh's
reason (SanityError); the next command connects again (one master again), so the run goes on.
Every remote command runs under coreutils' `timeout`, so a client cannot outlive its cell
even when the connection that started it is gone.

Reaching the environments from outside, on the address of this host the load generator sees
(its $SSH_CONNECTION) and the link a packet to it leaves by (`ip route get`):
- native, and containers on the host's network: that address itself;
- a container on a bridge, and a VM on its tap: a port mapping on that address, as Docker's
  `-p` makes one (iptables nat PREROUTING DNAT on the uplink to the instance's address, the
  same port), then the bridge (and the tap and virtio for a VM). One address serves every
  mapping, so a mapping is made for the instance a cell measures and replaced for the next;
  a host-network server on the same port then gets its port back. Nothing is installed on
  the load generator (no route to the bridges): nothing of isotax's stays there.
- an engine that publishes its own ports (publish = true) publishes on an address of this
  host's only: not applicable with a remote load generator.

Before the run measures: the host is probed (fingerprint, CPUs, the link's far end), the
link measured (speed, MTU, offloads, ping's round-trip floor), and the clients' packages
compared with the image's versions (installed with apt where `install` allows). Each client's
CPU time comes from the load generator itself (the shell's `times` after it), so the limiter
still tells when the client, not the environment, was the limit.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from isotax.environments.base import GUEST_PATH
from isotax.host import command, owners
from isotax.host.facts.parity import OFFLOADS, parse_ethtool_features
from isotax.host.network import (
    NetworkError,
    TaggedRule,
    add_tagged_rule,
    admit_only,
    delete_tagged_rule,
)
from isotax.host.processes import cmdlines, process_leftover
from isotax.loadgen.base import LoadGenRefused, listen_address, network_of, path_words
from isotax.model import NotApplicable, SanityError
from isotax.parsers import remote
from isotax.plan import LoadGenSettings
from isotax.protocols import ClientsCpu, Completed, Instance, Leftover, LoadGenDescription, Reach

CONTROL_DIR = Path("/run/isotax/ssh")
_BEGIN = "itx-cpu-begin"
_END = "itx-cpu-end"
# Run argv under `timeout` (so it cannot outlive its cell), then report its CPU time (the
# shell's children: the client and everything it waited for) and exit status on stderr.
_WRAP = ('t=$1; shift; timeout -k 5 "$t" "$@"; rc=$?; '
         f'{{ echo {_BEGIN}; times; echo "{_END} $rc"; }} >&2; exit $rc')
# What the load generator says of itself, in one round trip (parsers.remote).
PROBE = r"""
echo "ssh_connection=$SSH_CONNECTION"
echo "hostname=$(hostname)"
echo "kernel=$(uname -r)"
. /etc/os-release 2>/dev/null; echo "os=${PRETTY_NAME:-unknown}"
echo "cpus=$(nproc)"
awk '/^MemTotal:/ {print "mem_total_kib=" $2}' /proc/meminfo
awk -F': *' '/^model name/ {print "cpu_model=" $2; exit}' /proc/cpuinfo
echo "machine_id=$(cat /etc/machine-id 2>/dev/null)"
echo "boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"
echo "uid=$(id -u)"
echo "apt=$(command -v apt-get)"
echo "timeout=$(command -v timeout)"
set -- $SSH_CONNECTION
if [ -n "$1" ]; then
  dev=$(ip -o -4 route get "$1" 2>/dev/null |
        awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')
  echo "dev=$dev"
  # Netlink, not /sys: /sys shows the namespace sysfs was mounted in, not this one's.
  [ -n "$dev" ] && ip -o link show dev "$dev" 2>/dev/null |
    awk '{for (i = 1; i < NF; i++) if ($i == "mtu") {print "mtu=" $(i + 1); exit}}'
fi
true
"""
_APT = ("DEBIAN_FRONTEND=noninteractive apt-get -y -q -o DPkg::Lock::Timeout=600 "
        "install --no-install-recommends")


class RemoteCpu:
    """The clients' CPU time on the load generator, one (cpu_s, wall_s) per client command:
    telemetry reads usage_s() around a run (the load generator's share of the work) and the
    busiest client's share of a core (a saturated client means the run measured the client)."""

    def __init__(self, cpus: int, where: str) -> None:
        self.cpus: int | None = cpus
        self.source = f"the clients' own CPU time on {where} (their processes' times)"
        self.records: list[tuple[float, float]] = []

    def usage_s(self) -> float:
        return sum(c for c, _ in self.records)

    def mark(self) -> int:
        return len(self.records)

    def busiest_since(self, mark: int) -> float | None:
        shares = [c / w for c, w in self.records[mark:] if w > 0]
        return max(shares) if shares else None


class SshLoadGen:
    """The LoadGen protocol (isotax.protocols.LoadGen) on a machine reached over SSH."""

    def __init__(self, settings: LoadGenSettings, wanted: Mapping[str, str]) -> None:
        """settings: the plan's [loadgen]; wanted: the client packages and the versions the
        image has of them (the load generator must have the same)."""
        self.settings = settings
        self.user, self.host, self.port = settings.destination()
        self.wanted = dict(wanted)
        self.where = f"{self.user}@{self.host} over SSH"
        self.tag = ""
        self.control = Path()
        self._master: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None
        self.facts: dict[str, str] = {}
        self.host_address = ""  # this host, as the load generator sees it
        self.address = ""  # the load generator, on that path
        self.uplink = ""  # the link a packet to it leaves by
        # (port, proto) -> (the instance address it maps to, its rules)
        self._mapped: dict[tuple[int, str], tuple[str, list[TaggedRule]]] = {}
        # (chain, address, port, proto) -> the REJECT rule that admits only the load generator
        self._admitted: dict[tuple[str, str, int, str], TaggedRule] = {}
        self.cpu_group: RemoteCpu | None = None
        self._described = LoadGenDescription(kind="ssh", where=self.where)

    # -- lifecycle ---------------------------------------------------------------------
    def up(self) -> None:
        """Connect, learn the host and the link, bring the clients to the image's versions.
        LoadGenRefused when it cannot serve the run."""
        self.tag = owners.new_tag(3)
        CONTROL_DIR.mkdir(parents=True, exist_ok=True)
        self.control = CONTROL_DIR / f"itx-ssh-{self.tag}"
        self._log = CONTROL_DIR / f"itx-ssh-{self.tag}.log"
        try:
            self._connect()
        except SanityError as e:
            raise LoadGenRefused(f"{e}; check the host, the key (key_file) and its host key "
                                 "(known_hosts), or remove [loadgen] to use the local one") \
                from None
        done = self._ssh(PROBE, 60)
        self.facts = remote.parse_key_values(done.stdout)
        if done.returncode != 0 or "ssh_connection" not in self.facts:
            raise LoadGenRefused(f"load generator {self.where}: its probe failed "
                                 f"({done.returncode}): {done.stderr.strip()[-200:]}")
        if not self.facts.get("timeout"):
            raise LoadGenRefused(f"load generator {self.where} has no `timeout` (coreutils); "
                                 "install coreutils there")
        self.host_address, self.address = remote.parse_ssh_connection(
            self.facts["ssh_connection"])
        try:
            route = remote.parse_route_get(
                command.run(["ip", "-o", "-4", "route", "get", self.address], 10).stdout)
        except ValueError as e:
            raise LoadGenRefused(f"load generator {self.where}: no route to {self.address} "
                                 f"({e})") from None
        self.uplink = route.dev
        self._bring_clients()
        self.cpu_group = RemoteCpu(int(self.facts.get("cpus") or 1), self.where)
        self._described = self._measure_link()

    def close(self) -> None:
        """Remove the port mappings, end the connection. Idempotent; never raises."""
        for _, rules in self._mapped.values():
            for rule in rules:
                delete_tagged_rule(rule)
        self._mapped.clear()
        for rule in self._admitted.values():
            delete_tagged_rule(rule)
        self._admitted.clear()
        if self._master is not None:
            with contextlib.suppress(OSError):
                subprocess.run(["ssh", "-S", str(self.control), "-O", "exit", self.host],
                               capture_output=True, timeout=10)
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self._master.terminate()
                self._master.wait(5)
            with contextlib.suppress(OSError):
                self._master.kill()
                self._master.wait(5)
            self._master = None
        for p in (self.control, self._log):
            if p is not None and p != Path():
                p.unlink(missing_ok=True)

    # -- the connection ----------------------------------------------------------------
    def _options(self) -> list[str]:
        s = self.settings
        opts = ["-p", str(self.port), "-l", self.user, "-o", "BatchMode=yes",
                "-o", f"ConnectTimeout={s.connect_timeout_s}", "-o", "ServerAliveInterval=5",
                "-o", "ServerAliveCountMax=3", "-o", "LogLevel=ERROR"]
        if s.key_file:
            opts += ["-i", s.key_file, "-o", "IdentitiesOnly=yes"]
        if s.known_hosts:
            opts += ["-o", f"UserKnownHostsFile={s.known_hosts}",
                     "-o", "StrictHostKeyChecking=yes"]
        return opts

    def _connect(self) -> None:
        """Start the master connection and wait until it serves; SanityError with ssh's own
        words when it cannot."""
        assert self._log is not None
        self.control.unlink(missing_ok=True)
        with self._log.open("wb") as log:
            self._master = subprocess.Popen(
                ["ssh", "-M", "-N", "-S", str(self.control), "-o", "ControlPersist=no",
                 *self._options(), self.host],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                env=command.owned_env(dict(os.environ)), start_new_session=True)
        deadline = time.monotonic() + self.settings.connect_timeout_s + 10
        while time.monotonic() < deadline:
            if self._master.poll() is not None:
                why = self._log.read_text(errors="replace").strip().splitlines()
                self._master = None
                raise SanityError(f"load generator {self.where}: cannot connect: "
                                  f"{why[-1] if why else 'ssh exited'}")
            if self.control.exists() and self._check():
                return
            time.sleep(0.05)
        self._drop_master()
        raise SanityError(f"load generator {self.where}: no connection after "
                          f"{self.settings.connect_timeout_s + 10} s")

    def _check(self) -> bool:
        p = subprocess.run(["ssh", "-S", str(self.control), "-O", "check", self.host],
                           capture_output=True, timeout=10)
        return p.returncode == 0

    def _drop_master(self) -> None:
        if self._master is not None:
            with contextlib.suppress(OSError):
                self._master.kill()
                self._master.wait(5)
            self._master = None

    def _ensure_connected(self) -> None:
        if self._master is None or self._master.poll() is not None:
            self._master = None
            self._connect()  # a lost connection: one new master, or the cell fails

    def _ssh(self, script: str, timeout: float) -> Completed:
        """A shell script on the load generator, through the master connection."""
        self._ensure_connected()
        argv = ["ssh", "-S", str(self.control), "-o", "ControlMaster=no", *self._options(),
                self.host, script]
        return command.run(argv, timeout, env=dict(os.environ))

    # -- the protocol ------------------------------------------------------------------
    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        limit = max(1, math.ceil(timeout))
        # A clean environment, as the local load generator gives its clients.
        script = (f'env -i "HOME=$HOME" PATH={shlex.quote(GUEST_PATH)} LANG=C.UTF-8 sh -c '
                  f"{shlex.quote(_WRAP)} sh {limit} {shlex.join(argv)}")
        t0 = time.monotonic()
        try:
            done = self._ssh(script, limit + 30)
        except SanityError as e:
            raise SanityError(f"{e} (running {argv[0]})") from None
        wall = time.monotonic() - t0
        stderr, cpu_s, rc = _split_report(done.stderr)
        if rc is None:
            if done.returncode == command.TIMED_OUT:
                return Completed(tuple(argv), done.returncode, done.stdout, stderr, wall)
            # No report from the wrapper: the connection, not the client, failed.
            alive = self._master is not None and self._master.poll() is None and self._check()
            if not alive:
                self._drop_master()
            raise SanityError(f"load generator {self.where}: the SSH connection failed "
                              f"({done.returncode}) running {argv[0]}: "
                              f"{stderr.strip()[-200:] or 'no reason given'}")
        if self.cpu_group is not None and cpu_s is not None:
            self.cpu_group.records.append((cpu_s, wall))
        return Completed(tuple(argv), rc, done.stdout, stderr, wall)

    def target(self, inst: Instance, port: int, proto: str = "tcp") -> tuple[str, int]:
        if proto not in ("tcp", "udp"):
            raise ValueError(f"protocol {proto!r}: use tcp or udp")
        kind, mode = network_of(inst)
        if mode == Reach.HOST:
            self._unmap(port, proto)  # a host-network server gets its port back
            self._admit_only_us("INPUT", self.host_address, port, proto)
            return self.host_address, port
        if mode in (Reach.BRIDGE, Reach.TAP, Reach.ROUTED):
            try:
                self._map(inst.address, port, proto)
            except NetworkError as e:
                raise SanityError(f"load generator: {e}") from e
            self._admit_only_us("FORWARD", inst.address, port, proto)
            return self.host_address, port
        if mode == Reach.PUBLISHED:
            raise NotApplicable(f"{kind} publishes its ports on an address of this host "
                                "only, which a remote load generator cannot reach; remove "
                                "publish = true from its options")
        if mode == Reach.SERVICE:
            raise NotApplicable(f"{kind}: a Service's address exists only inside the cluster "
                                "(kube-proxy's rules), which a remote load generator does "
                                "not reach through this host; use network = \"pod\"")
        raise SanityError(f"load generator: {kind}: network {mode!r} cannot be reached from "
                          "the load generator; give it network = \"host\" or \"bridge\"")

    def listen(self, inst: Instance) -> str:
        return listen_address(inst, self.host_address)

    def _admit_only_us(self, chain: str, address: str, port: int, proto: str) -> None:
        """Only the load generator reaches the server: a packet for its port from any other
        address is rejected (INPUT for a server on the host's network, FORWARD after the DNAT
        for one behind the host). Inserted first, tagged isotax, removed at close (and by
        recovery, as every tagged rule of a dead run)."""
        admit_only(self._admitted, self.address, chain, address, port, proto)

    def _map(self, address: str, port: int, proto: str) -> None:
        key = (port, proto)
        if key in self._mapped and self._mapped[key][0] == address:
            return
        self._unmap(port, proto)
        if Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() != "1":
            raise NetworkError("IP forwarding is off on this host, so nothing reaches a "
                               f"bridge from {self.uplink}")
        rules: list[TaggedRule] = []
        self._mapped[key] = (address, rules)  # recorded first: a half-made mapping is undone
        # Inserted first in each chain: before a DROP policy's or an engine's own rules.
        rules.append(add_tagged_rule(
            "nat", "PREROUTING", "-i", self.uplink, "-s", self.address, "-d",
            self.host_address, "-p", proto,
            "--dport", str(port), "-j", "DNAT", "--to-destination", f"{address}:{port}",
            insert=True))
        rules.append(add_tagged_rule("filter", "FORWARD", "-i", self.uplink, "-s",
                                     self.address, "-d", address, "-p", proto, "--dport",
                                     str(port), "-j", "ACCEPT", insert=True))
        rules.append(add_tagged_rule("filter", "FORWARD", "-o", self.uplink, "-s", address,
                                     "-p", proto, "--sport", str(port), "-j", "ACCEPT",
                                     insert=True))

    def _unmap(self, port: int, proto: str) -> None:
        _, rules = self._mapped.pop((port, proto), ("", list[TaggedRule]()))
        for rule in rules:
            delete_tagged_rule(rule)

    def path(self, inst: Instance) -> str:
        link = self._described
        head = (f"loadgen {self.where} ({self.facts.get('hostname', '?')}) -> link "
                f"{self.uplink} (MTU {link.mtu or '?'}, RTT floor "
                f"{link.rtt_floor_ms or '?'} ms) -> {self.host_address}")
        return path_words(head, inst, "host DNAT", f"host DNAT -> {inst.address}")

    def clients_cpu(self) -> ClientsCpu | None:
        return self.cpu_group

    def clients_netns(self) -> int | None:
        return None  # its clients run on another machine

    def describe(self) -> LoadGenDescription:
        return self._described

    @contextlib.contextmanager
    def scratch_file(self, prefix: str, suffix: str) -> Iterator[str]:
        done = self._ssh(f"mktemp /tmp/{shlex.quote(prefix)}XXXXXX{shlex.quote(suffix)}", 30)
        path = done.stdout.strip()
        if done.returncode != 0 or not path.startswith("/tmp/"):
            raise SanityError(f"load generator {self.where}: mktemp failed: "
                              f"{done.stderr.strip()[-200:]}")
        try:
            yield path
        finally:
            with contextlib.suppress(SanityError):
                self._ssh(f"rm -f {shlex.quote(path)}", 30)

    def read_text(self, path: str) -> str:
        done = self._ssh(f"cat {shlex.quote(path)}", 120)
        if done.returncode != 0:
            raise SanityError(f"load generator {self.where}: cannot read {path}: "
                              f"{done.stderr.strip()[-200:]}")
        return done.stdout

    # -- before the run ----------------------------------------------------------------
    def _installed(self) -> dict[str, str]:
        pkgs = " ".join(shlex.quote(p) for p in self.wanted)
        done = self._ssh("dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' "
                         f"{pkgs} 2>/dev/null; true", 60)
        return remote.parse_dpkg_versions(done.stdout)

    def _bring_clients(self) -> None:
        """The clients' packages at the image's versions: checked, installed where allowed;
        LoadGenRefused naming each that differs otherwise."""
        differ = missing_versions(self.wanted, self._installed())
        if not differ:
            return
        words = ", ".join(f"{p} {v} (it has {h or 'none'})" for p, v, h in differ)
        if not self.settings.install:
            raise LoadGenRefused(f"load generator {self.where} lacks the image's client "
                                 f"versions: {words}; install them there, or set [loadgen] "
                                 "install = true")
        if self.facts.get("uid") != "0" or not self.facts.get("apt"):
            raise LoadGenRefused(f"load generator {self.where} lacks the image's client "
                                 f"versions: {words}; isotax installs them only as root on a "
                                 "host with apt: install them there by hand")
        pins = " ".join(shlex.quote(f"{p}={v}") for p, v, _ in differ)
        done = self._ssh(f"{_APT} --allow-downgrades {pins} || "
                         f"{{ apt-get -q update && {_APT} --allow-downgrades {pins}; }}", 900)
        left = missing_versions(self.wanted, self._installed())
        if left:
            why = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.startswith("E:")]
            raise LoadGenRefused(
                f"load generator {self.where}: could not install the image's client versions "
                f"{', '.join(f'{p} {v}' for p, v, _ in left)} with apt "
                f"({why[-1] if why else f'exit {done.returncode}'}); install them there by "
                "hand, or use the local load generator (remove [loadgen])")
        self.facts["installed"] = ", ".join(f"{p} {v}" for p, v, _ in differ)

    def _measure_link(self) -> LoadGenDescription:
        """The load generator's facts and the link's, for the run's record and the report."""
        f = self.facts
        d = {"kind": "ssh", "where": self.where,
             "destination": f"{self.user}@{self.host}:{self.port}",
             "hostname": f.get("hostname", ""), "kernel": f.get("kernel", ""),
             "os": f.get("os", ""), "cpus": f.get("cpus", ""),
             "mem_total_kib": f.get("mem_total_kib", ""), "cpu_model": f.get("cpu_model", ""),
             "client_address": self.address, "host_address": self.host_address,
             "uplink": self.uplink, "remote_mtu": f.get("mtu", ""),
             "tools": ", ".join(f"{p} {v}" for p, v in self.wanted.items())}
        if f.get("installed"):
            d["installed"] = f["installed"]
        net = Path("/sys/class/net") / self.uplink
        for key, name in (("mtu", "mtu"), ("speed_mbit_s", "speed")):
            with contextlib.suppress(OSError):
                d[key] = (net / name).read_text().strip()
        feats = parse_ethtool_features(command.run(["ethtool", "-k", self.uplink], 10).stdout)
        d["offloads"] = " ".join(f"{k}={feats[k]}" for k in OFFLOADS if k in feats)
        ping = command.run(["ping", "-c", "20", "-i", "0.2", "-q", self.address], 30)
        try:
            rtt = remote.parse_ping(ping.stdout)
            d["rtt_floor_ms"], d["rtt_avg_ms"] = f"{rtt.min_ms:.3f}", f"{rtt.avg_ms:.3f}"
        except ValueError as e:
            d["rtt_floor_ms"] = f"unknown ({e})"
        return LoadGenDescription(**d, same_machine=same_machine(f))


def missing_versions(wanted: Mapping[str, str], have: Mapping[str, str]
                     ) -> list[tuple[str, str, str | None]]:
    """(package, wanted version, installed version or None) for each package whose installed
    version differs from the wanted one, in `wanted`'s order. Pure."""
    return [(p, v, have.get(p)) for p, v in wanted.items() if have.get(p) != v]


def same_machine(facts: Mapping[str, str], root: Path = Path("/")) -> bool:
    """Whether the load generator is this very machine (a network namespace of it, as in
    isotax's own tests): the same machine-id and boot. Its clients then share this host's
    CPUs, whatever the link."""
    try:
        mine = ((root / "etc/machine-id").read_text().strip(),
                (root / "proc/sys/kernel/random/boot_id").read_text().strip())
    except OSError:
        return False
    return bool(mine[0]) and (facts.get("machine_id"), facts.get("boot_id")) == mine


def _split_report(stderr: str) -> tuple[str, float | None, int | None]:
    """(the client's own stderr, its CPU seconds, its exit status) from the wrapper's
    stderr; (stderr, None, None) when the wrapper did not report (the connection failed)."""
    lines = stderr.splitlines()
    begins = [i for i, ln in enumerate(lines) if ln == _BEGIN]
    if not begins or not lines[-1].startswith(f"{_END} "):
        return stderr, None, None
    b = begins[-1]
    try:
        rc = int(lines[-1].split()[1])
    except (IndexError, ValueError):
        return stderr, None, None
    try:
        cpu: float | None = remote.parse_children_times("\n".join(lines[b + 1:-1]))
    except ValueError:
        cpu = None
    rest = "\n".join(lines[:b])
    return rest + ("\n" if rest else ""), cpu, rc


def leaked_connections() -> list[Leftover]:
    """SSH master connections of load generators whose run is gone (their control socket is
    in CONTROL_DIR), and control sockets and logs no process holds."""
    prefix = str(CONTROL_DIR / "itx-ssh-")
    out: list[Leftover] = []
    held: set[str] = set()
    for pid, args in cmdlines(skip_self=True):
        if os.path.basename(args[0]) == "ssh" and "-M" in args:
            paths = [a for a in args if a.startswith(prefix)]
            if paths:
                held.update(paths)
                out.append(process_leftover(pid, args, "SSH connection of a load generator"))
    if CONTROL_DIR.is_dir():
        out += [Leftover(f"file {p}", [("rm", "-f", str(p))])
                for p in sorted(CONTROL_DIR.glob("itx-ssh-*"))
                if str(p).removesuffix(".log") not in held]
    return out

