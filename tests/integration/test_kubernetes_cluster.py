"""The local Kubernetes cluster for real: `isotax cluster up` starts it (node Ready,
RuntimeClasses runc and gvisor), a pod of each RuntimeClass runs on the runtime its class
names, a second `up` is refused, `down` leaves nothing; a killed supervisor's cluster is a
leftover that the leak finder names and removes whole."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest
from support import ours

from isotax.host.kubernetes import cluster, teardown
from isotax.host.kubernetes import layout as L

pytestmark = pytest.mark.integration

WORDS = (L.CGROUP_ROOT, L.CNI_BRIDGE, L.NODE_LINK)


@pytest.fixture(scope="module", autouse=True)
def can_run() -> None:
    why = cluster.missing()
    if why:
        pytest.skip(why)
    if cluster.supervisor_pid() is not None or teardown.present():
        pytest.skip("a cluster isotax started is up on this host (`isotax cluster down`)")


@pytest.fixture
def up() -> Iterator[float]:
    seconds = cluster.up()
    try:
        yield seconds
    finally:
        cluster.down()
    assert teardown.present() == []
    assert ours(*WORDS) == []


def _pod(name: str, runtime_class: str) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "labels": {"isotax": "1"}},
                       "spec": {"runtimeClassName": runtime_class,
                                "containers": [{"name": "c", "image": L.PAUSE_IMAGE,
                                                "imagePullPolicy": "Never"}]}})


def test_a_pod_of_each_runtime_class_runs_on_its_runtime(up: float,
                                                         tmp_path: os.PathLike[str]) -> None:
    print(f"cluster up in {up:.1f} s")
    assert cluster.state() == cluster.READY
    node = cluster.kubectl("get", "node", L.NODE, "-o", "json")
    assert json.loads(node.stdout)["status"]["nodeInfo"]["kubeletVersion"] == L.K8S_VERSION
    classes = json.loads(cluster.kubectl("get", "runtimeclass", "-o", "json").stdout)["items"]
    assert {c["metadata"]["name"]: c["handler"] for c in classes} == L.RUNTIME_CLASSES
    for name, rc in (("itx-t-runc", "runc"), ("itx-t-gvisor", "gvisor")):
        spec = f"{tmp_path}/{name}.json"
        with open(spec, "w") as f:
            f.write(_pod(name, rc))
        assert cluster.kubectl("apply", "-f", spec).returncode == 0
    done = cluster.kubectl("wait", "--for=condition=Ready", "pod/itx-t-runc",
                           "pod/itx-t-gvisor", "--timeout=120s", timeout=150)
    assert done.returncode == 0, done.stderr
    crictl = [str(L.binary("crictl")), "--config", str(L.ETC / "crictl.yaml")]
    from isotax.host import command

    pods = json.loads(command.run([*crictl, "pods", "-o", "json"], 30).stdout)["items"]
    handler = {p["metadata"]["name"]: p["runtimeHandler"] for p in pods}
    assert handler["itx-t-runc"] == "runc" and handler["itx-t-gvisor"] == "runsc"
    # Nothing of the cluster listens on a wildcard address.
    ours_pids = teardown.our_processes()
    listening = [ln.split() for ln in command.run(["ss", "-Hltnp"], 30).stdout.splitlines()]
    mine = [f for f in listening if any(f"pid={p}," in f[-1] for p in ours_pids)]
    assert len(mine) >= 8  # etcd, the API server, the kubelet, kube-proxy, ...
    # Its local address (the 4th column), not the peer's "0.0.0.0:*".
    assert [f for f in mine if f[3].rsplit(":", 1)[0] in ("0.0.0.0", "*", "[::]")] == []
    with pytest.raises(cluster.ClusterError, match="already up"):
        cluster.up()


def test_a_killed_supervisor_leaves_a_cluster_that_doctor_removes() -> None:
    from isotax.run.leaks import leaked_cluster

    cluster.up()
    pid = cluster.supervisor_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while cluster.supervisor_pid() is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        found = leaked_cluster()
        assert len(found) == 1 and "isotax cluster down" in found[0]
        with pytest.raises(cluster.ClusterError, match="left on this host"):
            cluster.up()
        assert found[0].removal is not None
        found[0].removal()
    finally:
        cluster.down()
    assert teardown.present() == [] and leaked_cluster() == []
    assert ours(*WORDS) == []
