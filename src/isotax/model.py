"""The results model: immutable, validated on creation, with units required.

FORMAT_VERSION history (bump on any change to what a stored row means):
  1 - first format: runs, cells, samples; a sample is (metric, value, unit, higher_is_better).
  2 - a cell can also be "n/a": the workload does not apply to the environment (reason stored).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

FORMAT_VERSION = 2

# The label, on a passing cell's samples, that names the metrics its point could not measure in
# that environment, each with why ({metric: reason}): where one tool of a point cannot run
# there, the point keeps the other tools' metrics and only the missing one is n/a (the report
# shows it so, with its reason). Older readers ignore it: no format change.
NOT_MEASURED = "not_measured"


def _frozen(d: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(d or {}))


@dataclass(frozen=True)
class Sample:
    """One measured number. A sample exists only if its run passed its sanity check."""

    metric: str
    value: float
    unit: str
    higher_is_better: bool = True
    labels: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.metric:
            raise ValueError("a sample needs a metric name")
        if not self.unit:
            raise ValueError(f"sample {self.metric!r} has no unit")
        if not isinstance(self.value, int | float) or not math.isfinite(self.value):
            raise ValueError(f"sample {self.metric!r} has a non-finite value {self.value!r}")
        object.__setattr__(self, "value", float(self.value))
        object.__setattr__(self, "labels", _frozen(self.labels))


class SanityError(Exception):
    """A workload ran but its output failed a sanity check: stored as a failure, never a number."""


class NotApplicable(Exception):
    """The workload makes no sense in this environment, for a reason that is not a defect of
    either: no network path for a network workload, an emulated CPU model that refuses an
    instruction the workload's own build relies on. Stored as "n/a" with the reason, reported
    as such, never as a number and never as a failure."""


class RunStatus(StrEnum):
    """A run's status in the store."""

    RUNNING = "running"  # measuring, or ended without a word (killed): resumable
    COMPLETE = "complete"
    INTERRUPTED = "interrupted"  # Ctrl-C, SIGTERM or a full disk: resumable
    FAILED = "failed"  # ended by an error isotax did not expect: resumable
    REFUSED = "refused"  # an environment was not what the plan declared, or unequal resources


class CellStatus(StrEnum):
    OK = "ok"
    FAILED = "failed"  # ran, but failed (exit code, sanity check, timeout): reason stored
    NOT_APPLICABLE = "n/a"  # the workload does not apply to the environment: reason stored


@dataclass(frozen=True)
class CellKey:
    """One point of the matrix: environment x workload x parameters x repetition."""

    environment: str
    workload: str
    params: Mapping[str, Any]
    repetition: int
    warmup: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", _frozen(self.params))

    @property
    def params_key(self) -> str:
        """A stable text form of the parameters, used to group and to resume."""
        return ",".join(f"{k}={self.params[k]}" for k in sorted(self.params))

    @property
    def ident(self) -> str:
        kind = "warmup" if self.warmup else "rep"
        return f"{self.environment}|{self.workload}|{self.params_key}|{kind}{self.repetition}"
