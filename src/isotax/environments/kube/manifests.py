"""The pod environment's objects as the Kubernetes API takes them: the pod (its resources,
RuntimeClass, network, storage, node and pull secrets) and the Service in front of it. Pure
functions, apart from the pod environment (kube/pod.py) that applies them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from isotax import protocols
from isotax.environments.base import GUEST_ENV, READY_HELPER
from isotax.environments.container_fs import SCRATCH, VOLUME_DIR
from isotax.environments.kube_api import CONTAINER
from isotax.host.kubernetes import layout as L

POD = "itx-pod"  # the pod's name in its own namespace
# A Burstable pod's requests (the plan sets no vcpus and memory_mib): what the scheduler
# reserves for it, small enough that every pod of a plan fits on the node at once.
TOKEN_CPU, TOKEN_MEMORY_MIB = "100m", 64
# A start-up burst's pods' requests (kube.starts): 100 of them fit on a 2-CPU node.
BURST_CPU, BURST_MEMORY_MIB = "10m", 16


def pod_manifest(*, namespace: str, image: str, runtime_class: str, network: str,
                 storage: str, cpu: str, memory_mib: int, owner: str,
                 guaranteed: bool = True, node: str = L.NODE, pull: str = "Never",
                 pull_secrets: Sequence[str] = (), cluster_dns: bool = True,
                 name: str = POD, burst: bool = False, shm_mib: int = 0) -> dict[str, Any]:
    """The pod, as the API takes it, on `node` ("": the scheduler's choice): limits `cpu`
    and `memory_mib` where given ("" and 0: none, as a bare container without vcpus and
    memory_mib has none), requests the same (Guaranteed) or a token share (Burstable);
    /dev/shm a memory emptyDir of shm_mib (the bare containers' half of memory; 0: the
    runtime's 64 MB); its
    RuntimeClass only where the plan names one (else the cluster's default runtime). The
    local cluster's nodes have the image already (pull "Never"); a foreign cluster's pull it
    ("IfNotPresent"), with the pull secrets named. Where the cluster has no DNS add-on (the
    local one: `cluster_dns` False) the pod resolves as its node does (dnsPolicy Default): the
    workloads name no hosts, and the kubelet then has no MissingClusterDNS warning to give
    for every pod. Pure."""
    mounts = [{"name": "scratch", "mountPath": SCRATCH}]
    volumes: list[dict[str, Any]] = [{"name": "scratch", "emptyDir": {"medium": "Memory"}}]
    if storage == "volume":
        mounts.append({"name": "data", "mountPath": VOLUME_DIR})
        volumes.append({"name": "data", "emptyDir": {}})
    if shm_mib:
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory",
                                                    "sizeLimit": f"{shm_mib}Mi"}})
    limits = {k: v for k, v in (("cpu", cpu), ("memory", f"{memory_mib}Mi" if memory_mib
                                                else "")) if v}
    requests = limits if guaranteed else {"cpu": TOKEN_CPU, "memory": f"{TOKEN_MEMORY_MIB}Mi"}
    if burst:  # one of many at once: Burstable with a sliver, whatever the plan sets
        requests = {"cpu": BURST_CPU, "memory": f"{BURST_MEMORY_MIB}Mi"}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1, "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "containers": [{
            "name": CONTAINER, "image": image, "imagePullPolicy": pull,
            "command": [READY_HELPER, "--hold"],
            "env": [{"name": k, "value": v} for k, v in {**GUEST_ENV, "TMPDIR": SCRATCH}.items()],
            "resources": {"requests": requests, "limits": limits},
            "volumeMounts": mounts}],
        "volumes": volumes,
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if pull_secrets:
        spec["imagePullSecrets"] = [{"name": n} for n in pull_secrets]
    if node:
        # The scheduler still checks that it fits: "no room" is its Unschedulable.
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if network == "host":
        spec["hostNetwork"] = True
    if not cluster_dns:
        spec["dnsPolicy"] = "Default"
    elif network == "host":
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"isotax": "1", "app": POD},
                         "annotations": {"isotax.owner": owner}},
            "spec": spec}


# What the Service in front of a pod adds to its network path (the layers' words): kube-proxy
# translates the ClusterIP to the pod's address (DNAT) and, for a client outside the cluster's
# pod network (the host's load generator; the local cluster sets clusterCIDR), masquerades its
# source (SNAT); a load generator pod on the pod network is not masqueraded.
SERVICE_WORDS = ("a ClusterIP Service on the pod network: kube-proxy's DNAT to the pod, and "
                 "its SNAT for a client outside the pod network")


def service_manifest(namespace: str, ports: Sequence[protocols.Port]) -> dict[str, Any]:
    """A ClusterIP Service with every workload port (each protocol) in front of the pod. Pure."""
    entries = [{"name": f"p{p.number}-{proto}", "port": p.number, "targetPort": p.number,
                "protocol": proto.upper()} for p in ports for proto in p.protocols]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": POD, "namespace": namespace, "labels": {"isotax": "1"}},
            "spec": {"type": "ClusterIP", "selector": {"app": POD}, "ports": entries}}
