"""The load generator pod's pure parts: the pod it asks for (on the plan's node, the image's
clients, never pulled, no limits), how kubectl's own failures are told from a client's exit
status, and the plan's [loadgen] node."""

from __future__ import annotations

import pytest

from isotax.environments.kube_api import exec_completed, kubectl_failed
from isotax.loadgen.pod import NAMESPACE_PREFIX, POD, loadgen_manifest
from isotax.plan import PlanError, parse_plan
from isotax.protocols import Completed

PLAN = """
name = "p"
[loadgen]
{loadgen}
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "rr"
"""


def test_the_load_generator_pod_is_on_its_node_with_the_images_clients() -> None:
    m = loadgen_manifest(namespace=f"{NAMESPACE_PREFIX}abc123", image="localhost/itx/w:h",
                         node="itx-node2", owner="1-2")
    spec = m["spec"]
    assert m["metadata"]["name"] == POD and m["metadata"]["labels"]["isotax"] == "1"
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "itx-node2"}
    # The cluster's default runtime: a managed cluster may have no RuntimeClass `runc`.
    assert "runtimeClassName" not in spec and "hostNetwork" not in spec
    assert "imagePullSecrets" not in spec
    (c,) = spec["containers"]
    assert c["image"] == "localhost/itx/w:h" and c["imagePullPolicy"] == "Never"
    # No limit holds the clients back; the token request always fits.
    assert "limits" not in c["resources"] and c["resources"]["requests"]["cpu"] == "100m"
    assert "dnsPolicy" not in spec  # the cluster's DNS, unless it has none (the local one):
    assert loadgen_manifest(namespace="itx-lg-x", image="i", node="n", owner="o",
                            cluster_dns=False)["spec"]["dnsPolicy"] == "Default"


def _done(rc: int, stderr: str, stdout: str = "") -> Completed:
    return Completed(("kubectl",), rc, stdout, stderr, 0.1)


@pytest.mark.parametrize("stderr", [
    "The connection to the server 10.217.0.1:6443 was refused - did you specify the right "
    "host or port?\n",
    'Error from server (NotFound): pods "itx-loadgen" not found\n',
    "error: unable to upgrade connection: container not found (\"workload\")\n",
])
def test_kubectls_own_failure_is_told_from_the_clients(stderr: str) -> None:
    assert kubectl_failed(_done(1, stderr)) == stderr.strip()


def test_a_clients_exit_status_is_the_clients() -> None:
    done = _done(3, "netperf: oops\ncommand terminated with exit code 3\n", "x")
    assert kubectl_failed(done) == ""
    got = exec_completed(["netperf"], done, 0.0)
    assert got.returncode == 3 and got.stderr == "netperf: oops\n" and got.stdout == "x"
    assert kubectl_failed(_done(0, "")) == "" and kubectl_failed(_done(124, "timed out")) == ""
    assert kubectl_failed(_done(1, "")) == "kubectl exited 1"


def test_the_plan_puts_its_load_generator_on_a_node() -> None:
    p = parse_plan(PLAN.format(loadgen='node = "itx-node2"'))
    assert p.loadgen.node == "itx-node2" and not p.loadgen.remote
    with pytest.raises(PlanError) as e:
        parse_plan(PLAN.format(loadgen='node = "itx-node2"\nhost = "ssh://lg.example"'))
    assert "keep one" in str(e.value) and "\n" not in str(e.value)


def test_a_foreign_clusters_pods_are_checked_against_the_images_packages() -> None:
    from isotax.environments.kube_api import image_differs

    want = {"iperf3": "3.12-1+deb12u1", "xz-utils": "5.4.1-1"}
    same = "iperf3 3.12-1+deb12u1\nxz-utils 5.4.1-1\n"
    assert image_differs(want, same) == []
    assert image_differs(want, "iperf3 3.16-1\nxz-utils 5.4.1-1\n") == [
        "iperf3 3.16-1 (the image has 3.12-1+deb12u1)"]
    assert image_differs(want, "xz-utils 5.4.1-1\n") == [
        "iperf3 missing (the image has 3.12-1+deb12u1)"]


def test_a_services_endpoint_is_ready_for_the_pod() -> None:
    from isotax.environments.kube_api import endpoint_ready

    slices = {"items": [{"endpoints": [
        {"addresses": ["10.217.1.7"], "conditions": {"ready": False}},
        {"addresses": ["10.217.1.8"], "conditions": {"ready": True}}]}]}
    assert endpoint_ready(slices, ["10.217.1.8"])
    assert not endpoint_ready(slices, ["10.217.1.7"]) and not endpoint_ready({}, ["10.217.1.8"])
    assert not endpoint_ready(slices, ["10.217.1.8", "10.217.1.7"])


def test_quantities_read() -> None:
    from isotax.environments.kube_api import kib

    assert kib("24115920Ki") == 24115920 and kib("32Gi") == 32 << 20
    assert kib("1048576") == 1024 and kib("lots") == 0


def test_the_runs_cluster_is_the_local_one_unless_a_kubeconfig_is_given(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from isotax.host.kubernetes import layout as L
    from isotax.host.kubernetes import target

    monkeypatch.delenv(target.KUBECONFIG_VAR, raising=False)
    assert target.current() == target.Target(L.KUBECONFIG)
    with pytest.raises(ValueError, match="no such file"):
        target.choose(str(Path(str(tmp_path)) / "none"), "r")
    k = Path(str(tmp_path)) / "k"
    k.write_text("{}")
    target.choose(str(k), "registry/w:1")
    try:
        t = target.current()
        assert not t.local and t.kubeconfig == k and t.pod_image == "registry/w:1"
        assert str(k) in t.words()
    finally:
        target.choose(None, None)
    assert target.current().local
