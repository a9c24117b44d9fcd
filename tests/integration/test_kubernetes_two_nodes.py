"""A 2-node cluster for real: `isotax cluster up --nodes 2` adds itx-node2, a network namespace
of this host with its own containerd, kubelet and kube-proxy. The load generator runs as a pod
there (the plan's `[loadgen] node`) and measures pods on the first node across the nodes' link:
on the pod network, through the second node's kube-proxy to a Service, and on the first node's
own stack. `down` leaves nothing of either node."""

from __future__ import annotations

import json
from collections.abc import Iterator
from ipaddress import ip_address, ip_network
from pathlib import Path

import pytest
from support import ours, ran, started

from isotax.host.kubernetes import cluster, teardown
from isotax.host.kubernetes import layout as L
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.pod import PodLoadGen
from isotax.model import CellStatus
from isotax.protocols import Reach
from isotax.workloads.memcached import Memcached

pytestmark = pytest.mark.integration

WORDS = (L.CGROUP_ROOT, L.CNI_BRIDGE, L.NODE_LINK, L.WORKER.netns, L.WORKER.host_link,
         L.WORKER.cgroup_root)


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[float]:
    why = cluster.missing()
    if why:
        pytest.skip(why)
    if cluster.supervisor_pid() is not None or teardown.present():
        pytest.skip("a cluster isotax started is up on this host (`isotax cluster down`)")
    seconds = cluster.up(nodes=2)
    try:
        yield seconds
    finally:
        assert cluster.down() == []
    assert teardown.present() == []
    assert ours(*WORDS) == []
    assert not Path(f"/run/netns/{L.WORKER.netns}").exists()


def test_both_nodes_are_ready_and_the_second_is_its_own(two_nodes: float) -> None:
    print(f"2-node cluster up in {two_nodes:.1f} s")
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    assert set(by_name) == {L.NODE, L.WORKER.name}
    for n in L.NODES:
        node = by_name[n.name]
        ready = [c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready == ["True"], n.name
        assert [a["address"] for a in node["status"]["addresses"]
                if a["type"] == "InternalIP"] == [n.ip]
    # The second node's own containerd, in its namespace; its address only there.
    from isotax.host import command

    inside = command.run(L.WORKER.enter(["ip", "-o", "-4", "addr", "show"]), 10).stdout
    assert f"{L.WORKER.ip}/32" in inside
    assert L.WORKER.ip not in command.run(["ip", "-o", "-4", "addr", "show"], 10).stdout
    assert command.run(L.ctr_argv("version", node=L.WORKER), 30).returncode == 0


@pytest.fixture(scope="module")
def pod_loadgen(two_nodes: float, image: ImageArtifacts) -> Iterator[PodLoadGen]:
    lg = PodLoadGen(L.WORKER.name, image)
    try:
        lg.up()
        yield lg
    finally:
        lg.close()
    assert ours(lg.namespace or "itx-lg-") == []


@pytest.mark.parametrize("network", ["pod", "service", "host"])
def test_the_load_generator_pod_reaches_a_pod_of_the_first_node(
        pod_loadgen: PodLoadGen, image: ImageArtifacts, tmp_path: Path, network: str) -> None:
    assert ip_address(pod_loadgen.address) in ip_network(L.WORKER.pod_cidr)  # the 2nd node's
    assert pod_loadgen.netns_inode is not None
    with started(f"test-2n-{network}", "pod", network, image, tmp_path) as inst:
        w = Memcached()
        params = {**{p.name: p.default for p in Memcached.params}, "duration_s": 1,
                  "connections": 4}
        cpu0 = pod_loadgen.cpu_group.usage_s() if pod_loadgen.cpu_group else 0.0
        w.prepare(inst, params, pod_loadgen)
        rate = {s.metric: s for s in w.run(inst, params, pod_loadgen)}["requests_per_s"]
        cpu1 = pod_loadgen.cpu_group.usage_s() if pod_loadgen.cpu_group else 0.0
        path = rate.labels["path"]
        print(f"{network}: {rate.value:.0f} req/s via {path}")
        assert rate.value > 100
        assert cpu1 > cpu0  # the clients ran in the load generator's pod
        assert f"on {L.WORKER.name}" in path and L.WORKER.host_link in path
        if network == "service":
            assert inst.facts().reach is Reach.SERVICE and "kube-proxy" in path
        elif network == "pod":
            assert ip_address(inst.address) in ip_network(L.POD_CIDR) and inst.address in path
        else:
            assert "host network stack" in path
        # Only the load generator is admitted to the server's port.
        from isotax.host import command

        rules = command.run(["iptables", "-S"], 10).stdout
        assert f"! -s {pod_loadgen.address}/32" in rules


PLAN = f"""
name = "itx-two-nodes"
seed = 1
repetitions = 1
warmups = 0
timeout_s = 300
parity = "flag"

[loadgen]
node = "{L.WORKER.name}"

[[environments]]
name = "native"
kind = "native"

[[environments]]
name = "pod-runc"
kind = "pod"
network = "pod"

[[environments]]
name = "pod-runc-service"
kind = "pod"
network = "service"

[[workloads]]
name = "rr"
params = {{ proto = "tcp", seconds = 1 }}
"""


def test_a_run_with_its_load_generator_on_the_second_node(two_nodes: float,
                                                          image: ImageArtifacts,
                                                          tmp_path: Path) -> None:
    with ran(PLAN, image, tmp_path) as (store, run_id):
        cells = store.cells(run_id)
        lg = store.run_meta(run_id).get("loadgen") or {}
    assert {c.key.environment for c in cells} == {"native", "pod-runc", "pod-runc-service"}
    bad = [(c.key.environment, c.reason) for c in cells if c.status is not CellStatus.OK]
    assert bad == []
    assert lg.get("kind") == "pod" and lg.get("node") == L.WORKER.name
    for c in cells:
        rate = next(s for s in c.samples if s.metric == "transactions_per_s")
        print(f"{c.key.environment}: {rate.value:.0f} trans/s")
        assert rate.value > 100
        assert f"on {L.WORKER.name}" in rate.labels["path"]
    # Its load generator pod's namespace went with the run, and every environment's.
    got = cluster.kubectl("get", "namespaces", "-o", "name").stdout
    assert lg["namespace"].startswith("itx-lg-") and lg["namespace"] not in got
    assert "itx-pod-" not in got
