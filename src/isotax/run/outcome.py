"""What one cell came to, as one typed object: the runner's _run_cell returns it and commits
it, so that no part of it (the telemetry that watched the cell, where its time went) travels
through the runner's attributes on the side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from isotax.model import CellStatus, Sample
from isotax.telemetry.summary import TelemetrySummary


@dataclass(frozen=True)
class CellOutcome:
    status: CellStatus
    reason: str = ""  # why it did not pass ("" when it passed)
    samples: Sequence[Sample] = ()  # a passing cell's only
    # (summary, series) of the telemetry that watched a passing measured cell, else None
    telemetry: tuple[TelemetrySummary, Mapping[str, Any]] | None = None
    prepare_s: float = 0.0  # preparing its workload point (the first cell of it only)
    run_s: float = 0.0  # the workload running (inside the telemetry's watch)

    @classmethod
    def ended(cls, status: CellStatus, reason: str, prepare_s: float = 0.0,
              run_s: float = 0.0) -> CellOutcome:
        """A cell that did not pass: its status and reason, no numbers."""
        return cls(status, reason, prepare_s=prepare_s, run_s=run_s)
