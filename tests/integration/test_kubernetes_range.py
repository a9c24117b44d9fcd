"""The local cluster on another range, for real: with 10.217.0.0/16 held by a link of its own
(the bridge itx-t217 with 10.217.255.1/16, as a LAN or VPN would hold it), `isotax cluster up
--nodes 2` takes the next free candidate and says so; the nodes' addresses, both pod ranges,
the Services and the routes to the second node all lie in it; pods on both nodes are reached
from this host; `cluster status` names the range; `down` removes it all, the range's record
and every route and address in it included."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from ipaddress import IPv4Network, ip_address

import pytest
from support import ours

from isotax.host import command
from isotax.host.kubernetes import cluster, ranges, teardown
from isotax.host.kubernetes import layout as L

pytestmark = pytest.mark.integration

HOLDER = "itx-t217"
WORDS = (L.CGROUP_ROOT, L.CNI_BRIDGE, L.NODE_LINK, L.WORKER.netns, L.WORKER.host_link, HOLDER)


def _isotax(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "isotax", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def default_taken() -> Iterator[None]:
    why = cluster.missing()
    if why:
        pytest.skip(why)
    if cluster.supervisor_pid() is not None or teardown.present():
        pytest.skip("a cluster isotax started is up on this host (`isotax cluster down`)")
    if any(t.overlaps(IPv4Network(L.DEFAULT_RANGE)) for t in ranges.host_taken()):
        pytest.skip(f"{L.DEFAULT_RANGE} is already taken on this host")
    try:
        for argv in (["ip", "link", "add", HOLDER, "type", "bridge"],
                     ["ip", "addr", "add", "10.217.255.1/16", "dev", HOLDER],
                     ["ip", "link", "set", HOLDER, "up"]):
            assert command.run(argv, 30).returncode == 0, argv
        yield
    finally:
        if cluster.supervisor_pid() is not None or teardown.present():
            cluster.down()
        command.run(["ip", "link", "del", HOLDER], 30)
    assert teardown.present() == [] and ours(*WORDS) == []


def _pod(name: str, node: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "labels": {"isotax": "1"}},
                       "spec": {"runtimeClassName": "runc",
                                "nodeSelector": {"kubernetes.io/hostname": node},
                                "containers": [{"name": "c", "image": L.PAUSE_IMAGE,
                                                "imagePullPolicy": "Never"}]}})


def test_a_taken_default_range_moves_the_cluster_to_the_next(default_taken: None) -> None:
    want = ranges.choose(ranges.host_taken())
    assert want != IPv4Network(L.DEFAULT_RANGE)
    up = _isotax("cluster", "up", "--nodes", "2")
    assert up.returncode == 0, up.stderr
    print(up.stdout)
    assert f"addresses {want} ({L.DEFAULT_RANGE} is taken on this host)" in up.stdout
    assert L.cluster_range() == want and L.RANGE_FILE.read_text().strip() == str(want)

    def inside(address: str) -> bool:
        return ip_address(address.split("/")[0]) in want

    # The nodes, their pods' ranges and the Services: all in the chosen range.
    assert all(inside(a) for a in (L.NODE_IP, L.POD_CIDR, L.SERVICE_CIDR, L.WORKER.ip,
                                   L.WORKER.pod_cidr))
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    internal = {n["metadata"]["name"]: [a["address"] for a in n["status"]["addresses"]
                                        if a["type"] == "InternalIP"] for n in nodes}
    assert internal == {n.name: [n.ip] for n in L.NODES}
    svc = json.loads(cluster.kubectl("-n", "default", "get", "service", "kubernetes", "-o",
                                     "json").stdout)
    assert svc["spec"]["clusterIP"] == L.SERVICE_FIRST_IP
    assert f"{L.NODE_IP}/32" in command.run(["ip", "-4", "addr", "show", L.NODE_LINK],
                                            10).stdout
    assert L.WORKER.pod_cidr in command.run(["ip", "-4", "route", "show"], 10).stdout
    # A pod on each node, on its node's range, reached from this host.
    for n in L.NODES:
        name = f"itx-r-{n.name}"
        done = cluster.kubectl("apply", "-f", "-", input_text=_pod(name, n.name))
        assert done.returncode == 0, done.stderr
    done = cluster.kubectl("wait", "--for=condition=Ready", *(f"pod/itx-r-{n.name}"
                                                               for n in L.NODES),
                           "--timeout=120s", timeout=150)
    assert done.returncode == 0, done.stderr
    for n in L.NODES:
        pod = json.loads(cluster.kubectl("get", "pod", f"itx-r-{n.name}", "-o", "json").stdout)
        ip = pod["status"]["podIP"]
        assert ip_address(ip) in IPv4Network(n.pod_cidr), (n.name, ip)
        assert command.run(["ping", "-c", "1", "-W", "5", ip], 15).returncode == 0, ip
    status = _isotax("cluster", "status", timeout=60)
    assert f"addresses {want}" in status.stdout
    down = _isotax("cluster", "down", timeout=240)
    assert down.returncode == 0, down.stderr
    assert not L.RANGE_FILE.exists()
    assert [t for t in ranges.host_taken() if t.overlaps(want)] == []
