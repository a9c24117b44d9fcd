"""leaks.py: parsers on real tool output, and real leftovers detected (root)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from pyroute2 import IPRoute, netns

from isotax.run.leaks import find_leaks, parse_iptables_save_rules, parse_mountinfo

DATA = Path(__file__).parent / "data" / "network"


def test_iptables_rules_with_our_comment_only() -> None:
    # Saved while a Bridge("itx-brdata") was up: two FORWARD accepts and one MASQUERADE.
    filt = parse_iptables_save_rules((DATA / "iptables-filter-S.txt").read_text(), "filter")
    nat = parse_iptables_save_rules((DATA / "iptables-nat-S.txt").read_text(), "nat")
    assert filt == [
        "iptables rule (iptables -t filter -D FORWARD -o itx-brdata -m comment "
        "--comment isotax -j ACCEPT)",
        "iptables rule (iptables -t filter -D FORWARD -i itx-brdata -m comment "
        "--comment isotax -j ACCEPT)",
    ]
    assert len(nat) == 1 and "MASQUERADE" in nat[0] and "10.213.0.0/24" in nat[0]


def test_iptables_rules_of_others_are_ignored() -> None:
    text = ('-P FORWARD DROP\n-A FORWARD -j DOCKER-USER\n'
            '-A FORWARD -m comment --comment "isotax-like but not ours" -j ACCEPT\n')
    assert parse_iptables_save_rules(text, "filter") == []


def test_mountinfo_finds_netns_and_isotax_paths() -> None:
    points = parse_mountinfo((DATA / "mountinfo-with-netns.txt").read_text())
    assert "/run/netns/itx-nsdata1" in points
    assert all("/itx-" in p or "isotax" in p for p in points)
    assert "/sys/fs/cgroup/unified" not in points


@pytest.mark.integration
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create a netns and a link")
def test_real_leftovers_are_found_and_then_gone() -> None:
    tag = secrets.token_hex(3)
    ns, link = f"itx-nsl{tag}", f"itx-l{tag}"
    netns.create(ns)
    try:
        with IPRoute() as ipr:
            ipr.link("add", ifname=link, kind="bridge")  # "dummy" is not in every kernel
        leaks = find_leaks()
        assert f"netns {ns} (ip netns del {ns})" in leaks
        assert f"link {link} (ip link del {link})" in leaks
        # The netns's bind mount is reported once, as a netns, not again as a mount.
        assert not any(x.startswith("mount") and ns in x for x in leaks)
    finally:
        netns.remove(ns)
        with IPRoute() as ipr:
            for idx in ipr.link_lookup(ifname=link):
                ipr.link("del", index=idx)
    assert not [x for x in find_leaks() if tag in x]
