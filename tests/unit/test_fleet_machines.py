"""Which hosts are one machine: (machine-id, boot_id) from each host, grouped in inventory
order, and the line that says they run one after the other."""

from __future__ import annotations

import json

from support import DATA

from isotax.fleet.ansible import outcomes
from isotax.fleet.machines import Identity, group_machines, parse_identity, same_machine_lines


def test_identity_from_the_identity_task() -> None:
    events = json.loads((DATA / "fleet" / "events-identity.json").read_text())
    out = outcomes(events, ["h1", "h2"])
    ident = parse_identity(out["h1"].results["identity"]["stdout"])
    assert ident is not None and len(ident.machine_id) == 32 and len(ident.boot_id) == 36
    assert parse_identity("only-one-line\n") is None
    assert parse_identity("") is None


def test_grouping() -> None:
    a, b, c = Identity("m1", "b1"), Identity("m2", "b2"), Identity("m1", "b9")  # c: a clone
    ids = {"h1": a, "h2": b, "h3": a, "h4": c, "h5": a}
    order = ["h5", "h1", "h2", "h3", "h4", "h6"]  # h6: no identity (unreachable)
    assert group_machines(order, ids) == [["h5", "h1", "h3"], ["h2"], ["h4"]]
    assert same_machine_lines(group_machines(order, ids), ids) == [
        "h5, h1 and h3 are the same machine (machine-id m1…, same boot): run one after the "
        "other"]
    two = {"h1": Identity("3d1219c7c4c5404aaa", "x"), "h2": Identity("3d1219c7c4c5404aaa", "x")}
    assert same_machine_lines([["h1", "h2"]], two) == [
        "h1 and h2 are the same machine (machine-id 3d1219c7c4c5…, same boot): run one after "
        "the other"]
