"""A foreign cluster's pure parts (host.kubernetes.rights, environments.kube_api): the rights
isotax asks for, the access reviews' answers read from real `kubectl create -o json` output of
an account that lacks some (tests/data/kubernetes), the ClusterRole that grants exactly what is
missing, kubectl's version skew read from real `kubectl version -o json`, pull secrets, Pod
Security's words, and the managed-style cluster's own objects."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from support import DATA

from isotax.environments.kube_api import (
    pod_security_level,
    pod_security_refusal,
    pull_refusal,
    pull_secret_source,
)
from isotax.host.kubernetes import configs, managed, rights

K8S = DATA / "kubernetes"


def test_the_rights_cover_every_resource_isotax_touches() -> None:
    got = {(r.resource, r.group) for r in rights.NEEDED}
    assert got == {("namespaces", ""), ("nodes", ""), ("runtimeclasses", "node.k8s.io"),
                   ("pods", ""), ("pods/exec", ""), ("pods/log", ""), ("services", ""),
                   ("secrets", ""), ("endpointslices", "discovery.k8s.io")}
    # kubectl exec's WebSocket upgrade is a GET: both verbs.
    assert {r.verb for r in rights.NEEDED if r.resource == "pods/exec"} == {"create", "get"}
    assert not any(r.namespaced for r in rights.NEEDED if r.resource in ("namespaces", "nodes"))


def test_reviews_ask_in_isotax_s_namespaces_not_the_kubeconfig_s() -> None:
    wanted = [rights.Right("get", "pods/log"), rights.Right("list", "nodes", namespaced=False),
              rights.secret_right("team", "regcred")]
    items = rights.reviews(wanted, ["itx-pod-rights", "itx-lg-rights"])["items"]
    attrs = [i["spec"]["resourceAttributes"] for i in items]
    assert attrs[:2] == [
        {"verb": "get", "group": "", "resource": "pods", "subresource": "log",
         "namespace": "itx-pod-rights"},
        {"verb": "get", "group": "", "resource": "pods", "subresource": "log",
         "namespace": "itx-lg-rights"}]
    assert attrs[2] == {"verb": "list", "group": "", "resource": "nodes"}
    assert attrs[3] == {"verb": "get", "group": "", "resource": "secrets",
                        "namespace": "team", "name": "regcred"}
    assert all(i["kind"] == "SelfSubjectAccessReview" for i in items)


def test_the_answers_of_an_account_lacking_some_rights_read_from_real_output() -> None:
    # Captured on the managed-style cluster: a ServiceAccount bound to isotax's ClusterRole
    # less pods/log and endpointslices, asked for every right isotax needs.
    answers = (K8S / "ssar-list-limited.json").read_text()
    missing = rights.denied(answers, list(rights.NEEDED))
    assert [r.words() for r in missing] == [
        "get pods/log in isotax's namespaces",
        "list endpointslices.discovery.k8s.io in isotax's namespaces"]
    # The account with the whole ClusterRole: nothing missing.
    assert rights.denied((K8S / "ssar-list-full.json").read_text(), list(rights.NEEDED)) == []


def test_the_cluster_role_grants_exactly_what_is_missing() -> None:
    missing = [rights.Right("get", "pods/log"), rights.Right("create", "pods/exec"),
               rights.Right("get", "pods/exec"),
               rights.Right("list", "endpointslices", "discovery.k8s.io"),
               rights.secret_right("team", "regcred")]
    role = rights.cluster_role(missing)
    assert role["kind"] == "ClusterRole" and role["metadata"]["name"] == "itx-isotax"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
         "resourceNames": ["regcred"]}]
    whole = rights.cluster_role(rights.NEEDED)["rules"]
    assert sum(len(r["verbs"]) for r in whole) == len(rights.NEEDED)
    user = rights.binding("itx-isotax", "itx-user")["subjects"]
    assert user == [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io",
                     "name": "itx-user"}]
    sa = rights.binding("itx-isotax", "system:serviceaccount:ci:runner")["subjects"]
    assert sa == [{"kind": "ServiceAccount", "namespace": "ci", "name": "runner"}]
    assert rights.whoami((K8S / "auth-whoami.json").read_text()) == "itx-user"
    assert rights.role_name("itx-user") == "itx-isotax-itx-user"
    assert rights.role_name("system:serviceaccount:ci:runner") == \
        "itx-isotax-system-serviceaccount-ci-runner"
    assert rights.role_name("") == "itx-isotax-account"
    assert rights.whoami("not json") == ""


def test_kubectl_s_version_skew_from_real_output() -> None:
    client, server = rights.versions((K8S / "kubectl-version.json").read_text())
    assert (client, server) == ("v1.37.2", "v1.37.2")
    assert rights.skew_problem(client, server) == ""
    # Managed clusters' versions carry their vendor's suffix.
    assert rights.minor("v1.30.4-gke.1348000") == (1, 30)
    assert rights.minor("v1.29.3+k3s1") == (1, 29) and rights.minor("garbage") is None
    assert rights.skew_problem(client, "v1.36.9-eks-1") == ""
    assert rights.skew_problem(client, "v1.38.0") == ""
    line = rights.skew_problem(client, "v1.35.4-gke.100")
    assert line.startswith("kubectl v1.37.2 is out of its supported version skew with the "
                           "cluster's API server v1.35.4-gke.100") and "\n" not in line
    assert rights.skew_problem(client, "") == ""  # unreachable: said elsewhere
    unreachable = json.dumps({"clientVersion": {"gitVersion": "v1.37.2"}})
    assert rights.versions(unreachable) == ("v1.37.2", "")


def test_pull_secrets_are_a_docker_config_or_a_secret_s_name(tmp_path: Path) -> None:
    conf = tmp_path / "config.json"
    conf.write_text(managed.docker_config("pw"))
    assert pull_secret_source(str(conf), "default") == conf
    auth = json.loads(conf.read_text())["auths"][managed.REGISTRY]["auth"]
    assert base64.b64decode(auth) == b"itx:pw"
    assert pull_secret_source("regcred", "team") == ("team", "regcred")
    assert pull_secret_source("ci/regcred", "team") == ("ci", "regcred")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match=r"not a docker config\.json"):
        pull_secret_source(str(bad), "default")
    with pytest.raises(ValueError, match="no such file, nor a Secret"):
        pull_secret_source("./missing/Config.JSON", "default")


def test_pod_security_and_pull_refusals_in_one_line() -> None:
    assert pod_security_level(True) == "privileged" and pod_security_level(False) == "baseline"
    vap = ('Error from server (Forbidden): error when creating "ns.json": namespaces '
           '"itx-pod-abc" is forbidden: ValidatingAdmissionPolicy \'itx-pod-security-ceiling\' '
           "with binding 'itx-pod-security-ceiling' denied request: this cluster allows no "
           "namespace labelled pod-security.kubernetes.io/enforce=privileged")
    line = pod_security_refusal(vap, "privileged", "pod pod-host (network host)")
    assert line.startswith("the cluster forbids Pod Security level privileged in isotax's "
                           "namespaces, which pod pod-host (network host) needs")
    assert 'network = "pod"' in line and "\n" not in line
    psa = ('Error from server (Forbidden): pods "itx-pod" is forbidden: violates PodSecurity '
           '"baseline:latest": host namespaces (hostNetwork=true)')
    assert "hostNetwork=true" in pod_security_refusal(psa, "privileged", "pod p")
    assert pod_security_refusal("Error from server (Forbidden): no", "baseline", "p") == ""
    words = ('ErrImagePull: failed to pull and unpack image "10.217.0.1:5000/itx/w:t": '
             'failed to resolve image: unexpected status from HEAD request to '
             'https://10.217.0.1:5000/v2/itx/w/manifests/t: 401 Unauthorized')
    line = pull_refusal(words, "10.217.0.1:5000/itx/w:t")
    assert line.startswith("the cluster's nodes may not pull 10.217.0.1:5000/itx/w:t")
    assert "--pull-secret" in line
    assert pull_refusal("ErrImagePull: not found", "x") == ""


def test_the_managed_style_cluster_s_own_configuration() -> None:
    objs = {o["kind"]: o for o in json.loads(managed.objects())["items"]}
    assert objs["RuntimeClass"]["metadata"]["name"] == objs["RuntimeClass"]["handler"] == \
        "gvisor"
    assert objs["ClusterRole"] == rights.cluster_role(rights.NEEDED)
    assert objs["ClusterRoleBinding"]["subjects"][0]["name"] == managed.USER
    assert "privileged" in objs["ValidatingAdmissionPolicy"]["spec"]["validations"][0][
        "expression"]
    psa = json.loads(managed.admission_config())["plugins"][0]["configuration"]["defaults"]
    assert psa["enforce"] == "baseline"
    reg = json.loads(managed.registry_config())
    assert reg["http"]["addr"] == managed.REGISTRY and "tls" in reg["http"]
    assert "htpasswd" in reg["auth"] and "debug" not in reg["http"]
    files = configs.files(managed=True)
    assert "runtimes.gvisor]" in files["containerd.toml"]
    assert "runtimes.runsc]" not in files["containerd.toml"]
    assert f'config_path = "{managed.hosts_dir(configs.L.LOCAL)}"' in files["containerd.toml"]
    hosts = files[f"certs.d/{managed.REGISTRY}/hosts.toml"]
    assert f'[host."https://{managed.REGISTRY}"]' in hosts and "ca = " in hosts
    classes = json.loads(files["runtimeclasses.json"])["items"]
    assert [(c["metadata"]["name"], c["handler"]) for c in classes] == [("gvisor", "gvisor")]
    friendly = configs.files()
    assert "config_path" not in friendly["containerd.toml"] and "admission.json" not in friendly


def test_the_docs_give_the_cluster_role_isotax_checks_for() -> None:
    import re

    import yaml

    doc = (Path(__file__).parents[2] / "docs" / "kubernetes.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "ClusterRole" in b]
    written = yaml.safe_load("\n".join(line[2:] for line in block.splitlines()))
    assert written == rights.cluster_role(rights.NEEDED)
