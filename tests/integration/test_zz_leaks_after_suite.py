"""Runs last (see conftest): the whole suite left no netns, link, iptables rule, mount,
container or VM behind."""

from __future__ import annotations

import os

import pytest


def test_nothing_leaked_after_suite(_leaks_before_suite: list[str]) -> None:
    if os.geteuid() != 0:
        pytest.skip("listing netns, iptables rules and containers needs root")
    from isotax.run.leaks import find_leaks

    new = [x for x in find_leaks() if x not in _leaks_before_suite]
    assert new == [], f"isotax resources left behind by the suite: {new}"
