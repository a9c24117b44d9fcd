"""What isotax's pods (the `pod` environment's, the load generator's) say to the run's
cluster, through kubectl on its kubeconfig (host.kubernetes.target: the local cluster, or the
one --kubeconfig names): exec and its failures, an API server that stopped answering, a pod's
own words for where it is and the waits for it to run, isotax's namespaces and what is left of
them, what an account may do on a cluster isotax did not start; and the pure readers of what
the nodes say (ctr, iptables-save, EndpointSlices, dpkg-query)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from isotax.environments.base import READY_HELPER, READY_MARKER
from isotax.environments.runtime_cli import timed_exit_status, under_timeout
from isotax.host import command, owners
from isotax.host.kubernetes import cluster, target
from isotax.host.kubernetes import layout as L
from isotax.protocols import (
    Availability,
    Completed,
    Leftover,
    PlatformLost,
    Stage,
    Unavailable,
)

CONTAINER = "workload"  # the one container of each of isotax's pods


# A waiting pod's reasons that waiting will not mend: it fails now, in its own words.
HOPELESS = ("ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
            "RuntimeClass", "Unschedulable", "CreateContainerError")


def kubectl(*args: str, timeout: float = 60, input_text: str | None = None) -> Completed:
    """kubectl on the run's cluster (host.kubernetes.target: the local one, or --kubeconfig's)."""
    return target.current().kubectl(*args, timeout=timeout, input_text=input_text)


def namespace_manifest(name: str) -> dict[str, Any]:
    """A namespace of isotax's, labelled isotax and with the run that made it (where the
    process names one), so a cluster's owner sees whose it is."""
    labels = {"isotax": "1"}
    run = re.sub(r"[^A-Za-z0-9_.-]", "-", owners.my_run())[:63].strip("-_.")
    if run:
        labels["isotax.run"] = run
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {"isotax.owner": owners.mine()}}}


def exec_argv(namespace: str, argv: Sequence[str], timeout: float, pod: str) -> list[str]:
    """`kubectl exec` arguments: the program under `timeout` inside the pod. Pure."""
    return ["exec", "-n", namespace, pod, "-c", CONTAINER, "--",
            *under_timeout(argv, timeout)]


def kubectl_failed(done: Completed) -> str:
    """kubectl's own words where `kubectl exec` itself failed (the API server or the kubelet
    unreachable, the pod gone), "" where it ran the program (whatever that returned) or
    timed out. Pure."""
    if done.returncode in (0, command.TIMED_OUT) or re.search(
            r"command terminated with exit code \d+\s*$", done.stderr):
        return ""
    lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
    return lines[-1][:240] if lines else f"kubectl exited {done.returncode}"


def api_unreachable() -> str:
    """kubectl's words when the cluster's API server does not answer (its /readyz), "" when
    it does."""
    done = kubectl("get", "--raw", "/readyz", "--request-timeout=10s", timeout=20)
    if done.returncode == 0:
        return ""
    return kubectl_failed(done) or f"/readyz: {done.stdout.strip()[-200:]}"


def lost(why: str) -> PlatformLost:
    return PlatformLost(f"the Kubernetes API server of {target.current().words()} does not "
                        f"answer: {why}")


def image_differs(want: Mapping[str, str], dpkg_query: str) -> list[str]:
    """The packages whose version inside a pod (`dpkg-query -W` output, "name version" per
    line) differs from the workload image's, in words; [] when the bits are the same. Pure."""
    have = dict(line.split(None, 1) for line in dpkg_query.splitlines() if " " in line.strip())
    return [f"{name} {have.get(name, 'missing')} (the image has {version})"
            for name, version in sorted(want.items()) if have.get(name, "").strip() != version]


def endpoint_ready(slices: Mapping[str, Any], pod_ip: str) -> bool:
    """Whether an EndpointSliceList has the pod's address as a ready endpoint. Pure."""
    for item in slices.get("items", []) or []:
        for ep in item.get("endpoints", []) or []:
            if pod_ip in ep.get("addresses", []) and (ep.get("conditions") or {}).get("ready"):
                return True
    return False


def task_status(ctr_tasks_ls: str, container_id: str) -> str:
    """A container's task status in `ctr tasks ls` output (RUNNING, PAUSED, STOPPED, ...);
    "" when it has no task (its processes are gone). Pure."""
    for line in ctr_tasks_ls.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == container_id:
            return parts[2]
    return ""


def exec_completed(argv: Sequence[str], done: Completed, t0: float) -> Completed:
    """What a program run by `kubectl exec` (exec_argv) did: its exit status and its own
    words, without kubectl's line for a non-zero exit."""
    err = re.sub(r"command terminated with exit code \d+\n?$", "", done.stderr)
    return Completed(tuple(argv), timed_exit_status(done.returncode, done.stderr), done.stdout,
                     err, time.monotonic() - t0)


def ready_ns(log: str) -> int | None:
    """The CLOCK_MONOTONIC ns of itx-ready's marker in the container's log. Pure."""
    m = re.search(rf"{READY_MARKER} (\d+)", log)
    return int(m.group(1)) if m else None


def kib(quantity: str) -> int:
    """KiB of a Kubernetes memory quantity as the API reports allocatable ("24115920Ki",
    "32Gi", "33554432"). Pure."""
    m = re.fullmatch(r"(\d+)([KMGT]i)?", quantity.strip())
    if not m:
        return 0
    scale = {"Ki": 1, "Mi": 1 << 10, "Gi": 1 << 20, "Ti": 1 << 30}
    return int(m.group(1)) * scale[m.group(2)] if m.group(2) else int(m.group(1)) // 1024


def local_addresses() -> set[str]:
    """This host's IPv4 addresses (its own network namespace's)."""
    out = command.run(["ip", "-o", "-4", "addr", "show"], 10).stdout
    return {f.split("/")[0] for line in out.splitlines()
            for f in line.split()[3:4]}


def pod_words(pod: Mapping[str, Any]) -> str:
    """Why a pod is where it is, in its own words (its container's waiting or terminated
    reason and message, else its conditions'). Pure."""
    status = pod.get("status", {})
    for c in status.get("containerStatuses", []) or []:
        for key in ("waiting", "terminated"):
            s = (c.get("state") or {}).get(key)
            if s:
                return f"{s.get('reason', key)}: {s.get('message', '')}".strip(": ")
    for c in status.get("conditions", []) or []:
        if c.get("status") == "False" and c.get("message"):
            return f"{c.get('reason', '')}: {c['message']}".strip(": ")
    return status.get("phase", "no status")


def service_programmed(nat: str, cluster_ip: str, pod_ip: str) -> bool:
    """Whether `iptables-save -t nat` output has kube-proxy's rules for the Service address
    and an endpoint at the pod's address. Pure."""
    return (f"-d {cluster_ip}/32" in nat
            and re.search(rf"--to-destination {re.escape(pod_ip)}:\d+", nat) is not None)


def delete_namespace(namespace: str) -> None:
    done = kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=90s",
                   "--ignore-not-found", timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl delete namespace {namespace}: {done.stderr.strip()[:200]}")


def namespaces_left(prefix: str, what: str) -> list[Leftover]:
    """isotax's namespaces of `prefix` still in the run's cluster (the local one while it
    runs, or --kubeconfig's): their tag names their owner, so a resumed run's recovery removes
    those a dead run could not (its API server gone)."""
    t = target.current()
    if t.local and (cluster.supervisor_pid() is None or cluster.state() != cluster.READY):
        return []
    got = t.kubectl("get", "namespaces", "-l", "isotax=1", "-o", "name", timeout=30)
    names = [n.removeprefix("namespace/") for n in got.stdout.split()]
    return [Leftover(f"Kubernetes namespace {n}{what}",
                     [(str(L.binary("kubectl")), f"--kubeconfig={t.kubeconfig}", "delete",
                       "namespace", n, "--wait=true")], stage=Stage.CONTAINER, names=(n,))
            for n in names if n.startswith(prefix)]


# What isotax does on a cluster it did not start: its own namespaces, pods and Services in
# them, and commands in its pods.
FOREIGN_VERBS = (("create", "namespaces"), ("delete", "namespaces"), ("create", "pods"),
                 ("create", "services"), ("create", "pods/exec"), ("get", "nodes"))


def foreign_access(t: target.Target) -> Availability:
    """Whether the account of t's kubeconfig can reach its API server and do what isotax does
    there, in one line naming what it cannot."""
    if not L.binary("kubectl").exists():
        return Availability.no(f"kubectl {L.K8S_VERSION} is not built here",
                               "bash scripts/setup.sh --kubernetes")
    version = t.kubectl("version", "-o", "json", "--request-timeout=15s", timeout=30)
    if version.returncode != 0 or "serverVersion" not in version.stdout:
        return Availability.no(f"{t.words()} cannot be reached: "
                               f"{kubectl_failed(version) or version.stderr.strip()[-200:]}",
                               "check the kubeconfig's server and credentials")
    denied = [f"{verb} {what}" for verb, what in FOREIGN_VERBS
              if t.kubectl("auth", "can-i", verb, what, timeout=30).stdout.strip() != "yes"]
    if denied:
        return Availability.no(f"the account of {t.kubeconfig} may not {', '.join(denied)}",
                               "use an account that can (a namespace admin's does not reach "
                               "nodes; isotax needs to read them)")
    return Availability.yes()


def get_pod(namespace: str, name: str) -> dict[str, Any]:
    """The pod as the API has it; {} where it cannot be read."""
    got = kubectl("get", "pod", "-n", namespace, name, "-o", "json", timeout=30)
    return json.loads(got.stdout) if got.returncode == 0 else {}


def wait_running(namespace: str, name: str, timeout: float) -> dict[str, Any]:
    """The pod once Running. Unavailable in its own words where it ended before it ran, where
    waiting will not mend it (HOPELESS), or after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = get_pod(namespace, name)
        phase = pod.get("status", {}).get("phase", "")
        if phase == "Running":
            return pod
        if phase in ("Failed", "Succeeded"):
            raise Unavailable(Availability.no(f"pod {namespace}/{name} is {phase} before it "
                                              f"ran: {pod_words(pod)}"))
        waiting = pod_words(pod)
        if any(w in waiting for w in HOPELESS):
            raise Unavailable(Availability.no(f"pod {namespace}/{name}: {waiting}"))
        time.sleep(0.05)
    raise Unavailable(Availability.no(f"pod {namespace}/{name} not running after "
                                      f"{timeout:.0f} s: {pod_words(get_pod(namespace, name))}"))


def wait_marker(namespace: str, name: str, timeout: float) -> int | None:
    """Until itx-ready's marker is in the pod's log: its CLOCK_MONOTONIC ns (None where the
    marker has none). Unavailable after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = kubectl("logs", "-n", namespace, name, "-c", CONTAINER, timeout=20)
        if READY_MARKER in log.stdout:
            return ready_ns(log.stdout)
        time.sleep(0.05)
    raise Unavailable(Availability.no(f"pod {namespace}/{name}: no {READY_MARKER} from "
                                      f"{READY_HELPER} within {timeout:.0f} s"))
