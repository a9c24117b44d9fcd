"""network.py for real: bridges, netns leases and taps (root)."""

from __future__ import annotations

import ipaddress
import secrets
import socket
import subprocess
import threading
from pathlib import Path

import pytest
from support import ours, requires_root_and

from isotax.host.network import Bridge

needs_root = requires_root_and(root_for="bridges and network namespaces")


def ip_forward() -> str:
    return Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()


@pytest.mark.integration
@needs_root
def test_bridge_up_down_leaves_nothing() -> None:
    tag = secrets.token_hex(3)
    tap_tag = f"t{tag}"
    names = [f"itx-brt{tag}", f"itx-ns{tag}", f"itx-v{tag}", f"itx-t{tap_tag}"]
    forward_before = ip_forward()
    b = Bridge(f"itx-brt{tag}")
    with b:
        b.up()  # idempotent
        ns = b.add_netns(tag)
        tap = b.add_tap(tap_tag)
        assert ns.ip != tap.ip and ns.gateway == tap.gateway == b.gateway
        assert ipaddress.ip_address(ns.ip) in b.network
        assert ip_forward() == "1"
        found = ours(*names)
        # find_leaks() sees what a bridge creates: this is what it would report after a crash.
        assert any(f"link {b.name}" in f for f in found), found
        assert any(f"netns itx-ns{tag}" in f for f in found), found
        assert any(f"link itx-t{tap_tag}" in f for f in found), found
        assert sum("iptables rule" in f for f in found) == 3, found
    assert ours(*names) == []
    assert ip_forward() == forward_before
    b.down()  # idempotent


@pytest.mark.integration
@needs_root
def test_two_bridges_get_different_subnets() -> None:
    tag = secrets.token_hex(2)
    with Bridge(f"itx-bra{tag}") as a, Bridge(f"itx-brb{tag}") as b:
        assert not a.network.overlaps(b.network)
    assert ours(f"itx-bra{tag}", f"itx-brb{tag}") == []


@pytest.mark.integration
@needs_root
def test_netns_lease_reaches_the_gateway() -> None:
    tag = secrets.token_hex(3)
    with Bridge(f"itx-brg{tag}") as b:
        lease = b.add_netns(tag)
        # A listener on the bridge's own address: traffic stays inside what this test made.
        srv = socket.socket()
        srv.bind((lease.gateway, 0))
        srv.listen(1)
        port = srv.getsockname()[1]
        got: list[tuple[bytes, str]] = []

        def accept() -> None:
            conn, peer = srv.accept()
            got.append((conn.recv(100), peer[0]))
            conn.close()

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        srv.settimeout(10)
        p = subprocess.run(["ip", "netns", "exec", lease.netns or "", "bash", "-c",
                            f"echo hello-{tag} > /dev/tcp/{lease.gateway}/{port}"],
                           capture_output=True, text=True, timeout=20)
        t.join(10)
        srv.close()
        assert p.returncode == 0, p.stderr
        assert got == [(f"hello-{tag}\n".encode(), lease.ip)]
        b.release(lease)
        assert ours(f"itx-ns{tag}", f"itx-v{tag}") == []
    assert ours(f"itx-brg{tag}") == []


@pytest.mark.integration
@needs_root
def test_tap_is_on_the_bridge_and_goes_away() -> None:
    tag = secrets.token_hex(3)
    with Bridge(f"itx-brp{tag}") as b:
        lease = b.add_tap(tag)
        assert lease.netns is None and lease.iface == f"itx-t{tag}"
        master = Path(f"/sys/class/net/{lease.iface}/master").resolve().name
        assert master == b.name
        assert Path(f"/sys/class/net/{lease.iface}/tun_flags").exists()
        b.release(lease)
        assert not Path(f"/sys/class/net/{lease.iface}").exists()
        b.release(lease)  # idempotent
    assert ours(f"itx-brp{tag}", f"itx-t{tag}") == []
