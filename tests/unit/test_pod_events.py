"""The pod start-up parsers (parsers.pod_events) on a real watch of three pods (two runc, one
gVisor) on the local cluster, and the node's crictl output for them; and the pod_startup
workload's statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from isotax.model import SanityError
from isotax.parsers.pod_events import cri_times, pod_times, rfc3339
from isotax.protocols import StartRecord
from isotax.workloads.pod_startup import nearest_rank, summarize

DATA = Path(__file__).parent.parent / "data" / "kubernetes"


def _capture() -> tuple[dict[str, tuple[float, float]], list[tuple[float, dict]]]:  # type: ignore[type-arg]
    rows = [json.loads(x) for x in (DATA / "pod-watch-runc-gvisor.jsonl").read_text().splitlines()]
    posted = {r["posted"]: (r["t"], r["wall"]) for r in rows if "posted" in r}
    return posted, [(r["t"], r["event"]) for r in rows if "event" in r]


def test_each_pods_phases_from_the_watch_in_the_order_a_pod_passes_them() -> None:
    posted, events = _capture()
    pods = pod_times(events)
    assert sorted(pods) == sorted(posted) == ["itx-start-0", "itx-start-1", "itx-start-2"]
    for name, p in pods.items():
        t0 = posted[name][0]
        ms = {k: (v - t0) * 1000 for k, v in p.seen.items()}
        assert set(ms) == {"created", "scheduled", "sandbox_ready", "initialized", "started",
                           "containers_ready", "ready"}
        assert 0 < ms["created"] < ms["scheduled"] < ms["sandbox_ready"] < ms["started"]
        assert ms["started"] <= ms["ready"]
        # No init containers: the kubelet says Initialized before the sandbox is up.
        assert ms["initialized"] < ms["sandbox_ready"]
        assert p.node == "itx-node1" and p.uid and not p.failed
        # The API's own times are whole seconds.
        assert p.api["created"] == "2026-11-29T23:23:03Z"
        assert set(p.api) == set(p.seen)


def test_the_nodes_cri_times_fall_between_the_request_and_the_watch() -> None:
    posted, events = _capture()
    pods = pod_times(events)
    cri = cri_times((DATA / "crictl-inspectp.json").read_text(),
                    (DATA / "crictl-inspect.json").read_text())
    assert set(cri) == {p.uid for p in pods.values()}
    for name, p in pods.items():
        t0, wall = posted[name]
        c = cri[p.uid]
        assert wall < c.sandbox_created < c.container_created < c.container_started
        # The container started before the watch showed it (the kubelet reports after).
        assert c.container_started - wall < p.seen["started"] - t0


def test_a_refusal_that_waiting_will_not_mend_is_the_pods_failure() -> None:
    _, events = _capture()
    t, ev = events[-1]
    broken = json.loads(json.dumps(ev))
    name = broken["object"]["metadata"]["name"]
    for s in broken["object"]["status"]["containerStatuses"]:
        s["state"] = {"waiting": {"reason": "ErrImageNeverPull", "message": "not present"}}
    pods = pod_times([*events[:1], (t, broken)])
    assert pods[name].failed.startswith("ErrImageNeverPull")


def test_not_a_watch_event_is_refused() -> None:
    with pytest.raises(ValueError, match="not a watch event"):
        pod_times([(0.0, {"kind": "Pod"})])
    with pytest.raises(ValueError, match="not crictl inspectp"):
        cri_times('[{"info": {}}]', "[]")


def test_rfc3339_keeps_microseconds() -> None:
    assert rfc3339("2026-11-29T23:23:03.43320824Z") - rfc3339("2026-11-29T23:23:03Z") \
        == pytest.approx(0.433208, abs=1e-6)


def test_percentiles_are_nearest_rank_as_kube_burner_computes_them() -> None:
    values = [float(v) for v in range(1, 11)]
    assert nearest_rank(values, 99) == 10  # of ten starts the p99 is the slowest
    assert nearest_rank(values, 50) == 5
    recs = [StartRecord(f"s{i}", {"created": 0.001, "started": v / 1000}) for i, v in
            enumerate(values)]
    s = summarize(recs)
    assert s["started"] == {"p50": 5.0, "p99": 10.0, "max": 10.0}
    assert set(s) == {"created", "started"}


def test_a_start_without_started_or_before_its_request_is_no_result() -> None:
    with pytest.raises(SanityError, match="no `started`"):
        summarize([StartRecord("a", {"created": 0.1})])
    with pytest.raises(SanityError, match="before its request"):
        summarize([StartRecord("a", {"started": -0.5})])
