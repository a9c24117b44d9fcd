"""Runs last (see conftest): the whole suite left no netns, link, iptables rule, mount,
container, VM, process or temporary file behind: asked of isotax's leak finder, and seen
independently in /proc and the temporary folders."""

from __future__ import annotations

import os
import time

import pytest
from support import owned_processes, temp_entries


def test_nothing_leaked_after_suite(_leaks_before_suite: list[str],
                                    _traces_before_suite: tuple[set[str], set[str]]) -> None:
    if os.geteuid() != 0:
        pytest.skip("listing netns, iptables rules and containers needs root")
    from isotax.run.leaks import find_leaks

    new = [x for x in find_leaks() if x not in _leaks_before_suite]
    assert new == [], f"isotax resources left behind by the suite: {new}"
    temp_before, processes_before = _traces_before_suite
    # A few seconds' grace: a process still exiting, a folder its owner is removing, is not
    # one left behind.
    deadline = time.monotonic() + 10
    while True:
        processes = [p for p in owned_processes() if p not in processes_before]
        files = sorted(temp_entries() - temp_before)
        if not (processes or files) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert processes == [], f"processes of isotax's left running by the suite: {processes}"
    assert files == [], f"temporary files of isotax's left by the suite: {files}"
