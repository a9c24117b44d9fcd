"""pod_startup: starts measured the way Kubernetes users measure them: many instances, one at a
time or in a burst at a rate, with `running` idle ones already there, and each phase's p50, p99
and maximum over them (kube-burner's podLatency; ClusterLoader2's pod start-up SLO, "p99 ≤ 5 s,
image pull excluded", is judged on `started_p99_ms` by the built-in claims).

Every environment gets the same requests through its Launcher's Burst (protocols.starts):

- a pod (the pod kind's own Burst, environments.kube.starts): phases from the API's watch and
  the node's CRI, from each pod's create request: created, scheduled, sandbox_ready (the CNI
  done), initialized, started (every container running: the SLO's end point), ready; and
  cri_sandbox, cri_created, cri_started where the node's containerd is this host's;
- a bare container (runc, crun), a VM, a process natively: one start() each, from threads at
  the rate, with the runtime's milestones (create, started, first_instruction, ready).

`started` is in every one of them: the runtime says the process runs. So the pod against the
bare container of the same runtime is what Kubernetes adds (the API, the scheduler, the
kubelet's sandbox and CNI), and the bare container against native is what the runtime adds.

Percentiles are nearest-rank, as kube-burner computes them: of 10 starts the p99 is the
slowest. Image pull is never in them: every environment starts from the image already on its
host (the pod's imagePullPolicy is Never on the local cluster; a foreign one pulled it for the
environment's own pod before this cell).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from isotax.model import Sample, SanityError
from isotax.protocols import (
    PHASES,
    FigureHints,
    Instance,
    Launcher,
    LoadGen,
    Params,
    ParamSpec,
    Port,
    StartRecord,
)
from isotax.workloads.base import BaseWorkload, register, starts_not_behind_a_service

# Every phase any environment reports, in the order a start passes them: a bare runtime's
# milestones (protocols.PHASES: create, started, first_instruction, ready) among a pod's
# (parsers.pod_events) and its node's CRI's; a cell reports those all its starts have.
ORDER = ("create", "created", "scheduled", "cri_sandbox", "sandbox_ready", "initialized",
         "cri_created", "cri_started", "started", "first_instruction", "containers_ready",
         "ready")
assert set(PHASES) <= set(ORDER)
STATISTICS = (("ms", "p50"), ("p99_ms", "p99"), ("max_ms", "max"))


def nearest_rank(values: Sequence[float], q: float) -> float:
    """The q-th percentile by nearest rank, as kube-burner computes it: the sorted values'
    element ceil(n·q/100) - 1. Pure."""
    v = sorted(values)
    return float(v[max(0, math.ceil(len(v) * q / 100) - 1)])


def summarize(records: Sequence[StartRecord]) -> dict[str, dict[str, float]]:
    """Per phase that every record has: p50, p99 and max in ms. Pure."""
    if not records:
        raise SanityError("no start was recorded")
    out: dict[str, dict[str, float]] = {}
    for phase in ORDER:
        if not all(phase in r.phases for r in records):
            continue
        ms = [r.phases[phase] * 1000 for r in records]
        if any(v < 0 for v in ms):
            raise SanityError(f"phase {phase} before its request ({min(ms):.1f} ms): the "
                              "clocks disagree")
        out[phase] = {"p50": nearest_rank(ms, 50), "p99": nearest_rank(ms, 99),
                      "max": max(ms)}
    if "started" not in out:
        raise SanityError("the starts recorded no `started` phase")
    return out


def record_label(r: StartRecord) -> dict[str, Any]:
    """One start as the sample labels keep it (the kube-burner export reads it back)."""
    return {"name": r.name, "node": r.node, "namespace": r.namespace,
            "requested_at": round(r.requested_at, 6),
            "ms": {k: round(v * 1000, 3) for k, v in r.phases.items()}, "api": dict(r.api)}


@register
class PodStartup(BaseWorkload):
    name: ClassVar[str] = "pod_startup"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ("many starts, one at a time or in a burst at a rate, with "
                                  "some already running: each phase's p50/p99/max (a pod's "
                                  "from the API's watch and its node's CRI)")
    params: ClassVar[Sequence[ParamSpec]] = (
        ParamSpec("pods", int, 10, "starts timed per cell", minimum=1, maximum=200),
        ParamSpec("rate", float, 0.0, "create requests a second; 0: one at a time, each once "
                  "the one before it has started", minimum=0),
        ParamSpec("running", int, 0, "idle instances started (and not timed) before the "
                  "timed ones, and left running beside them", minimum=0, maximum=200),
        ParamSpec("timeout_s", float, 300.0, "longest wait for a cell's starts", minimum=1),
    )
    tools: ClassVar[Mapping[str, Sequence[str]]] = {}
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[Mapping[str, Port]] = {}
    packages: ClassVar[Sequence[str]] = ()
    figures: ClassVar[FigureHints] = FigureHints(phases=ORDER, tail="p99", milestones=ORDER)
    # The typical start, for the ratios; the p99 is the SLO's (claims) and in the tables.
    headline: ClassVar[str] = "started_ms"

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str]:
        return float(params["pods"]), "start"

    def needs_network(self, params: Params) -> bool:
        return False

    def not_applicable(self, inst: Instance, params: Params) -> str | None:
        return starts_not_behind_a_service(inst)

    def launch_and_measure(self, launcher: Launcher, params: Params,
                           loadgen: LoadGen | None) -> list[Sample]:
        pods, rate = int(params["pods"]), float(params["rate"])
        running, timeout = int(params["running"]), float(params["timeout_s"])
        burst = launcher.burst()
        if running:
            burst.start(running, max(rate, 10.0), timeout)
        records = burst.start(pods, rate, timeout)
        return self._samples(records, params, burst.source)

    @staticmethod
    def _samples(records: Sequence[StartRecord], params: Params, source: str) -> list[Sample]:
        stats = summarize(records)
        labels: dict[str, Any] = {
            "starts": len(records), "rate": float(params["rate"]),
            "running": int(params["running"]), "source": source,
            "statistic": "nearest-rank percentiles over the cell's starts"}
        per_start = [record_label(r) for r in records]
        out = []
        for phase, by in stats.items():
            for suffix, stat in STATISTICS:
                metric = f"{phase}_{suffix}"
                # Each start's phases once, on the headline (the exports read them there).
                extra = {"per_start": per_start} if metric == "started_ms" else {}
                out.append(Sample(metric, by[stat], "ms", False, {**labels, **extra}))
        # The headline first: the runner's chase and the report read it there.
        out.sort(key=lambda s: s.metric != "started_ms")
        return out
