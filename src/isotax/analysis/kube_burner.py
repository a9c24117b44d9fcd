"""A run's pod start-ups in kube-burner's podLatency format, so that the dashboards and scripts
its users already have read isotax's numbers: `isotax export RUN --format kube-burner`.

kube-burner writes two kinds of document (pkg/measurements/pod_latency.go, metrics.go):

- `podLatencyMeasurement`, one per pod: each condition's latency in whole ms from the pod's
  creationTimestamp to the condition's lastTransitionTime (the API's own times, whole seconds:
  kube-burner's "API-based" latencies), and the same from its watch (float ms, its
  "client-side high-precision" ones: `client*Latency`);
- `podLatencyQuantilesMeasurement`, one per condition and job: P50, P95, P99, max and avg in
  whole ms over the job's pods, by nearest rank, named after the condition (PodScheduled,
  PodReadyToStartContainers, Initialized, ContainersReady, Ready; the client-side ones
  ClientPodScheduled, ...).

Here a job is one cell of the `pod_startup` workload on a pod environment (jobName
"ENVIRONMENT pod_startup POINT", jobIteration its repetition, replica the pod's place in the
cell, uuid the run's id). The client-side latencies are isotax's: from the moment each pod's
create request was sent (kube-burner's from its ADDED event: a few ms later). A start is a
pod's when the platform gave it an API creation time; the others (a bare runc container,
native) have no conditions to export: their starts are in results.json and the CSV exports.
Pure: cells in, documents out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from isotax.model import CellStatus
from isotax.parsers.pod_events import rfc3339
from isotax.plan import read_stored_plan
from isotax.store.base import CellRecord
from isotax.workloads.pod_startup import PodStartup, nearest_rank

POD_DOC = "podLatencyMeasurement"
QUANTILES_DOC = "podLatencyQuantilesMeasurement"
# kube-burner's per-pod latency field, its quantile name, and the phase it ends at (isotax's
# parsers.pod_events names); the same for the client-side high-precision ones.
CONDITIONS = (
    ("schedulingLatency", "PodScheduled", "scheduled"),
    ("readyToStartContainersLatency", "PodReadyToStartContainers", "sandbox_ready"),
    ("initializedLatency", "Initialized", "initialized"),
    ("containersReadyLatency", "ContainersReady", "containers_ready"),
    ("podReadyLatency", "Ready", "ready"),
)
CLIENT = (
    ("clientSchedulingLatency", "ClientPodScheduled", "scheduled"),
    ("clientReadyToStartContainersLatency", "ClientPodReadyToStartContainers", "sandbox_ready"),
    ("clientInitializedLatency", "ClientPodInitialized", "initialized"),
    ("clientContainersReadyLatency", "ClientContainersReady", "containers_ready"),
    ("clientPodReadyLatency", "ClientPodReady", "ready"),
)
# Newer kube-burner also counts to the container's startedAt (the SLO's end point).
STARTED = ("containersStartedLatency", "ContainersStarted", "started")


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="microseconds") \
        .replace("+00:00", "Z")


def _api_ms(api: Mapping[str, str], phase: str) -> int:
    """Whole ms from creationTimestamp to the phase's API time, 0 where it is earlier or
    unknown (kube-burner's rule for its second-granular timestamps)."""
    if not api.get(phase) or not api.get("created"):
        return 0
    return max(0, round((rfc3339(api[phase]) - rfc3339(api["created"])) * 1000))


def _pod_doc(run_id: str, job: str, iteration: int, replica: int,
             start: Mapping[str, Any], metadata: Mapping[str, Any]) -> dict[str, Any]:
    api, ms = start.get("api", {}), start.get("ms", {})
    doc: dict[str, Any] = {
        "timestamp": _iso(float(start["requested_at"])), "metricName": POD_DOC,
        "uuid": run_id, "jobName": job, "jobIteration": iteration, "replica": replica,
        "namespace": start.get("namespace", ""), "podName": start["name"],
        "nodeName": start.get("node", ""), "metadata": dict(metadata)}
    for field, _, phase in (*CONDITIONS, STARTED):
        doc[field] = _api_ms(api, phase)
    for field, _, phase in CLIENT:
        if phase in ms:
            doc[field] = float(ms[phase])
    return doc


def _quantiles(run_id: str, job: str, name: str, values: Sequence[float], at: str,
               metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {"quantileName": name, "uuid": run_id, "P99": round(nearest_rank(values, 99)),
            "P95": round(nearest_rank(values, 95)), "P50": round(nearest_rank(values, 50)),
            "max": round(max(values)), "avg": round(sum(values) / len(values)),
            "timestamp": at, "metricName": QUANTILES_DOC, "jobName": job,
            "metadata": dict(metadata)}


def runtime_classes(plan_toml: str) -> dict[str, str]:
    """Each environment of a stored plan -> its options.runtime_class ("" where none)."""
    return {str(e.get("name", "")): str((e.get("options") or {}).get("runtime_class", ""))
            for e in read_stored_plan(plan_toml).environments}


def documents(run_id: str, cells: Iterable[CellRecord], plan_toml: str
              ) -> list[dict[str, Any]]:
    """The run's pod_startup cells whose starts are pods' as kube-burner's documents."""
    classes = runtime_classes(plan_toml)
    out: list[dict[str, Any]] = []
    for cell in cells:
        k = cell.key
        if k.workload != PodStartup.name or k.warmup or cell.status is not CellStatus.OK:
            continue
        head = next((s for s in cell.samples if s.metric == PodStartup.headline), None)
        starts = head.labels.get("per_start", []) if head is not None else []
        if not starts or not all(s.get("api", {}).get("created") for s in starts):
            continue
        job = f"{k.environment} {PodStartup.name} {k.params_key}"
        meta = {"environment": k.environment, "runtimeClass": classes.get(k.environment, ""),
                "params": dict(k.params), "source": "isotax"}
        docs = [_pod_doc(run_id, job, k.repetition, i + 1, s, meta)
                for i, s in enumerate(starts)]
        out += docs
        at = _iso(cell.ended)
        for field, name, _ in (*CONDITIONS, STARTED, *CLIENT):
            values = [float(d[field]) for d in docs if field in d]
            if len(values) == len(docs):
                out.append(_quantiles(run_id, job, name, values, at, meta))
    return out
