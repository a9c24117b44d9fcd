"""The pod environment's pure parts: the pod and Service it asks for (Guaranteed QoS, the
workload image never pulled, its RuntimeClass and network), the exec command line, and a
pod's own words for where it is, read from real API responses (tests/data/kubernetes)."""

from __future__ import annotations

import json

import pytest
from support import DATA

from isotax import protocols
from isotax.environments.kube.endpoints import endpoint_names
from isotax.environments.kube.manifests import POD, pod_manifest, service_manifest
from isotax.environments.kube.pod import Pod
from isotax.environments.kube_api import (
    exec_argv,
    pod_words,
    ready_ns,
    service_programmed,
    task_status,
)
from isotax.host.kubernetes import layout as L
from isotax.protocols import Port


def _pod(**kw: object) -> dict:
    args = {"namespace": "itx-pod-abc123", "image": "localhost/itx/workload:h",
            "runtime_class": "gvisor", "network": "pod", "storage": "volume", "cpu": "2",
            "memory_mib": 1024, "owner": "123-456"}
    args.update(kw)
    return pod_manifest(**args)  # type: ignore[arg-type]


def test_the_pod_is_guaranteed_and_runs_the_workload_image_never_pulled() -> None:
    p = _pod()
    c = p["spec"]["containers"][0]
    assert c["imagePullPolicy"] == "Never" and c["image"] == "localhost/itx/workload:h"
    assert c["resources"]["requests"] == c["resources"]["limits"] == {
        "cpu": "2", "memory": "1024Mi"}  # requests = limits: Guaranteed QoS
    assert p["spec"]["runtimeClassName"] == "gvisor" and "hostNetwork" not in p["spec"]
    assert c["command"] == ["/opt/isotax/bin/itx-ready", "--hold"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"/tmp", "/mnt"}
    assert p["metadata"]["labels"]["isotax"] == "1"
    assert p["metadata"]["annotations"]["isotax.owner"] == "123-456"
    burstable = _pod(guaranteed=False)["spec"]["containers"][0]["resources"]
    assert burstable["limits"] == {"cpu": "2", "memory": "1024Mi"}
    assert burstable["requests"] == {"cpu": "100m", "memory": "64Mi"}
    # The plan sets neither: no limit, as a bare container has none; /dev/shm half of memory.
    free = _pod(guaranteed=False, cpu="", memory_mib=0, shm_mib=12052)["spec"]
    assert free["containers"][0]["resources"]["limits"] == {}
    assert {"name": "shm", "mountPath": "/dev/shm"} in free["containers"][0]["volumeMounts"]
    assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "12052Mi"}} \
        in free["volumes"]
    # One of a burst: a sliver of requests, so 100 fit on a 2-CPU node.
    assert _pod(burst=True)["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "10m", "memory": "16Mi"}
    host = _pod(network="host", storage="rootfs")
    assert host["spec"]["hostNetwork"] is True
    assert {m["mountPath"] for m in host["spec"]["containers"][0]["volumeMounts"]} == {"/tmp"}
    # No class named: the cluster's default runtime (a managed cluster may have no `runc`).
    default = _pod(runtime_class="", pull="IfNotPresent", pull_secrets=["itx-pull-0"])["spec"]
    assert "runtimeClassName" not in default
    assert default["imagePullSecrets"] == [{"name": "itx-pull-0"}]
    assert "imagePullSecrets" not in p["spec"]
    # The cluster's DNS by default; the node's resolver where the cluster has none (the
    # local one), so its kubelet has no MissingClusterDNS warning for each pod.
    assert "dnsPolicy" not in p["spec"]
    assert host["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert _pod(cluster_dns=False)["spec"]["dnsPolicy"] == "Default"
    assert _pod(network="host", cluster_dns=False)["spec"]["dnsPolicy"] == "Default"


def test_the_service_carries_every_workload_port() -> None:
    ports = [Port(41211, server="memcached"), Port(41111, ("tcp", "udp"), server="sockperf")]
    s = service_manifest("itx-pod-abc123", ports)
    assert s["spec"]["type"] == "ClusterIP" and s["spec"]["selector"] == {"app": POD}
    assert [(p["port"], p["protocol"]) for p in s["spec"]["ports"]] == [
        (41211, "TCP"), (41111, "TCP"), (41111, "UDP")]
    assert len({p["name"] for p in s["spec"]["ports"]}) == 3
    every = service_manifest("n", protocols.workload_ports())["spec"]["ports"]
    assert {p["port"] for p in every} == {p.number for p in protocols.workload_ports()}


def test_exec_runs_under_timeout_inside_the_pod() -> None:
    argv = exec_argv("itx-pod-abc123", ["xz", "-2"], 9.2, POD)
    assert argv[:6] == ["exec", "-n", "itx-pod-abc123", POD, "-c", "workload"]
    assert argv[6:] == ["--", "/usr/bin/timeout", "--kill-after=3", "10", "xz", "-2"]
    assert ready_ns("ITX-READY 12345\n") == 12345 and ready_ns("nothing") is None


def test_a_pods_own_words_for_where_it_is() -> None:
    def words(name: str) -> str:
        return pod_words(json.loads((DATA / "kubernetes" / name).read_text()))

    assert words("pod-itx-missing-image.json").startswith(
        'ErrImageNeverPull: Container image "localhost/itx/does-not-exist:1" is not present')
    assert words("pod-itx-exit1.json").startswith("Error")
    assert words("pod-itx-bad-handler.json") == "ContainerCreating"
    assert words("pod-itx-gvisor.json") == "Running"


def test_the_kind_declares_its_facts() -> None:
    assert Pod.networks == ("pod", "host", "service")
    opts = {o.name: o for o in Pod.options}
    assert set(opts) == {"runtime_class", "node", "isolation", "pull_secret", "endpoints"}
    assert opts["endpoints"].default == 1
    assert opts["runtime_class"].default == "" and opts["isolation"].default == ""
    assert opts["isolation"].choices == ("", "container", "sandbox", "vm")
    # No choices: a cluster --kubeconfig names has classes and nodes of its own, checked
    # when the pod starts; the local cluster's are named in the help.
    assert opts["runtime_class"].choices is None and opts["node"].choices is None
    assert all(c in opts["runtime_class"].help for c in L.RUNTIME_CLASSES)
    assert opts["node"].default == "" and L.WORKER.name in opts["node"].help
    # The pod goes where the plan says, and nowhere else (the second node holds clients).
    assert _pod(node=L.WORKER.name)["spec"]["nodeSelector"] == {
        "kubernetes.io/hostname": L.WORKER.name}
    assert _pod()["spec"]["nodeSelector"] == {"kubernetes.io/hostname": L.NODE}
    # A foreign cluster's scheduler picks the node, and its nodes pull the image.
    foreign = _pod(node="", pull="IfNotPresent")["spec"]
    assert "nodeSelector" not in foreign
    assert foreign["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert "pod" in protocols.environments()


def test_a_service_is_ready_once_kube_proxy_programmed_it() -> None:
    nat = (DATA / "kubernetes" / "iptables-save-nat.txt").read_text()
    # The captured cluster's `kubernetes` Service and its one endpoint, the API server (its
    # addresses as captured: a cluster up here now may have another range).
    assert service_programmed(nat, "10.217.128.1", ["10.217.0.1"])
    assert not service_programmed(nat, "10.217.128.1", ["10.217.1.9"])
    assert not service_programmed(nat, "10.217.129.1", ["10.217.0.1"])
    # Several endpoints: every one of them, not any.
    assert not service_programmed(nat, "10.217.128.1", ["10.217.0.1", "10.217.1.9"])


def test_a_service_with_endpoints_names_its_other_pods_and_needs_a_service() -> None:
    assert endpoint_names(1) == [] and endpoint_names(3) == [f"{POD}-ep1", f"{POD}-ep2"]
    assert Pod.options_problem("service", {"endpoints": 10}) is None
    assert Pod.options_problem("pod", {}) is None
    assert "needs network = \"service\"" in (Pod.options_problem("host", {"endpoints": 2})
                                              or "")


def test_the_nodes_containerd_says_whether_the_container_still_has_processes() -> None:
    paused = (DATA / "kubernetes" / "ctr-tasks-ls-paused.txt").read_text()
    killed = (DATA / "kubernetes" / "ctr-tasks-ls-killed.txt").read_text()
    cid = "482542651ce2b9547ae14a2fbeb1c9d1a6bad52d9333ccaedb22df38f484f6da"
    assert task_status(paused, cid) == "PAUSED"
    assert task_status(paused, cid[:12]) == ""  # whole ids only
    assert task_status(killed, cid) == ""  # SIGKILLed init: the task is gone at once
    pause = "e9a17a4fdbd7da77baea3d72e783bc7aab82aae0864fdc7a0af20b1b1303e7f6"
    assert task_status(killed, pause) == "RUNNING"


def test_kubectl_exec_s_own_failure_from_captured_output() -> None:
    from isotax.environments.kube_api import kubectl_failed
    from isotax.protocols import Completed

    refused = (DATA / "kubernetes" / "kubectl-exec-api-refused.txt").read_text()
    exit3 = (DATA / "kubernetes" / "kubectl-exec-exit-3.txt").read_text()
    assert "was refused" in kubectl_failed(Completed(("kubectl",), 1, "", refused, 0.1))
    assert kubectl_failed(Completed(("kubectl",), 3, "", exit3, 0.1)) == ""


def test_a_namespace_names_the_run_that_made_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from isotax.environments.kube_api import namespace_manifest
    from isotax.host import owners

    monkeypatch.setattr(owners, "my_run", lambda: "20261127-124909-k8s foreign/x")
    meta = namespace_manifest("itx-pod-abc123")["metadata"]
    psa = "pod-security.kubernetes.io/enforce"
    assert meta["labels"] == {"isotax": "1", "isotax.run": "20261127-124909-k8s-foreign-x",
                              psa: "baseline"}
    monkeypatch.setattr(owners, "my_run", lambda: "")
    assert namespace_manifest("itx-pod-abc123", "privileged")["metadata"]["labels"] == {
        "isotax": "1", psa: "privileged"}


def test_behind_several_endpoints_only_a_workload_that_spreads_over_them_applies() -> None:
    """The runner's shared rule (run.applicability): netperf's control and data connections
    must meet one server, redis's connections each stand alone; compress needs no network;
    with no other endpoint every workload applies as before."""
    from isotax.facts import Facts, Reach
    from isotax.run.applicability import why_not_applicable

    class _Behind:  # what the rule asks of an instance: its facts and its other endpoints
        def __init__(self, others: int) -> None:
            self.others = [object()] * others

        def facts(self) -> Facts:
            return Facts("pod", Reach.SERVICE)

        def other_endpoints(self) -> list[object]:
            return self.others

    def why(workload: str, inst: _Behind) -> str | None:
        w = protocols.workloads()[workload]()
        return why_not_applicable(w, inst, {p.name: p.default for p in w.params})  # type: ignore[arg-type]

    ten, one = _Behind(9), _Behind(0)
    assert "a Service with 10 endpoints" in (why("rr", ten) or "")
    assert "a Service with 10 endpoints" in (why("throughput", ten) or "")
    assert why("redis", ten) is None and why("compress", ten) is None
    assert why("rr", one) is None and why("throughput", one) is None
