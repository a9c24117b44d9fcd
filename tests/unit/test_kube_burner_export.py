"""`isotax export --format kube-burner`: a real watch of three pods (tests/data/kubernetes),
made into records as the pod kind's burst makes them, summarized by the pod_startup workload,
stored as a cell and exported; read back against kube-burner's published field names (the JSON
tags of its podMetric and LatencyQuantiles, pkg/measurements)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from isotax.analysis.kube_burner import documents
from isotax.environments.kube.starts import PodBurst
from isotax.model import CellKey, CellStatus
from isotax.parsers.pod_events import cri_times, pod_times
from isotax.store.base import CellRecord
from isotax.workloads.pod_startup import PodStartup

DATA = Path(__file__).parent.parent / "data" / "kubernetes"
# kube-burner's podLatencyMeasurement document (pod_latency.go's podMetric, JSON tags).
POD_FIELDS = {"timestamp", "schedulingLatency", "initializedLatency", "containersReadyLatency",
              "podReadyLatency", "readyToStartContainersLatency", "containersStartedLatency",
              "metricName", "uuid", "jobName", "jobIteration", "replica", "namespace",
              "podName", "nodeName", "metadata", "clientSchedulingLatency",
              "clientInitializedLatency", "clientContainersReadyLatency",
              "clientPodReadyLatency", "clientReadyToStartContainersLatency"}
# Its podLatencyQuantilesMeasurement document (metrics.go's LatencyQuantiles).
QUANTILE_FIELDS = {"quantileName", "uuid", "P99", "P95", "P50", "max", "avg", "timestamp",
                   "metricName", "jobName", "metadata"}
QUANTILE_NAMES = {"PodScheduled", "PodReadyToStartContainers", "Initialized",
                  "ContainersReady", "Ready", "ContainersStarted", "ClientPodScheduled",
                  "ClientPodReadyToStartContainers", "ClientPodInitialized",
                  "ClientContainersReady", "ClientPodReady"}
PLAN = '''name = "t"
[[environments]]
name = "pod-gvisor"
kind = "pod"
options = { runtime_class = "gvisor" }
'''


def _cell(tmp_path: Path) -> CellRecord:
    rows = [json.loads(x) for x in
            (DATA / "pod-watch-runc-gvisor.jsonl").read_text().splitlines()]
    burst = PodBurst(SimpleNamespace(namespace="itx-pod-capture"), tmp_path)  # type: ignore[arg-type]
    burst.requested = {r["posted"]: (r["t"], r["wall"]) for r in rows if "posted" in r}
    seen = pod_times((r["t"], r["event"]) for r in rows if "event" in r)
    cri = cri_times((DATA / "crictl-inspectp.json").read_text(),
                    (DATA / "crictl-inspect.json").read_text())
    records = [burst._record(seen[n], cri[seen[n].uid]) for n in sorted(burst.requested)]
    params = {"pods": 3, "rate": 0.0, "running": 0, "timeout_s": 300.0}
    samples = PodStartup._samples(records, params, burst.source)
    return CellRecord(1, CellKey("pod-gvisor", "pod_startup", params, 2), "1", CellStatus.OK,
                      "", 0.0, 1796000000.0, samples)


def test_the_export_reads_back_with_kube_burners_field_names(tmp_path: Path) -> None:
    docs = json.loads(json.dumps(documents("run-1", [_cell(tmp_path)], PLAN)))
    pods = [d for d in docs if d["metricName"] == "podLatencyMeasurement"]
    quantiles = [d for d in docs if d["metricName"] == "podLatencyQuantilesMeasurement"]
    assert len(pods) == 3 and len(pods) + len(quantiles) == len(docs)
    for d in pods:
        assert set(d) == POD_FIELDS
        assert d["uuid"] == "run-1" and d["jobIteration"] == 2
        assert d["namespace"] == "itx-pod-capture" and d["nodeName"] == "itx-node1"
        assert d["metadata"]["runtimeClass"] == "gvisor"
        # The API's times are whole seconds; the watch's are finer and in order.
        assert all(d[f] % 1000 == 0 for f in ("schedulingLatency", "podReadyLatency"))
        assert 0 < d["clientSchedulingLatency"] < d["clientReadyToStartContainersLatency"] \
            < d["clientPodReadyLatency"]
    assert sorted(d["replica"] for d in pods) == [1, 2, 3]
    assert {d["quantileName"] for d in quantiles} == QUANTILE_NAMES
    for q in quantiles:
        assert set(q) == QUANTILE_FIELDS
        assert q["P50"] <= q["P95"] <= q["P99"] <= q["max"]
    ready = next(q for q in quantiles if q["quantileName"] == "ClientPodReady")
    assert ready["max"] == round(max(d["clientPodReadyLatency"] for d in pods))


def test_starts_without_the_apis_times_are_not_exported(tmp_path: Path) -> None:
    cell = _cell(tmp_path)
    head = cell.samples[0]
    bare = [{**s, "api": {}} for s in head.labels["per_start"]]
    samples = [type(head)(head.metric, head.value, head.unit, head.higher_is_better,
                          {**head.labels, "per_start": bare}), *cell.samples[1:]]
    other = CellRecord(2, cell.key, "1", CellStatus.OK, "", 0.0, 0.0, samples)
    assert documents("run-1", [other], PLAN) == []
