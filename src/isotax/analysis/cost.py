"""What a unit of work costs in CPU, split into the work done in the environment and the
hidden work the host did for it.

From one measured run's telemetry summary (isotax.telemetry.observe):
  inside   CPU seconds the environment itself accounted: its cgroup (native, containers) or
           the guest's own /proc/stat (VM, gVisor);
  loadgen  the load generator's clients (their own group): the studies' "other machine",
           reported beside the cost, never in it;
  hidden   everything else the host spent while the run ran: host-wide busy time (/proc/stat)
           minus inside, the load generator, isotax itself and other tenants' processes.
           That is QEMU's device emulation and TCG translation, gVisor's Sentry and Gofer
           beyond the guest's own work, an engine's shim and proxy, and the kernel's work
           outside any of its processes (softirq in a bridge and NAT, ksoftirqd, kworkers).
           The kernel's share is the same machinery natively (a native run has hidden cost
           too: the network stack's softirq), so compare it across environments.
Each is divided by the run's work (isotax.workloads.work: GB, request, transaction, I/O, one run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from isotax.telemetry.summary import TelemetrySummary


@dataclass(frozen=True)
class Cost:
    """CPU seconds per unit of work of one run."""

    unit: str
    inside: float
    hidden: float
    loadgen: float | None  # None: the run had no load generator

    @property
    def total(self) -> float:
        """What the environment cost the host per unit: its own work and the hidden work."""
        return self.inside + self.hidden


def split(summary: TelemetrySummary) -> Cost | None:
    """The cost per unit of work of one run; None when its telemetry lacks the parts. Pure."""
    work, groups = summary.work, summary.groups
    if work is None or summary.inside is None or "other" not in groups \
            or "isotax" not in groups:
        return None
    amount = float(work.amount)
    inside = float(summary.inside.cpu_s)
    busy = float(summary.host_cpu_s.busy)
    foreign = float(groups["other"].cpu_s) + float(groups["isotax"].cpu_s)
    if amount <= 0:
        return None
    lg_s = float(summary.loadgen.cpu_s) if summary.loadgen is not None else None
    hidden = max(0.0, busy - inside - (lg_s or 0.0) - foreign)
    return Cost(str(work.unit), inside / amount, hidden / amount,
                None if lg_s is None else lg_s / amount)


@dataclass(frozen=True)
class CostSummary:
    """Means over the repetitions of one point in one environment."""

    unit: str
    n: int
    inside: float
    hidden: float
    total: float
    total_sd: float
    loadgen: float | None


def summarize(costs: Sequence[Cost]) -> CostSummary | None:
    """Mean per-unit costs over repetitions (all in one unit); None for none. Pure."""
    if not costs:
        return None
    n = len(costs)
    totals = [c.total for c in costs]
    mean_total = sum(totals) / n
    sd = (sum((t - mean_total) ** 2 for t in totals) / (n - 1)) ** 0.5 if n > 1 else 0.0
    lgs = [c.loadgen for c in costs if c.loadgen is not None]
    return CostSummary(costs[0].unit, n, sum(c.inside for c in costs) / n,
                       sum(c.hidden for c in costs) / n, mean_total, sd,
                       sum(lgs) / len(lgs) if lgs else None)


_SCALES = ((1.0, "CPU-s"), (1e-3, "CPU-ms"), (1e-6, "CPU-µs"), (1e-9, "CPU-ns"))


def scale_for(values: Sequence[float]) -> tuple[float, str]:
    """A unit that shows the largest of values with 1-3 digits before the point. Pure."""
    top = max((abs(v) for v in values), default=0.0)
    for factor, name in _SCALES:
        if top >= factor:
            return factor, name
    return _SCALES[-1]
