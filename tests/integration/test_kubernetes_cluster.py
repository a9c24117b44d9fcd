"""The local Kubernetes cluster for real: `isotax cluster up` starts it (node Ready,
RuntimeClasses runc and gvisor), a pod of each RuntimeClass runs on the runtime its class
names, a second `up` is refused, `down` leaves nothing; a killed supervisor's cluster is a
leftover that the leak finder names and removes whole."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import Iterator

import pytest
from support import ours

from isotax.host.kubernetes import cluster, teardown
from isotax.host.kubernetes import layout as L
from isotax.image.artifacts import ImageArtifacts

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


def _pod(name: str, runtime_class: str, image: str = L.PAUSE_IMAGE,
         command: tuple[str, ...] = ()) -> str:
    container: dict[str, object] = {"name": "c", "image": image, "imagePullPolicy": "Never"}
    if command:
        container["command"] = list(command)
    return json.dumps({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": name, "labels": {"isotax": "1"}},
                       "spec": {"runtimeClassName": runtime_class, "containers": [container]}})


def _apply(tmp_path: os.PathLike[str], name: str, text: str) -> None:
    spec = f"{tmp_path}/{name}.json"
    with open(spec, "w") as f:
        f.write(text)
    done = cluster.kubectl("apply", "-f", spec)
    assert done.returncode == 0, done.stderr


def test_a_pod_of_each_runtime_class_runs_on_its_runtime(up: float,
                                                         tmp_path: os.PathLike[str]) -> None:
    print(f"cluster up in {up:.1f} s")
    assert cluster.state() == cluster.READY
    node = cluster.kubectl("get", "node", L.NODE, "-o", "json")
    assert json.loads(node.stdout)["status"]["nodeInfo"]["kubeletVersion"] == L.K8S_VERSION
    classes = json.loads(cluster.kubectl("get", "runtimeclass", "-o", "json").stdout)["items"]
    assert {c["metadata"]["name"]: c["handler"] for c in classes} == L.RUNTIME_CLASSES
    for name, rc in (("itx-t-runc", "runc"), ("itx-t-gvisor", "gvisor")):
        _apply(tmp_path, name, _pod(name, rc))
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


def test_pods_run_the_workload_image_the_same_bits(up: float, image: ImageArtifacts,
                                                   tmp_path: os.PathLike[str]) -> None:
    """The image isotax built, loaded into the cluster's containerd, runs as a pod of each
    RuntimeClass: gVisor's kernel in the gvisor pod, the host's in the runc pod, and the
    guest helpers byte for byte the image's."""
    from isotax.host import command
    from isotax.host.kubernetes import images

    ref, seconds = images.load(image)
    print(f"image {ref} loaded in {seconds:.1f} s")
    assert images.load(image) == (ref, 0.0)  # once per recipe hash
    for name, rc in (("itx-w-runc", "runc"), ("itx-w-gvisor", "gvisor")):
        _apply(tmp_path, name, _pod(name, rc, ref, ("sleep", "3600")))
    done = cluster.kubectl("wait", "--for=condition=Ready", "pod/itx-w-runc",
                           "pod/itx-w-gvisor", "--timeout=120s", timeout=150)
    assert done.returncode == 0, done.stderr

    def inside(pod: str, *argv: str) -> str:
        done = cluster.kubectl("exec", pod, "--", *argv)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert inside("itx-w-gvisor", "dmesg").startswith("[    0.000000] Starting gVisor...")
    host_kernel = command.run(["uname", "-r"], 10).stdout.strip()
    assert inside("itx-w-runc", "uname", "-r").strip() == host_kernel
    helper = image.helpers / "itx-time"
    want = hashlib.sha256(helper.read_bytes()).hexdigest()
    for pod in ("itx-w-runc", "itx-w-gvisor"):
        assert inside(pod, "sha256sum", "/opt/isotax/bin/itx-time").split()[0] == want
