"""A pod's start-up as the Kubernetes API and the node's CRI tell it. Pure: events in, times out.

Two sources, each parsed here and only here:

  the API's watch       pod_times    per pod, the moment (the watcher's clock) each phase was
  (GET .../pods?watch=1,             first seen, and the API's own timestamps for it (RFC 3339,
  one JSON event a line)             whole seconds: the kubelet drops the fraction)
  crictl inspectp /     cri_times    per pod UID, the node's nanosecond times of the sandbox's
  crictl inspect (JSON)              creation and the container's create and start

The phases, in the order a pod passes them (kube-burner's podLatency conditions, and the
container's start, which the Kubernetes start-up SLO counts to):

  created        the ADDED event: the API server stored the pod
  scheduled      PodScheduled True: the scheduler bound it to a node
  sandbox_ready  PodReadyToStartContainers True: the runtime's sandbox runs and the CNI gave it
                 its network (the kubelet sets it after RunPodSandbox returns)
  initialized    Initialized True: the init containers are done (none here: the kubelet says
                 so as soon as it sees the pod, often before the sandbox)
  started        every container's state running: "all its containers reported as started",
                 the SLO's end point
  containers_ready  ContainersReady True (no readiness probe: with started)
  ready          Ready True (no readiness probe: the kubelet's next status after started)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# Condition type -> phase name.
CONDITIONS = {"PodScheduled": "scheduled", "PodReadyToStartContainers": "sandbox_ready",
              "Initialized": "initialized", "ContainersReady": "containers_ready",
              "Ready": "ready"}
PHASES = ("created", "scheduled", "sandbox_ready", "initialized", "started",
          "containers_ready", "ready")


@dataclass
class PodTimes:
    """One pod's start-up as its watch showed it."""

    name: str
    uid: str = ""
    node: str = ""
    # Phase -> the watcher's clock (its own monotonic seconds) when the phase was first seen.
    seen: dict[str, float] = field(default_factory=dict)
    # The API's own times: "created" (creationTimestamp), each phase whose condition says
    # when it became true, and "started" (the container's startedAt); RFC 3339 text.
    api: dict[str, str] = field(default_factory=dict)
    failed: str = ""  # why it will never start, in the pod's words ("" while it may)


def _all_running(status: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether every container runs, and the latest startedAt among them."""
    statuses = status.get("containerStatuses") or []
    if not statuses:
        return False, ""
    started = [s.get("state", {}).get("running", {}).get("startedAt") for s in statuses]
    if not all(started):
        return False, ""
    return True, max(str(s) for s in started)


def _failure(status: Mapping[str, Any]) -> str:
    """A reason the pod will not start that waiting does not mend, else ""."""
    if status.get("phase") == "Failed":
        return f"phase Failed: {status.get('reason') or status.get('message') or '?'}"
    for s in status.get("containerStatuses") or []:
        waiting = s.get("state", {}).get("waiting", {})
        if waiting.get("reason") in ("ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff",
                                     "CreateContainerError", "InvalidImageName"):
            return f"{waiting['reason']}: {waiting.get('message', '')}"[:300]
        if "terminated" in s.get("state", {}):
            t = s["state"]["terminated"]
            return f"its container exited ({t.get('reason', '?')}, code {t.get('exitCode')})"
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable":
            return f"Unschedulable: {c.get('message', '')}"[:300]
    return ""


def pod_times(events: Iterable[tuple[float, Mapping[str, Any]]]) -> dict[str, PodTimes]:
    """Per pod name, its phases from a watch's events, each given with the moment the watcher
    read it. A phase counts from the first event that shows it; events after DELETED are
    ignored. ValueError for an event that is not a pod watch event."""
    out: dict[str, PodTimes] = {}
    for t, ev in events:
        kind = ev.get("type")
        obj = ev.get("object")
        if kind not in ("ADDED", "MODIFIED", "DELETED", "ERROR", "BOOKMARK") \
                or not isinstance(obj, Mapping):
            raise ValueError(f"not a watch event: {json.dumps(ev)[:120]}")
        if kind == "ERROR":
            raise ValueError(f"the watch ended with an error: {obj.get('message', obj)}")
        if kind == "BOOKMARK" or obj.get("kind", "Pod") != "Pod":
            continue
        meta = obj.get("metadata", {})
        name = str(meta.get("name", ""))
        pod = out.setdefault(name, PodTimes(name))
        if kind == "DELETED" or "deleted" in pod.seen:
            pod.seen.setdefault("deleted", t)
            continue
        pod.uid = str(meta.get("uid", pod.uid))
        pod.seen.setdefault("created", t)
        pod.api.setdefault("created", str(meta.get("creationTimestamp", "")))
        spec, status = obj.get("spec", {}), obj.get("status", {})
        pod.node = str(spec.get("nodeName") or pod.node)
        for c in status.get("conditions") or []:
            phase = CONDITIONS.get(str(c.get("type")))
            if phase and c.get("status") == "True" and phase not in pod.seen:
                pod.seen[phase] = t
                pod.api[phase] = str(c.get("lastTransitionTime", ""))
        running, started_at = _all_running(status)
        if running and "started" not in pod.seen:
            pod.seen["started"] = t
            pod.api["started"] = started_at
        pod.failed = pod.failed or _failure(status)
    return out


def read_watch_lines(lines: Iterable[str | bytes]) -> list[Mapping[str, Any]]:
    """The events of a watch's response body, one JSON object a line."""
    return [json.loads(line) for line in lines if line.strip()]


def rfc3339(text: str) -> float:
    """Seconds since the epoch of an RFC 3339 time with up to nanoseconds (Python's parser
    takes microseconds: the rest is dropped)."""
    text = text.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    if "." in text:
        head, rest = text.split(".", 1)
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits):]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    return datetime.fromisoformat(text).timestamp()


@dataclass(frozen=True)
class CriTimes:
    """What a pod's node's CRI says of its start, seconds since the epoch (0: not said)."""

    sandbox_created: float = 0.0  # RunPodSandbox began (before the CNI)
    container_created: float = 0.0  # CreateContainer
    container_started: float = 0.0  # StartContainer returned


def _docs(text: str) -> list[Mapping[str, Any]]:
    """crictl's -o json output: one object for one id, a list for several."""
    doc = json.loads(text) if text.strip() else []
    return doc if isinstance(doc, list) else [doc]


def cri_times(inspectp: str, inspect: str) -> dict[str, CriTimes]:
    """Per pod UID, from `crictl inspectp ID...` and `crictl inspect ID...` (JSON): the
    sandbox's creation, its (last) container's create and start. ValueError where the text is
    not crictl's."""
    sandboxes: dict[str, float] = {}
    for d in _docs(inspectp):
        st = d.get("status")
        if not isinstance(st, Mapping) or "metadata" not in st:
            raise ValueError("not crictl inspectp output: no status.metadata")
        sandboxes[str(st["metadata"].get("uid", ""))] = rfc3339(str(st.get("createdAt", "")))
    containers: dict[str, tuple[float, float]] = {}
    for d in _docs(inspect):
        st = d.get("status")
        if not isinstance(st, Mapping) or "labels" not in st:
            raise ValueError("not crictl inspect output: no status.labels")
        uid = str(st["labels"].get("io.kubernetes.pod.uid", ""))
        started = str(st.get("startedAt", ""))
        containers[uid] = (rfc3339(str(st.get("createdAt", ""))),
                           rfc3339(started) if started and not started.startswith("1970")
                           else 0.0)
    return {uid: CriTimes(sandboxes.get(uid, 0.0), *containers.get(uid, (0.0, 0.0)))
            for uid in set(sandboxes) | set(containers)}
