"""Suite-wide checks: after all tests, nothing isotax creates may be left on the host."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The leak check runs last, after every test that could have leaked.
    items.sort(key=lambda item: item.name == "test_nothing_leaked_after_suite")


@pytest.fixture(scope="session", autouse=True)
def _leaks_before_suite() -> Iterator[list[str]]:
    """What was already there before the suite (from an earlier crash) is reported separately."""
    from isotax.leaks import find_leaks

    yield find_leaks() if os.geteuid() == 0 else []
