"""The other endpoints behind a pod's Service (the plan's `endpoints` > 1): pods of the measured
pod's spec, on its node, labelled like it, so kube-proxy sends each new connection to the
Service to any of them (its KUBE-SVC chain: one statistic rule per endpoint, walked per
connection). They hold idle (isotax-ready --hold) until a workload that spreads over endpoints
starts its server in each (workloads.servers.serving_everywhere), and go with the measured
pod's namespace. Each is a small Instance: it runs commands and says where it listens; it is
not measured, paused or footprinted on its own (the measured pod is)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from isotax.environments.kube.manifests import POD
from isotax.environments.kube_api import pod_exec, wait_running
from isotax.protocols import Completed, Facts, Instance, ParamSpec, SocketStack

ENDPOINTS_OPTION = ParamSpec(
    "endpoints", int, 1, "with network = \"service\": the pods behind the Service, the "
    "measured one and endpoints - 1 more of its spec on its node (a workload whose every "
    "connection stands alone, redis, serves from each; the others are not applicable)",
    minimum=1, maximum=100)


def endpoints_problem(network: str, options: Mapping[str, Any]) -> str | None:
    """endpoints > 1 needs a Service to spread over them. Pure."""
    n = options.get("endpoints", 1)
    if isinstance(n, int) and n > 1 and network != "service":
        return (f"options.endpoints = {n} needs network = \"service\" (a Service to send "
                f"connections to them); network {network!r} reaches one pod")
    return None


def endpoint_names(count: int) -> list[str]:
    """The other endpoints' pod names beside the measured pod (POD). Pure."""
    return [f"{POD}-ep{i}" for i in range(1, count)]


class EndpointPod:
    """One more endpoint behind the measured pod's Service (protocols.Instance, for a
    workload's server): commands run in it through `kubectl exec`, and its facts are the
    measured pod's with its own address to listen on."""

    def __init__(self, namespace: str, name: str, pod_ip: str, main: Instance) -> None:
        self.namespace, self.name, self.main = namespace, name, main
        self.address = pod_ip
        self.scratch, self.data_dir = main.scratch, main.data_dir
        self.milestones: Mapping[str, float] = {}

    @property
    def socket_stack(self) -> SocketStack:
        return self.main.socket_stack

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        return pod_exec(self.namespace, self.name, argv, timeout)

    def facts(self) -> Facts:
        return dataclasses.replace(self.main.facts(), container_address=self.address)

    # Its lifecycle is the measured pod's namespace's: nothing of its own to pause or stop.
    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def alive(self) -> str:
        return ""

    def host_pids(self) -> Sequence[int]:
        return ()

    def kernel_memory_bytes(self) -> int | None:
        return None


def start_endpoints(main: Instance, namespace: str, count: int,
                    manifest: Callable[[str], dict[str, Any]],
                    apply: Callable[[Mapping[str, Any]], None],
                    timeout: float) -> list[EndpointPod]:
    """count - 1 more pods of manifest(name) (the measured pod's spec, a burst's sliver of
    requests so that ten fit beside the plan's pods), applied at once as one List through
    the measured pod's own `apply` (its admission words, a lost cluster said as such), each
    waited for until it runs; their addresses are what the Service must route to."""
    names = endpoint_names(count)
    if not names:
        return []
    apply({"apiVersion": "v1", "kind": "List", "items": [manifest(n) for n in names]})
    out = []
    for name in names:
        pod = wait_running(namespace, name, timeout)
        out.append(EndpointPod(namespace, name, pod["status"].get("podIP", ""), main))
    return out
