"""Instances started together: a burst at a rate, or one after another, each one's phases from
the platform's own account of it (a pod's from the API's watch and its node's CRI; a bare
container's from its runtime). The `pod_startup` workload asks a Launcher for a Burst; an
environment kind that can start many at once better than one start() after another (the pod
kind: one watch for all, no per-pod kubectl) gives its own through Environment.bursts()."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class StartRecord:
    """One instance's start: each phase's seconds from its own request, in the order it
    passed them, and where it ran."""

    name: str
    phases: Mapping[str, float]
    requested_at: float = 0.0  # seconds since the epoch, when it was asked for
    node: str = ""
    namespace: str = ""  # a pod's namespace ("" elsewhere)
    # The platform's own timestamps, where it keeps them (a pod's conditions: RFC 3339,
    # whole seconds), for an export in its users' format.
    api: Mapping[str, str] = field(default_factory=dict)


class Burst(Protocol):
    """Instances of one environment started on request and kept running until close()."""

    # Where the phases come from, in a few words (the report says it).
    source: str

    def start(self, count: int, rate_per_s: float, timeout: float) -> list[StartRecord]:
        """Start `count` more, `rate_per_s` requests a second (0: each one once the one before
        it has started), and wait until every one has started or `timeout` seconds pass; their
        records in request order. SanityError naming the first that did not start."""

    @property
    def running(self) -> int:
        """How many of its instances run now."""

    def close(self) -> None:
        """Stop and remove every instance it started; never raises. Idempotent."""
