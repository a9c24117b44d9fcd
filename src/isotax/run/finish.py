"""Finishing a measured cell: what the runner adds once a workload has returned its samples, in
one place for every path (a workload run in the runner's long-lived instance, and one that
launches instances of its own).

  - the CPU the instance's own host processes used (telemetry.envcpu's sample), where the
    runner measured it (not for a launching workload: its fresh instances are gone);
  - the share of the cell's memory allocations that were node-local, as a label on every
    sample, on a host with more than one NUMA node;
  - the run's work (workloads.work) on the telemetry summary, where the run was watched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from isotax.model import Sample
from isotax.protocols import AnyWorkload, Params
from isotax.telemetry.observe import Observation
from isotax.telemetry.summary import TelemetrySummary
from isotax.workloads import work

NUMA_LABEL = "numa_local_share"


@dataclass(frozen=True)
class Finished:
    """A measured cell's results as the store commits them."""

    samples: tuple[Sample, ...]
    # (summary, per-tick series) when the run was watched and its telemetry summarised
    telemetry: tuple[TelemetrySummary, Mapping[str, Any]] | None


def finish_cell(workload: AnyWorkload, params: Params, samples: Sequence[Sample],
                env_cpu: Sample | None, numa_share: float | None,
                observation: Observation | None, runs: int = 1) -> Finished:
    """The cell's samples with the runner's own (env_cpu appended; every sample labelled with
    the node-local share, where there is one), and its telemetry summary with the run's work.
    Pure: what it adds was measured by the caller. `runs`: how many runs of the workload the
    cell held (isotax.analysis.cell_length); the telemetry's work counts them all."""
    out = [*samples, *([env_cpu] if env_cpu is not None else [])]
    telemetry = None
    if observation is not None and observation.summary is not None:
        # The telemetry watched all `runs` runs of the cell; its samples are one run's mean.
        one = work.done(workload, params, out)
        summary = replace(observation.summary, work=replace(one, amount=one.amount * runs))
        telemetry = (summary, observation.series)
    if numa_share is not None:
        out = [replace(s, labels={**s.labels, NUMA_LABEL: round(numa_share, 4)}) for s in out]
    return Finished(tuple(out), telemetry)
