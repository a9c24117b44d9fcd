"""network.py: subnet choice and name checks (pure)."""

from __future__ import annotations

import ipaddress

import pytest

from isotax.host.network import Bridge, NetworkError, pick_subnet


def net(s: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(s)


def test_pick_subnet_prefers_the_asked_one_when_free() -> None:
    used = [net("192.0.2.0/24"), net("127.0.0.0/8")]
    assert pick_subnet(net("10.213.7.0/24"), used) == net("10.213.7.0/24")


def test_pick_subnet_moves_to_the_first_free_24() -> None:
    used = [net("10.213.0.0/24"), net("10.213.1.0/24"), net("10.213.2.1/32")]
    assert pick_subnet(net("10.213.0.0/24"), used) == net("10.213.3.0/24")


def test_pick_subnet_sees_a_wider_route_covering_all() -> None:
    with pytest.raises(NetworkError, match="no free /24"):
        pick_subnet(net("10.213.0.0/24"), [net("10.0.0.0/8")])


@pytest.mark.parametrize("name,subnet", [
    ("br0", "10.213.0.0/24"),  # no itx prefix
    ("itx-bridge-too-long", "10.213.0.0/24"),  # over IFNAMSIZ
    ("itx-br0", "10.1.0.0/24"),  # outside 10.213.0.0/16
    ("itx-br0", "10.213.0.0/16"),  # not a /24
])
def test_bridge_rejects_bad_names_and_subnets(name: str, subnet: str) -> None:
    with pytest.raises(ValueError):
        Bridge(name, subnet)


def test_lease_tags_must_fit_interface_names() -> None:
    b = Bridge("itx-brx")
    with pytest.raises(ValueError, match="1-8 characters"):
        b.add_netns("toolongtag")
