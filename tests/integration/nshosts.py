"""Other machines for the tests of issue 18 (beyond one machine), made on this one.

Each "host" is a network namespace `itx-h<tag><i>` joined to the root namespace by its own veth
pair on its own /24 of 10.214.0.0/16 (the local load generator and the bridges use
10.213.0.0/16), running the real Debian `/usr/sbin/sshd` with keys made for it. The remote load
generator and the Ansible fleet runs then talk to it exactly as they would to a second machine:
real ssh, real TCP through a real link, a real host key to check. What it is not: a second
kernel, a second CPU set or a second file system (the namespace shares all of those with this
machine), so these hosts prove the plumbing, never a measurement.

Usage (the context removes everything on success, failure and Ctrl-C)::

    with ssh_hosts(2) as (h1, h2):
        h1.ssh("nproc")                  # through ssh, as the load generator would
        h2.exec(["ip", "-o", "addr"])    # straight into its namespace, for assertions
        h1.stop_sshd()                   # the host's sshd dies, its sessions with it
        h2.cut_link()                    # the cable is cut: the host vanishes

Everything is named `itx...` (namespaces, links, /tmp/itx-nsh-<tag>/), so isotax's leak finder
(`isotax.run.leaks`, the suite's last test) names whatever a crash leaves; the random tag keeps
two test sessions on one machine apart. Processes are only ever stopped by the PIDs this module
started and their descendants: never by name (other sessions run sshd's too).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import secrets
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from isotax.host import owners

SUPERNET = ipaddress.IPv4Network("10.214.0.0/16")
SSHD = "/usr/sbin/sshd"  # absolute: sshd re-executes itself for every connection
# Debian's default sshd_config line: Ansible falls back to sftp/scp to copy its modules.
SFTP_SUBSYSTEM = "Subsystem\tsftp\t/usr/lib/openssh/sftp-server"
# sshd's privilege separation directory (Debian's sshd refuses to start without it). It is the
# system's: made if missing, never removed.
PRIVSEP_DIR = Path("/run/sshd")
NETNS_DIR = Path("/run/netns")
READY_S = 10.0  # how long a new sshd may take to accept a real login
TOOLS = ("ip", "nsenter", "ssh", "ssh-keygen")
# (pid, start time in clock ticks since boot): a process's identity, so that a PID the kernel
# has since given to someone else's process is never signalled.
_Proc = tuple[int, int]


def why_not() -> str | None:
    """Why this machine cannot make SSH hosts (None if it can): for a test's skip reason."""
    if os.geteuid() != 0:
        return "needs root for network namespaces, veth pairs and sshd"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not os.access(SSHD, os.X_OK):
        missing.append(SSHD)
    if missing:
        return (f"{', '.join(missing)} not installed (apt-get install openssh-server "
                "openssh-client iproute2 util-linux; scripts/setup.sh installs them)")
    return None


@dataclass
class SshHost:
    """One namespace host: where it is, how to log in, and the faults a test may inject."""

    name: str  # inventory name: "h1", "h2", ...
    netns: str  # its network namespace, "itx-h<tag><i>"
    address: str  # its address on the link (the namespace end, eth0 there)
    host_side: str  # this machine's address on the same link (the root-namespace end)
    link: str  # the root-namespace end of the veth pair (same name as the namespace)
    port: int  # sshd's port
    user: str  # "root"
    key_file: Path  # the client's private key (ed25519, mode 600)
    known_hosts: Path  # holds this host's host key for `address`
    sshd_pid: int  # the listening sshd (host PID namespace)
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)
    # Sessions that outlived a stop_sshd(sessions=False): reparented away from the listener, so
    # no ppid walk from it finds them any more; the final stop_sshd() kills them by identity.
    _orphans: dict[int, int] = field(default_factory=dict, repr=False, compare=False)
    _config: Path | None = field(default=None, repr=False, compare=False)  # sshd_config

    def url(self) -> str:
        return f"ssh://{self.user}@{self.address}:{self.port}"

    def ssh_args(self) -> list[str]:
        """ssh's options for this host, without the destination: only our key, only our
        known_hosts, strict checking and no prompt, so a test never depends on ~/.ssh."""
        return ["-i", str(self.key_file), "-p", str(self.port),
                "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                "-o", "IdentitiesOnly=yes"]

    def ssh(self, command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run `command` (a remote shell line) through real ssh; never raises on its status."""
        return subprocess.run(
            ["ssh", *self.ssh_args(), "-o", "ConnectTimeout=10",
             f"{self.user}@{self.address}", command],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)

    def exec(self, argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run `argv` in this host's network namespace directly (no ssh): for assertions.
        nsenter, not `ip netns exec`, which also remounts /sys in a new mount namespace."""
        return subprocess.run(["nsenter", f"--net={NETNS_DIR / self.netns}", "--", *argv],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)

    def stop_sshd(self, sessions: bool = True) -> None:
        """Kill the listening sshd and, with `sessions`, every process descended from it: each
        connection's sshd (the server side of a ControlMaster too) and what runs in the session,
        so a connected client sees its connection drop. Idempotent."""
        proc = self._proc
        listener: dict[int, int] = {}
        if proc is not None and proc.poll() is None:
            st = _start_time(proc.pid)
            if st is not None:
                listener[proc.pid] = st
        if sessions:
            _kill_trees({**listener, **self._orphans})
            self._orphans.clear()
        for pid in listener if not sessions else ():
            # Stopped first, it can fork no new session while its children are listed; they
            # go on running (that is the point) and are remembered for the final stop.
            _signal(pid, listener, signal.SIGSTOP)
            self._orphans.update({p: s for p, s in _tree(listener).items() if p != pid})
            _signal(pid, listener, signal.SIGKILL)
        if proc is not None:
            # our child: reaped here, or it would stay a zombie as long as the test runs
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=10)

    def start_sshd(self) -> None:
        """Start sshd again after stop_sshd() (the host comes back), and wait until it
        accepts a login."""
        assert self._config is not None and (self._proc is None or self._proc.poll() is not
                                             None), "sshd of this host is running"
        self._proc = _launch_sshd(self.netns, self._config)
        self.sshd_pid = self._proc.pid
        _wait_ready(self, self._config.parent / "sshd.log")

    def cut_link(self) -> None:
        """Cut the cable: the host becomes unreachable and nothing is killed (its sshd and
        sessions live on; packets to and from it are dropped, so a new connection times out
        and an open one hangs, as on a real network).

        Done by taking the link's far end (eth0 in the namespace) down: our end, `link`,
        loses its carrier (`state DOWN`, NO-CARRIER) but keeps its connected route, so the
        host's packets die on the veth. Taking our end itself down (`ip link set LINK down`)
        would delete that route, and the packets would leave by this machine's default route
        for the real network instead (where a middlebox may even answer them)."""
        _ip("-n", self.netns, "link", "set", "eth0", "down")


@contextlib.contextmanager
def ssh_hosts(n: int = 1) -> Iterator[list[SshHost]]:
    """`n` namespace hosts h1..hN, each with a running sshd that has accepted a real login;
    all of it (sshd's and their sessions, namespaces, links, keys) removed afterwards."""
    if not 1 <= n <= 99:
        raise ValueError(f"ssh_hosts: n={n}: 1 to 99 hosts")
    reason = why_not()
    if reason is not None:
        raise RuntimeError(f"ssh_hosts: {reason}")
    with contextlib.ExitStack() as undo:
        # Every step registers its own undo right after it succeeds: the ExitStack runs them
        # all, last first, on success, on an exception and on Ctrl-C (KeyboardInterrupt),
        # each even when an earlier one failed.
        tag, workdir = _claim_tag()
        undo.callback(shutil.rmtree, workdir, ignore_errors=True)
        PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        key = workdir / "id_ed25519"
        _keygen(key, f"itx-client-{tag}")
        (workdir / "authorized_keys").write_text(Path(f"{key}.pub").read_text())
        hosts: list[SshHost] = []
        taken: set[int] = set()
        for i in range(1, n + 1):
            hosts.append(_make_host(undo, tag, i, workdir, key, taken))
        for h in hosts:
            _wait_ready(h, workdir / h.name / "sshd.log")
        yield hosts


def write_inventory(hosts: Sequence[SshHost], path: Path,
                    host_vars: Mapping[str, Mapping[str, str]] | None = None,
                    group: str = "isotax") -> Path:
    """An Ansible INI inventory of `hosts` in `group`: one line per host with how to reach it
    (address, port, user, key, our known_hosts with strict checking) and its `host_vars`."""
    host_vars = host_vars or {}
    unknown = sorted(set(host_vars) - {h.name for h in hosts})
    if unknown:
        raise ValueError(f"write_inventory: host_vars for unknown hosts {unknown}")
    lines = [f"[{group}]"]
    for h in hosts:
        common = (f"-o UserKnownHostsFile={h.known_hosts} -o StrictHostKeyChecking=yes "
                  "-o IdentitiesOnly=yes")
        pairs = {"ansible_host": h.address, "ansible_port": str(h.port),
                 "ansible_user": h.user, "ansible_ssh_private_key_file": str(h.key_file),
                 "ansible_ssh_common_args": common, **host_vars.get(h.name, {})}
        # Ansible splits an INI host line like a shell would: quote what has spaces.
        lines.append(" ".join([h.name, *(f"{k}={shlex.quote(v)}" for k, v in pairs.items())]))
    path.write_text("\n".join(lines) + "\n")
    return path


# -- building a host -------------------------------------------------------------------------


def _ip(*args: str) -> None:
    p = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {p.stderr.strip()}")


def _ip_quiet(*args: str) -> None:
    """An undo step: what is already gone is fine."""
    subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def _claim_tag() -> tuple[str, Path]:
    """A random tag no namespace, link or directory here uses yet. Making the directory claims
    it (mkdir is atomic), so two sessions that draw the same tag cannot both get it."""
    for _ in range(50):
        tag = secrets.token_hex(2)
        prefix = f"itx-h{tag}"
        names = [*os.listdir("/sys/class/net"),
                 *(os.listdir(NETNS_DIR) if NETNS_DIR.is_dir() else [])]
        if any(x.startswith(prefix) for x in names):
            continue
        workdir = Path(f"/tmp/itx-nsh-{tag}")
        try:
            workdir.mkdir(mode=0o700)
        except FileExistsError:
            continue
        # Recorded as this process's (isotax.host.owners): an isotax run started meanwhile
        # (the tests' own) recovers what dead isotax processes left, and without the record
        # these namespaces and links would be no one's, removed under the test's feet.
        owners.mark(prefix)
        return tag, workdir
    raise RuntimeError("ssh_hosts: no free tag after 50 draws")


def _used_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks this machine's root namespace has addresses in or routes to (all
    tables; a default route collides with nothing)."""
    used = []
    routes = json.loads(subprocess.run(["ip", "-j", "-4", "route", "show", "table", "all"],
                                       capture_output=True, text=True, check=True,
                                       timeout=30).stdout or "[]")
    for r in routes:
        if r.get("dst") not in (None, "default"):
            used.append(ipaddress.IPv4Network(r["dst"], strict=False))
    addrs = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show"],
                                      capture_output=True, text=True, check=True,
                                      timeout=30).stdout or "[]")
    for link in addrs:
        for a in link.get("addr_info", []):
            used.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    return used


def _others_in(subnet: ipaddress.IPv4Network, link: str) -> list[str]:
    """Interfaces other than `link` that hold an address in `subnet`."""
    addrs = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show"],
                                      capture_output=True, text=True, check=True,
                                      timeout=30).stdout or "[]")
    return [x["ifname"] for x in addrs if x.get("ifname") != link
            and any(ipaddress.IPv4Address(a["local"]) in subnet for a in x.get("addr_info", []))]


def _pick_subnet(link: str, taken: set[int]) -> tuple[int, ipaddress.IPv4Network]:
    """Give `link` .1 of a free /24 of SUPERNET, third octet drawn at random. Another session
    may draw the same /24 between our look and our `ip addr add`: the look after the add sees
    it, and we draw again (so may it; the draws are random, so one of us moves on)."""
    for _ in range(20):
        used = _used_networks()
        free = [k for k in range(1, 255) if k not in taken
                and not any(ipaddress.IPv4Network(f"10.214.{k}.0/24").overlaps(u)
                            for u in used)]
        if not free:
            raise RuntimeError(f"ssh_hosts: no free /24 left in {SUPERNET}")
        k = random.choice(free)
        subnet = ipaddress.IPv4Network(f"10.214.{k}.0/24")
        _ip("addr", "add", f"10.214.{k}.1/24", "dev", link)
        if not _others_in(subnet, link):
            taken.add(k)
            return k, subnet
        _ip("addr", "del", f"10.214.{k}.1/24", "dev", link)
        time.sleep(random.uniform(0.01, 0.1))
    raise RuntimeError("ssh_hosts: could not claim a /24 of 10.214.0.0/16 in 20 draws")


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                    "-f", str(path)], check=True, capture_output=True, timeout=30)


def _sshd_config(address: str, port: int, d: Path, authorized_keys: Path) -> str:
    return "\n".join([
        f"ListenAddress {address}",
        f"Port {port}",
        f"HostKey {d / 'ssh_host_ed25519_key'}",
        f"AuthorizedKeysFile {authorized_keys}",
        f"PidFile {d / 'sshd.pid'}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        # No PAM: Debian's PAM stack for sshd wants a login session (pam_systemd, loginuid)
        # that a namespace host has no use for; key login for root needs none of it.
        "UsePAM no",
        # Our files live in a temp dir, not in root's home with the modes StrictModes wants.
        "StrictModes no",
        # The load generator and Ansible open many sessions at once (ControlMaster channels,
        # Ansible forks): the defaults (10, 10:30:100) would refuse some.
        "MaxSessions 64",
        "MaxStartups 64",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        SFTP_SUBSYSTEM,
        "",
    ])


def _make_host(undo: contextlib.ExitStack, tag: str, i: int, workdir: Path, key: Path,
               taken: set[int]) -> SshHost:
    name, ns = f"h{i}", f"itx-h{tag}{i}"
    link = ns  # the namespace's name fits IFNAMSIZ (15) and says whose link it is
    _ip("netns", "add", ns)
    undo.callback(_ip_quiet, "netns", "del", ns)
    # The namespace end is made in the namespace and named eth0 there, as on a real machine.
    _ip("link", "add", "name", link, "mtu", "1500", "type", "veth",
        "peer", "name", "eth0", "mtu", "1500", "netns", ns)
    undo.callback(_ip_quiet, "link", "del", link)
    k, _ = _pick_subnet(link, taken)
    host_side, address = f"10.214.{k}.1", f"10.214.{k}.2"
    _ip("link", "set", link, "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
    _ip("-n", ns, "link", "set", "eth0", "up")
    # A real second machine has a default route; its traffic for anything but this link
    # comes back to us (and goes no further: we forward nothing).
    _ip("-n", ns, "route", "add", "default", "via", host_side)

    d = workdir / name
    d.mkdir(mode=0o700)
    _keygen(d / "ssh_host_ed25519_key", f"itx-{name}-{tag}")
    host_key = (d / "ssh_host_ed25519_key.pub").read_text().split()
    known_hosts = d / "known_hosts"
    known_hosts.write_text(f"{address} {host_key[0]} {host_key[1]}\n")
    config = d / "sshd_config"
    config.write_text(_sshd_config(address, 22, d, workdir / "authorized_keys"))
    proc = _launch_sshd(ns, config)
    host = SshHost(name=name, netns=ns, address=address, host_side=host_side, link=link,
                   port=22, user="root", key_file=key, known_hosts=known_hosts,
                   sshd_pid=proc.pid, _proc=proc, _config=config)
    undo.callback(host.stop_sshd)
    return host


def _launch_sshd(ns: str, config: Path) -> subprocess.Popen[bytes]:
    """sshd in namespace ns with config, its output appended to sshd.log beside config."""
    with (config.parent / "sshd.log").open("ab") as out:
        # nsenter execs sshd (no fork for a network namespace), so the PID is sshd's own.
        # A new session: a Ctrl-C at the terminal reaches pytest, whose teardown stops sshd in
        # order, rather than racing it.
        return subprocess.Popen(
            ["nsenter", f"--net={NETNS_DIR / ns}", "--", SSHD, "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)


def _wait_ready(host: SshHost, log: Path) -> None:
    """Until sshd accepts a real login (`ssh ... true`), at most READY_S."""
    deadline = time.monotonic() + READY_S
    last = ""
    while True:
        proc = host._proc
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"sshd of {host.name} ({host.netns}) exited with "
                               f"{proc.returncode}:\n{_tail(log)}")
        r = subprocess.run(["ssh", *host.ssh_args(), "-o", "ConnectTimeout=2",
                            f"{host.user}@{host.address}", "true"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
        if r.returncode == 0:
            return
        last = r.stderr.strip()
        if time.monotonic() > deadline:
            raise RuntimeError(f"sshd of {host.name} ({host.address}) accepted no login in "
                               f"{READY_S:.0f} s; ssh said: {last}\nsshd's log:\n{_tail(log)}")
        time.sleep(0.05)


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as e:
        return f"({path}: {e})"


# -- stopping what we started, by PID --------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time) from /proc/PID/stat, or None when it is gone. The command
    name may hold spaces and parentheses: split after the last ')'."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return rest[0], int(rest[1]), int(rest[19])


def _start_time(pid: int) -> int | None:
    s = _stat(pid)
    return None if s is None or s[0] == "Z" else s[2]


def _tree(roots: Mapping[int, int]) -> dict[int, int]:
    """The live (not zombie) processes among `roots` (same identity) and all their
    descendants, walking every process's ppid."""
    table: dict[int, tuple[str, int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            s = _stat(int(entry))
            if s is not None:
                table[int(entry)] = s
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = {p: st for p, st in roots.items()
             if p in table and table[p][2] == st and table[p][0] != "Z"}
    stack = list(found)
    while stack:
        for c in children.get(stack.pop(), []):
            if c not in found and table[c][0] != "Z":
                found[c] = table[c][2]
                stack.append(c)
    return found


def _signal(pid: int, known: Mapping[int, int], sig: signal.Signals) -> None:
    """Signal `pid` if it is still the process `known` says (not a reused PID)."""
    if pid in known and _start_time(pid) == known[pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


TERM_GRACE_S = 1.0


def _kill_trees(roots: Mapping[int, int], timeout: float = 10) -> None:
    """End `roots` and all their descendants. Stopped (SIGSTOP) first, top down, until no
    new one appears: a stopped process forks nothing, and a child stays its parent's (so the
    walk still finds it) until the parent dies; then SIGTERM (see below), SIGKILL at last."""
    known = dict(roots)
    stopped: set[int] = set()
    for _ in range(100):
        tree = _tree(known)
        new = [p for p in tree if p not in stopped]
        if not new:
            break
        known.update(tree)
        for p in new:
            _signal(p, known, signal.SIGSTOP)
            stopped.add(p)
    # SIGTERM, then SIGCONT, and a moment to go: a session's shell runs its EXIT traps (a
    # login shell's `pyenv rehash` removes its lock file there; one killed while it holds it
    # leaves every later login of the user waiting 60 s for it). Then SIGKILL what is left.
    tree = _tree(known)
    for sig in (signal.SIGTERM, signal.SIGCONT):
        for p in tree:
            _signal(p, known, sig)
    grace = time.monotonic() + TERM_GRACE_S
    while _tree(known) and time.monotonic() < grace:
        time.sleep(0.02)
    known.update(_tree(known))
    for p in _tree(known):
        _signal(p, known, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while _tree(known):
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes outlived SIGKILL: {sorted(_tree(known))}")
        time.sleep(0.02)
