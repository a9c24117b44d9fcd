"""Fixtures both test rooms share, and the suite's order.

tests/unit: no root, no runtime, no network namespace, nothing started; runs anywhere as an
ordinary user. tests/integration (its own conftest.py has the image, the load generator and
the leak check's baseline): real environments, root, runtimes, real tools. Every test in
tests/integration is marked `integration`, so `-m "not integration"` still means the unit room.
A run of both (`pytest tests`) runs the unit room first, then integration, and the leak check
(integration/test_zz_leaks_after_suite.py) last of all. Plain helpers are in support.py."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from support import EchoCounter, EchoWorkload, SpreadWorkload

from isotax import protocols

INTEGRATION = Path(__file__).resolve().parent / "integration"


def _integration(item: pytest.Item) -> bool:
    return INTEGRATION in item.path.resolve().parents


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _integration(item):
            item.add_marker(pytest.mark.integration)
    # The unit room first; the leak check last, after every test that could have leaked.
    items.sort(key=lambda item: (item.name == "test_nothing_leaked_after_suite",
                                 _integration(item)))


@pytest.fixture
def echo_workload(monkeypatch: pytest.MonkeyPatch) -> type[EchoWorkload]:
    """support.EchoWorkload registered for this test (plans may name "test-echo"), its
    counters reset."""
    monkeypatch.setitem(protocols.WORKLOADS, EchoWorkload.name, EchoWorkload)
    EchoCounter.calls, EchoCounter.interrupt_at, EchoCounter.fail_at = 0, None, None
    return EchoWorkload


@pytest.fixture
def spread(monkeypatch: pytest.MonkeyPatch) -> None:
    """support.SpreadWorkload registered for this test ("test-spread"), seeded."""
    monkeypatch.setitem(protocols.WORKLOADS, SpreadWorkload.name, SpreadWorkload)
    SpreadWorkload.rng = random.Random(7)
    SpreadWorkload.calls, SpreadWorkload.interrupt_at = 0, None
