"""leaks.py: parsers on real tool output."""

from __future__ import annotations

from support import DATA

from isotax.run.leaks import parse_iptables_save_rules, parse_mountinfo


def test_iptables_rules_with_our_comment_only() -> None:
    # Saved while a Bridge("itx-brdata") was up: two FORWARD accepts and one MASQUERADE.
    filt = parse_iptables_save_rules((DATA / "network" / "iptables-filter-S.txt").read_text(),
                                     "filter")
    nat = parse_iptables_save_rules((DATA / "network" / "iptables-nat-S.txt").read_text(), "nat")
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
    points = parse_mountinfo((DATA / "network" / "mountinfo-with-netns.txt").read_text())
    assert "/run/netns/itx-nsdata1" in points
    assert all("/itx-" in p or "isotax" in p for p in points)
    assert "/sys/fs/cgroup/unified" not in points
