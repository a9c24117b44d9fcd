"""The Service in front of a pod: waiting until the cluster routes its address to the pod."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from isotax.environments.kube.manifests import POD
from isotax.environments.kube_api import endpoint_ready, kubectl, service_programmed
from isotax.host import command
from isotax.host.kubernetes import layout as L
from isotax.protocols import Availability, Unavailable


def wait_service(layout: L.NodeLayout | None, namespace: str, cluster_ip: str,
                 pod_ips: Sequence[str], timeout: float) -> None:
    """Until every node's kube-proxy has put the pods (the measured one and any other
    endpoints) behind the Service's address in its nat table (a client's node translates it;
    a second node's table is its namespace's): before, a client's packets to it go nowhere
    (an endpoint follows its pod's readiness, and kube-proxy syncs a moment later).
    `layout` None: a foreign cluster's."""
    deadline = time.monotonic() + timeout
    nodes = [n for n in L.NODES if not n.netns or Path(f"/run/netns/{n.netns}").exists()]
    while time.monotonic() < deadline:
        if layout is None:
            # A foreign cluster's nodes are out of reach: its endpoint ready. Whether the
            # client's node's proxy translates the address to it, the load generator pod
            # finds out from there (loadgen.pod: a connection through it).
            got = kubectl("get", "endpointslices", "-n", namespace, "-l",
                          f"kubernetes.io/service-name={POD}", "-o", "json", timeout=30)
            if got.returncode == 0 and endpoint_ready(json.loads(got.stdout), pod_ips):
                return
        else:
            nats = [command.run(n.enter(["iptables-save", "-t", "nat"]), 30).stdout
                    for n in nodes]
            if all(service_programmed(nat, cluster_ip, pod_ips) for nat in nats):
                return
        time.sleep(0.1)
    raise Unavailable(Availability.no(
        f"kube-proxy did not put pod {namespace}/{POD} ({', '.join(pod_ips)}) behind its "
        f"Service {cluster_ip} within {timeout:.0f} s"))
