"""The plan's per-run timeout, held by the instance a workload runs in."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from isotax.protocols import Completed, Instance


class Deadline:
    """An Instance whose exec never runs past the plan's per-run timeout."""

    def __init__(self, inst: Instance, seconds: float) -> None:
        self._inst = inst
        self._end = time.monotonic() + seconds

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inst, name)

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        left = self._end - time.monotonic()
        if left <= 0:
            return Completed(tuple(argv), 124, "", "the plan's timeout_s ran out", 0.0)
        return self._inst.exec(argv, min(timeout, left))
