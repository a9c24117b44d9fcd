"""The namespace SSH hosts (nshosts.py) the tests of issue 18 stand in for other machines with:
each answers real ssh from its own network namespace, OpenSSH connection sharing works against
it, its faults (sshd killed with its sessions, link cut) look to a client as they would on a
real network, and nothing of it is left afterwards, Ctrl-C included."""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ours

from .nshosts import NETNS_DIR, SSHD, SshHost, ssh_hosts, why_not, write_inventory

pytestmark = pytest.mark.skipif(why_not() is not None, reason=why_not() or "")


def _identity(pid: int) -> int | None:
    """The start time of a live (not zombie) process `pid`, None if there is none: a PID
    compared with its start time is never mistaken for a later process's."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if rest[0] == "Z" else int(rest[19])


def _gone(pid: int, ident: int | None, wait: float = 10) -> bool:
    deadline = time.monotonic() + wait
    while ident is not None and _identity(pid) == ident:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _assert_nothing_left(hosts: list[SshHost], pids: dict[int, int | None]) -> None:
    """No namespace, link, process (sshd's and `pids`), temp dir or leak line of `hosts`."""
    for h in hosts:
        assert not (NETNS_DIR / h.netns).exists(), h.netns
        assert not Path("/sys/class/net", h.link).exists(), h.link
        assert not h.key_file.parent.exists(), h.key_file.parent
        assert ours(h.netns, str(h.key_file.parent)) == []
    for pid, ident in pids.items():
        assert _gone(pid, ident, wait=0), f"PID {pid} outlived the hosts"


# -- OpenSSH connection sharing, as the remote load generator uses it ------------------------


def _dest(h: SshHost) -> str:
    return f"{h.user}@{h.address}"


def _start_master(h: SshHost, cm: Path) -> int:
    """A ControlMaster for `h` at `cm`, backgrounded (-f); returns its PID (from -O check)."""
    # stdout/stderr to files, not pipes: the backgrounded master keeps them open, and
    # subprocess.run would wait for it to close them (ControlPersist, 60 s).
    with (cm.parent / "master.err").open("ab") as err:
        r = subprocess.run(["ssh", *h.ssh_args(), "-o", "ControlMaster=yes",
                            "-o", f"ControlPath={cm}", "-o", "ControlPersist=60",
                            "-o", "ConnectTimeout=5", "-N", "-f", _dest(h)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                           timeout=30)
    assert r.returncode == 0, (cm.parent / "master.err").read_text()
    check = _check(h, cm)
    assert check.returncode == 0, check.stderr
    m = re.search(r"Master running \(pid=(\d+)\)", check.stderr)
    assert m, check.stderr
    return int(m.group(1))


def _check(h: SshHost, cm: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-o", f"ControlPath={cm}", "-O", "check", _dest(h)],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)


def _via(h: SshHost, cm: Path, command: str) -> list[str]:
    """ssh argv for `command` through the master at `cm` only (ControlMaster=no: never a
    master of its own; a dead master's socket makes it connect directly, which then fails)."""
    return ["ssh", *h.ssh_args(), "-o", "ControlMaster=no", "-o", f"ControlPath={cm}",
            "-o", "ConnectTimeout=3", _dest(h), command]


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=30)


def _stop_master(h: SshHost, cm: Path, pid: int | None, ident: int | None) -> None:
    """-O exit, then the master's own PID (a process this test started) if it lingers."""
    subprocess.run(["ssh", "-o", f"ControlPath={cm}", "-O", "exit", _dest(h)],
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    if pid is not None and not _gone(pid, ident, wait=5):
        os.kill(pid, 9)


# -- the hosts -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two() -> Iterator[list[SshHost]]:
    with ssh_hosts(2) as hosts:
        pids = {h.sshd_pid: _identity(h.sshd_pid) for h in hosts}
        yield hosts
    _assert_nothing_left(hosts, pids)


def test_each_host_answers_from_its_own_namespace(two: list[SshHost]) -> None:
    root_ns = os.readlink("/proc/self/ns/net")
    seen = set()
    for h in two:
        r = h.ssh("readlink /proc/self/ns/net; ip -o -4 addr show; cat /proc/self/net/dev")
        assert r.returncode == 0, r.stderr
        ns, *rest = r.stdout.splitlines()
        # the command ran in h's namespace: the one nsenter enters, not ours, not the other's
        assert ns != root_ns
        assert ns == h.exec(["readlink", "/proc/self/ns/net"]).stdout.strip()
        seen.add(ns)
        out = "\n".join(rest)
        assert f"inet {h.address}/24" in out
        assert all(o.address not in out for o in two if o is not h)
        devs = {line.split(":")[0].strip() for line in rest if ":" in line
                and not line.startswith(("Inter", " face")) and "inet" not in line}
        assert devs == {"lo", "eth0"}
        route = h.exec(["ip", "-4", "route", "show", "default"]).stdout
        assert f"default via {h.host_side} dev eth0" in route
    assert len(seen) == 2


def test_host_description(two: list[SshHost]) -> None:
    h1, h2 = two
    assert [h.name for h in two] == ["h1", "h2"]
    for h in two:
        assert h.url() == f"ssh://root@{h.address}:22"
        assert h.ssh_args() == [
            "-i", str(h.key_file), "-p", "22", "-o", f"UserKnownHostsFile={h.known_hosts}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"]
        assert h.netns.startswith("itx-h") and h.link.startswith("itx") and len(h.link) <= 15
        assert h.address.startswith("10.214.") and h.host_side.startswith("10.214.")
        assert h.address.rsplit(".", 1)[0] == h.host_side.rsplit(".", 1)[0]
        assert stat.S_IMODE(h.key_file.stat().st_mode) == 0o600
        assert h.known_hosts.read_text().startswith(f"{h.address} ssh-ed25519 ")
        # sshd_pid is sshd itself (nsenter exec'd it), listening in h's namespace
        assert os.readlink(f"/proc/{h.sshd_pid}/exe") == SSHD
        assert os.readlink(f"/proc/{h.sshd_pid}/ns/net") == h.exec(
            ["readlink", "/proc/self/ns/net"]).stdout.strip()
        link = subprocess.run(["ip", "-o", "link", "show", h.link], capture_output=True,
                              text=True, check=True).stdout
        assert "mtu 1500" in link and "state UP" in link
        assert "mtu 1500" in h.exec(["ip", "-o", "link", "show", "eth0"]).stdout
    assert h1.address.split(".")[2] != h2.address.split(".")[2]
    assert h1.netns[:-1] == h2.netns[:-1]  # one tag per context


def test_sftp_subsystem(two: list[SshHost]) -> None:
    """Ansible copies its modules with sftp where it can."""
    h = two[0]
    sftp = ["sftp", "-b", "-", "-i", str(h.key_file), "-P", str(h.port),
            *h.ssh_args()[4:], _dest(h)]
    r = subprocess.run(sftp, input="pwd\n", capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "Remote working directory: /root" in r.stdout


def test_inventory(two: list[SshHost], tmp_path: Path) -> None:
    inv = write_inventory(two, tmp_path / "hosts.ini", host_vars={"h2": {"role": "a b"}})
    lines = inv.read_text().splitlines()
    assert lines[0] == "[isotax]"
    for h, line in zip(two, lines[1:], strict=True):
        name, *pairs = shlex.split(line)
        kv = dict(p.split("=", 1) for p in pairs)
        assert name == h.name
        assert kv["ansible_host"] == h.address and kv["ansible_port"] == "22"
        assert kv["ansible_user"] == "root"
        assert kv["ansible_ssh_private_key_file"] == str(h.key_file)
        assert kv["ansible_ssh_common_args"] == (
            f"-o UserKnownHostsFile={h.known_hosts} -o StrictHostKeyChecking=yes "
            "-o IdentitiesOnly=yes")
    assert "role='a b'" in lines[2] and "role" not in lines[1]
    with pytest.raises(ValueError, match="h9"):
        write_inventory(two, tmp_path / "x.ini", host_vars={"h9": {}})


# -- connection sharing and the faults -------------------------------------------------------


def test_control_master_reuse(tmp_path: Path) -> None:
    """A ControlMaster carries commands; with the listener gone (sessions=False), a direct
    connection is refused while the master's keeps working: the commands used the master."""
    cm = tmp_path / "cm"
    with ssh_hosts(1) as (h,):
        pid = _start_master(h, cm)
        ident = _identity(pid)
        try:
            for _ in range(3):
                r = _run(_via(h, cm, "ip -o -4 addr show eth0"))
                assert r.returncode == 0 and h.address in r.stdout, r.stderr
            h.stop_sshd(sessions=False)
            assert _identity(h.sshd_pid) is None
            direct = h.ssh("true", timeout=15)
            assert direct.returncode == 255 and "refused" in direct.stderr, direct.stderr
            r = _run(_via(h, cm, "echo still"))
            assert (r.returncode, r.stdout) == (0, "still\n"), r.stderr
        finally:
            _stop_master(h, cm, pid, ident)


def test_stop_sshd_drops_established_connections(tmp_path: Path) -> None:
    cm = tmp_path / "cm"
    with ssh_hosts(1) as (h,):
        pid = _start_master(h, cm)
        ident = _identity(pid)
        try:
            # a command in flight through the master: its remote PID, then it waits
            inflight = subprocess.Popen(_via(h, cm, "echo $$; exec sleep 60"),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
            assert inflight.stdout is not None
            remote = int(inflight.stdout.readline())
            remote_ident = _identity(remote)
            assert remote_ident is not None
            t0 = time.monotonic()
            h.stop_sshd(sessions=True)
            _, err = inflight.communicate(timeout=15)
            assert inflight.returncode == 255, err
            assert time.monotonic() - t0 < 10
            assert _gone(remote, remote_ident, wait=0)  # the session's process died too
            assert _identity(h.sshd_pid) is None
            r = _run(_via(h, cm, "true"))
            assert r.returncode == 255, r.stderr
            assert _check(h, cm).returncode == 255
            assert _gone(pid, ident)  # the client's master saw its connection close
            h.stop_sshd()  # idempotent
            h.stop_sshd(sessions=False)
        finally:
            _stop_master(h, cm, pid, ident)


def test_cut_link_makes_ssh_time_out(tmp_path: Path) -> None:
    """A new connection times out (within ConnectTimeout), an open one through a master is
    left hanging rather than refused, and nothing was killed."""
    cm = tmp_path / "cm"
    with ssh_hosts(1) as (h,):
        pid = _start_master(h, cm)
        ident = _identity(pid)
        try:
            h.cut_link()
            t0 = time.monotonic()
            r = _run(["ssh", *h.ssh_args(), "-o", "ConnectTimeout=2", _dest(h), "true"])
            took = time.monotonic() - t0
            assert r.returncode == 255, r.stderr
            assert "Connection timed out" in r.stderr, r.stderr
            assert took < 8, took
            # the packets die on the link, not on this machine's uplink
            route = subprocess.run(["ip", "-o", "-4", "route", "get", h.address],
                                   capture_output=True, text=True).stdout
            assert f"dev {h.link} " in route, route
            link = subprocess.run(["ip", "-o", "link", "show", h.link], capture_output=True,
                                  text=True).stdout
            assert "NO-CARRIER" in link and "state DOWN" in link, link
            # nothing was killed: sshd, its namespace and the master's connection are there
            assert _identity(h.sshd_pid) is not None
            assert h.exec(["true"]).returncode == 0
            assert _check(h, cm).returncode == 0
            with pytest.raises(subprocess.TimeoutExpired):
                subprocess.run(_via(h, cm, "true"), stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=2)
        finally:
            _stop_master(h, cm, pid, ident)


def test_nothing_left_after_the_context(tmp_path: Path) -> None:
    """Sessions still open when the context exits die with their sshd; the namespaces, links
    and temp dir go."""
    cm = tmp_path / "cm"
    with ssh_hosts(2) as hosts:
        h1, _ = hosts
        pid = _start_master(h1, cm)
        ident = _identity(pid)
        session = subprocess.Popen(["ssh", *h1.ssh_args(), _dest(h1), "echo $$; exec sleep 300"],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
        assert session.stdout is not None
        remote = int(session.stdout.readline())
        pids = {h.sshd_pid: _identity(h.sshd_pid) for h in hosts}
        pids[remote] = _identity(remote)
    try:
        assert session.wait(timeout=15) == 255
        _assert_nothing_left(hosts, pids)
        assert _gone(pid, ident)
    finally:
        _stop_master(h1, cm, pid, ident)


def test_teardown_on_ctrl_c() -> None:
    with pytest.raises(KeyboardInterrupt), ssh_hosts(1) as hosts:
        pids = {h.sshd_pid: _identity(h.sshd_pid) for h in hosts}
        raise KeyboardInterrupt
    _assert_nothing_left(hosts, pids)
