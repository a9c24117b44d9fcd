"""A cluster named by a kubeconfig (`isotax run --kubeconfig K --pod-image REF`), for real:
the local 2-node cluster, addressed through its API alone, as a user's cluster would be. The
workload image is put on its nodes first, as a registry pull would; the pods run it and are
checked to be its bits. Pods on the second node are measured against a pod baseline (native is
on this host, not on their node), with the load generator as a pod on the first node; native
as their baseline is refused in one line, as are a RuntimeClass the cluster lacks, a missing
--pod-image and an account without the rights isotax needs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import local_cluster, ran

from isotax import protocols
from isotax.host.kubernetes import cluster, images, pki, target
from isotax.host.kubernetes import layout as L
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellStatus
from isotax.plan import parse_plan
from isotax.run.runner import Runner
from isotax.run.schedule import new_run_id
from isotax.store.sqlite import SQLiteStore

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[None]:
    with local_cluster(nodes=2):
        if not Path(f"/run/netns/{L.WORKER.netns}").exists():
            pytest.skip("a 1-node cluster runs here (`isotax cluster down`, then the test "
                        "starts a 2-node one)")
        yield


@pytest.fixture(scope="module")
def pushed(two_nodes: None, image: ImageArtifacts) -> str:
    """The workload image on every node, as a registry would have given it; its reference."""
    for n in L.NODES:
        ref, _ = images.load(image, n)
    return ref


@pytest.fixture
def foreign(pushed: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The run's cluster: the local one's kubeconfig, as --kubeconfig names it."""
    monkeypatch.setenv(target.KUBECONFIG_VAR, str(L.KUBECONFIG))
    monkeypatch.setenv(target.POD_IMAGE_VAR, pushed)
    assert not target.current().local
    return pushed


PLAN = f"""
name = "itx-kubeconfig"
seed = 1
repetitions = 1
warmups = 0
timeout_s = 300
parity = "flag"
baseline = "pod-runc"

[loadgen]
node = "{L.NODE}"

[[environments]]
name = "pod-runc"
kind = "pod"
network = "pod"
options = {{ node = "{L.WORKER.name}" }}

[[environments]]
name = "pod-gvisor"
kind = "pod"
network = "pod"
options = {{ node = "{L.WORKER.name}", runtime_class = "gvisor" }}

[[workloads]]
name = "rr"
params = {{ proto = "tcp", seconds = 1 }}

[[workloads]]
name = "compress"
params = {{ corpus_mib = 1, threads = 1 }}
"""


def test_a_plan_runs_on_a_cluster_named_by_its_kubeconfig(foreign: str, image: ImageArtifacts,
                                                          tmp_path: Path) -> None:
    with ran(PLAN, image, tmp_path) as (store, run_id):
        cells = store.cells(run_id)
        envs = {e.name: e for e in store.environments(run_id)}
        lg = store.run_meta(run_id).get("loadgen") or {}
    assert [(c.key.environment, c.reason) for c in cells if c.status is not CellStatus.OK] == []
    assert len(cells) == 4
    for name in ("pod-runc", "pod-gvisor"):
        d = envs[name].describe.lines()
        assert f"node {L.WORKER.name}" in d["elsewhere"] and "cluster of" in d["elsewhere"]
        assert foreign in d["rootfs"] and "not paused between cells" in d["rootfs"]
    assert envs["pod-gvisor"].describe.identity.startswith("sandbox")
    assert envs["pod-runc"].describe.identity.startswith("container")
    assert lg.get("kind") == "pod" and lg.get("image") == foreign
    got = cluster.kubectl("get", "namespaces", "-o", "name").stdout
    assert "itx-pod-" not in got and lg["namespace"] not in got


NATIVE_BASE = f"""
name = "itx-kubeconfig-native"
seed = 1
repetitions = 1
warmups = 0
parity = "flag"
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "pod-far"
kind = "pod"
network = "pod"
options = {{ node = "{L.WORKER.name}" }}
[[environments]]
name = "pod-kata"
kind = "pod"
network = "pod"
optional = true  # not there: the run goes on without it, and says why
options = {{ runtime_class = "kata" }}
[[workloads]]
name = "compress"
params = {{ corpus_mib = 1, threads = 1 }}
"""


def test_native_is_no_baseline_for_a_pod_on_another_node_nor_a_missing_runtime_class(
        foreign: str, image: ImageArtifacts, tmp_path: Path) -> None:
    plan = parse_plan(NATIVE_BASE)
    store = SQLiteStore(tmp_path / "isotax.db")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, NATIVE_BASE, plan.seed, {"hostname": "h"})
    try:
        runner = Runner(plan, NATIVE_BASE, store, image, log=print)
        assert runner.run(run_id) == "refused"
        envs = {e.name: e for e in store.environments(run_id)}
    finally:
        store.close()
    line = runner.refusal
    assert "pod-far runs on node itx-node2" in line and "baseline" in line and "\n" not in line
    assert not envs["pod-kata"].available
    assert "has no RuntimeClass 'kata' (it has: gvisor, runc)" in envs["pod-kata"].reason


def test_without_the_pod_image_a_pod_is_unavailable_in_one_line(
        foreign: str, image: ImageArtifacts, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from isotax.protocols import EnvSpec, Unavailable

    monkeypatch.setenv(target.POD_IMAGE_VAR, "")
    with pytest.raises(Unavailable) as e:
        protocols.environments()["pod"]().start(EnvSpec(
            name="itx-noimage", kind="pod", image=image, workdir=tmp_path, network="pod"))
    assert "need the workload image" in str(e.value) and "--pod-image" in str(e.value)


def test_an_account_without_the_rights_isotax_needs_is_refused(
        pushed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ServiceAccount with no role: it reaches the API server, and may do nothing."""
    ns = "itx-kc-noaccess"
    assert cluster.kubectl("create", "namespace", ns).returncode == 0
    try:
        assert cluster.kubectl("-n", ns, "create", "serviceaccount", "nobody").returncode == 0
        token = cluster.kubectl("-n", ns, "create", "token", "nobody", "--duration=10m")
        assert token.returncode == 0, token.stderr
        kubeconfig = tmp_path / "nobody.kubeconfig"
        server = f"https://{L.NODE_IP}:{L.APISERVER_PORT}"
        conf = json.loads(pki.kubeconfig(server, (L.PKI / "ca.crt").read_bytes(), b"", b"",
                                         "nobody"))
        conf["users"][0]["user"] = {"token": token.stdout.strip()}
        kubeconfig.write_text(json.dumps(conf))
        monkeypatch.setenv(target.KUBECONFIG_VAR, str(kubeconfig))
        monkeypatch.setenv(target.POD_IMAGE_VAR, pushed)
        avail = protocols.environments()["pod"]().available()
        assert not avail.ok
        assert f"the account of {kubeconfig} may not create namespaces" in str(avail)
        monkeypatch.setenv(target.KUBECONFIG_VAR, str(tmp_path / "nowhere.kubeconfig"))
        (tmp_path / "nowhere.kubeconfig").write_text(
            kubeconfig.read_text().replace(server, "https://127.0.0.1:1"))
        avail = protocols.environments()["pod"]().available()
        assert not avail.ok and "cannot be reached" in str(avail)
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=true", timeout=120)
