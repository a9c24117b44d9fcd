"""The runner's log lines: one per cell, the notice of an emulated environment, and the
refusal of an environment that cannot run here."""

from __future__ import annotations

from collections.abc import Sequence

from isotax.model import CellKey, CellStatus, Sample
from isotax.plan import EnvironmentEntry
from isotax.protocols import Facts, headline_metric


def emulation_notice(name: str, facts: Facts) -> str:
    """"" unless the started environment's facts say it is emulated: then one line saying
    so, with its accelerator and the reason, and what its ratios measure."""
    if not facts.emulated:
        return ""
    accel = facts.accelerator.strip()
    how = f"{accel.upper()} software emulation" if accel else "software emulation"
    reason = facts.accelerator_reason.strip()
    return (f"{name}: runs under {how} (emulated)" + (f": {reason}" if reason else "")
            + "; its ratios will measure the emulator, not the overhead of hardware "
              "virtualisation")


def cell_words(key: CellKey) -> str:
    return f"{key.workload} {key.params_key} " + (
        f"warm-up {key.repetition}" if key.warmup else f"rep {key.repetition}")


def describe_cell(key: CellKey, status: CellStatus, reason: str,
                   samples: Sequence[Sample]) -> str:
    what = f"{key.environment:>12} {cell_words(key)}"
    if status is CellStatus.FAILED:
        return f"[red]{what}: FAILED: {reason}[/]"
    if status is CellStatus.NOT_APPLICABLE:
        return f"[yellow]{what}: not applicable: {reason}[/]"
    head = headline_metric(key.workload, [s.metric for s in samples])
    shown = next(s for s in samples if s.metric == head)
    return f"{what}: {shown.value:.4g} {shown.unit} ({shown.metric})"


def cannot_run(entry: EnvironmentEntry, why: str, others: int = 0) -> str:
    """The refusal of a run whose environment `entry` (not optional) cannot run here: one
    line, with the fix."""
    more = f" (and {others} more environment(s) unavailable)" if others else ""
    return (f"refused: environment {entry.name!r} ({entry.kind}) cannot run here: {why}{more}; "
            "fix that, or mark it optional = true in the plan to run without it")
