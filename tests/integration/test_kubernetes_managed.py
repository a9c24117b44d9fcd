"""`isotax run --kubeconfig` on a cluster set up the way managed clusters are, not the friendly
local one: `isotax cluster up --managed` (host.kubernetes.managed) has no RuntimeClass runc
and gVisor as class `gvisor` with handler `gvisor`; the run's account (a client certificate)
has only the ClusterRole isotax documents; Pod Security enforces baseline and a policy refuses
privileged namespaces; the workload image is in distribution's registry, which asks for
credentials. A small plan runs there through the CLI and its report shows the pods' tax; each
of a missing right, a forbidden hostNetwork, a missing pull secret and a class the cluster
lacks fails in one line that names the fix."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from isotax import protocols
from isotax.environments import kube_api as api
from isotax.host.kubernetes import cluster, managed, pki, registry, rights, target, teardown
from isotax.host.kubernetes import layout as L
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec, Unavailable

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def managed_cluster() -> Iterator[None]:
    """A managed-style cluster for the module, started and stopped here (nothing left)."""
    why = cluster.missing(managed_style=True)
    if why:
        pytest.skip(why)
    if cluster.supervisor_pid() is not None or teardown.present():
        pytest.skip("a local cluster runs here (`isotax cluster down`, then the test starts a "
                    "managed-style one)")
    cluster.up(managed_style=True)
    try:
        yield
    finally:
        assert cluster.down() == []


@pytest.fixture(scope="module")
def pushed(managed_cluster: None, image: ImageArtifacts) -> str:
    ref, _ = registry.push(image)
    return ref


@pytest.fixture
def account(pushed: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The run's cluster as --kubeconfig names it: the account with isotax's ClusterRole
    alone, the registry's image and its credentials as --pull-secret."""
    monkeypatch.setenv(target.KUBECONFIG_VAR, str(managed.USER_KUBECONFIG))
    monkeypatch.setenv(target.POD_IMAGE_VAR, pushed)
    monkeypatch.setenv(target.PULL_SECRETS_VAR, str(managed.PULL_SECRET))
    return pushed


def _start(tmp_path: Path, image: ImageArtifacts, **kw: object) -> None:
    """A pod environment started (and stopped) on the run's cluster."""
    spec = EnvSpec(name="itx-managed", kind="pod", image=image, workdir=tmp_path,
                   network=str(kw.pop("network", "pod")), options=dict(kw))
    protocols.environments()["pod"]().start(spec).stop()


PLAN = f"""
name = "itx-managed"
seed = 1
repetitions = 2
warmups = 0
timeout_s = 300
parity = "flag"
# Native runs on this host, which a load generator pod in the cluster does not reach on a
# cluster isotax did not build: the cluster's default runtime is the baseline.
baseline = "pod-default"

[loadgen]
node = "{L.NODE}"

[[environments]]
name = "pod-default"
kind = "pod"
network = "service"  # the load generator's node's proxy, waited for through it

[[environments]]
name = "pod-gvisor"
kind = "pod"
network = "pod"
options = {{ runtime_class = "gvisor", isolation = "sandbox" }}

[[workloads]]
name = "rr"
params = {{ proto = "tcp", seconds = 1 }}
"""


def _isotax_run(plan: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "plan.toml"
    path.write_text(plan)
    return subprocess.run([sys.executable, "-m", "isotax", "run", str(path), "--results",
                           str(tmp_path / "results"), "--kubeconfig",
                           str(managed.USER_KUBECONFIG), *args],
                          capture_output=True, text=True, timeout=1200)


def test_a_missing_pull_secret_fails_in_one_line(account: str, image: ImageArtifacts,
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # A tag no node has pulled: its manifest must come from the registry, which asks.
    ref, _ = registry.push(image, tag="itx-nosecret")
    monkeypatch.setenv(target.POD_IMAGE_VAR, ref)
    monkeypatch.setenv(target.PULL_SECRETS_VAR, "")
    with pytest.raises(Unavailable) as e:
        _start(tmp_path, image)
    line = str(e.value)
    assert "may not pull" in line and ref in line and "--pull-secret" in line, line
    assert "\n" not in line
    got = cluster.kubectl("get", "namespaces", "-o", "name").stdout
    assert "itx-pod-" not in got  # removed with the failure


def test_a_plan_runs_there_and_its_report_shows_the_pods_tax(account: str,
                                                             tmp_path: Path) -> None:
    p = _isotax_run(PLAN, tmp_path, "--pod-image", account, "--pull-secret",
                    str(managed.PULL_SECRET))
    assert p.returncode == 0, p.stderr[-3000:]
    (run_dir,) = [d for d in (tmp_path / "results").iterdir() if d.is_dir()]
    doc = json.loads((run_dir / "results.json").read_text())
    envs = {e["name"]: e for e in doc["environments"]}
    assert all(envs[n]["available"] for n in ("pod-default", "pod-gvisor")), envs
    assert [(f["environment"], f.get("reason")) for f in doc["failures"]] == []
    # What each pod is, found inside it: no class named is the cluster's runc; gvisor's
    # handler is named gvisor, and the pod is a sandbox all the same.
    assert envs["pod-gvisor"]["describe"]["identity"].startswith("sandbox")
    assert envs["pod-default"]["describe"]["identity"].startswith("container")
    assert "cluster's default runtime" in envs["pod-default"]["describe"]["runtime"]
    report = (run_dir / "report.md").read_text()
    for name in ("pod-default", "pod-gvisor"):
        assert name in report
    # The gVisor pod's tax on TCP_RR, against the cluster's default runtime: in the results
    # and in the report's table.
    (tax,) = [r for r in doc["results"] if r["environment"] == "pod-gvisor"
              and r["metric"] == "transactions_per_s"]
    assert tax["n"] == 2 and tax["ratio"] > 0
    assert any(line.startswith("| rr |  | transactions_per_s | ")
               and f"{tax['ratio']:.3f} [" in line for line in report.splitlines()), report
    got = cluster.kubectl("get", "namespaces", "-o", "name").stdout
    assert "itx-pod-" not in got and "itx-lg-" not in got
    assert "itx-pull-" not in cluster.kubectl("get", "secrets", "-A", "-o", "name").stdout


def test_a_forbidden_host_network_fails_in_one_line(account: str, tmp_path: Path) -> None:
    plan = PLAN.replace('name = "pod-default"\nkind = "pod"\nnetwork = "service"',
                        'name = "pod-host"\nkind = "pod"\nnetwork = "host"'
                        ).replace('baseline = "pod-default"', 'baseline = "pod-host"')
    assert "pod-host" in plan
    p = _isotax_run(plan, tmp_path, "--pod-image", account, "--pull-secret",
                    str(managed.PULL_SECRET))
    assert p.returncode == 2, p.stderr[-2000:]
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("isotax:")]
    assert "forbids Pod Security level privileged" in line and "pod-host" in line, line
    assert 'network = "pod"' in line


def test_a_class_the_cluster_lacks_fails_in_one_line(account: str, image: ImageArtifacts,
                                                     tmp_path: Path) -> None:
    with pytest.raises(Unavailable) as e:
        _start(tmp_path, image, runtime_class="runc")
    line = str(e.value)
    assert "has no RuntimeClass 'runc' (it has: gvisor)" in line, line
    assert "runtime_class" in line and "\n" not in line


def test_a_missing_right_fails_in_one_line_with_the_role_that_grants_it(
        pushed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ServiceAccount bound to isotax's ClusterRole less one right (reading a pod's log)."""
    ns, role = "itx-kc-limited", "itx-isotax-less"
    less = [r for r in rights.NEEDED if r.resource != "pods/log"]
    objs = [rights.cluster_role(less, role),
            rights.binding(role, f"system:serviceaccount:{ns}:limited", role)]
    assert cluster.kubectl("create", "namespace", ns).returncode == 0
    try:
        assert cluster.kubectl("-n", ns, "create", "serviceaccount", "limited").returncode == 0
        for obj in objs:
            done = cluster.kubectl("apply", "-f", "-", input_text=json.dumps(obj))
            assert done.returncode == 0, done.stderr
        token = cluster.kubectl("-n", ns, "create", "token", "limited", "--duration=10m")
        assert token.returncode == 0, token.stderr
        kubeconfig = tmp_path / "limited.kubeconfig"
        conf = json.loads(pki.kubeconfig(f"https://{L.NODE_IP}:{L.APISERVER_PORT}",
                                         (L.PKI / "ca.crt").read_bytes(), b"", b"", "limited"))
        conf["users"][0]["user"] = {"token": token.stdout.strip()}
        kubeconfig.write_text(json.dumps(conf))
        t = target.Target(kubeconfig, pushed, local=False)
        avail = api.foreign_access(t)
        line = str(avail)
        assert not avail.ok and "\n" not in line
        assert f"the account of {kubeconfig} may not get pods/log in isotax's namespaces" \
            in line, line
        assert f"isotax cluster role --kubeconfig {kubeconfig} | kubectl apply -f -" in line
        p = subprocess.run([sys.executable, "-m", "isotax", "cluster", "role", "--kubeconfig",
                            str(kubeconfig)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        import yaml

        docs = list(yaml.safe_load_all(p.stdout))
        assert docs[0]["kind"] == "ClusterRole" and docs[0]["rules"] == [
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]
        assert docs[1]["subjects"] == [{"kind": "ServiceAccount", "namespace": ns,
                                        "name": "limited"}]
        assert docs[0]["metadata"]["name"] == docs[1]["roleRef"]["name"] == \
            rights.role_name(f"system:serviceaccount:{ns}:limited")
    finally:
        cluster.kubectl("delete", "clusterrolebinding", role, "--ignore-not-found")
        cluster.kubectl("delete", "clusterrole", role, "--ignore-not-found")
        cluster.kubectl("delete", "namespace", ns, "--wait=true", timeout=120)
