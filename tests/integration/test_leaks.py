"""leaks.py for real: leftovers detected, then gone (root)."""

from __future__ import annotations

import secrets

import pytest
from pyroute2 import IPRoute, netns
from support import ours, requires_root_and

from isotax.run.leaks import find_leaks


@pytest.mark.integration
@requires_root_and(root_for="a network namespace and a link")
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
    assert not ours(tag)
