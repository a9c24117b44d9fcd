"""The local cluster set up the way managed clusters are (`isotax cluster up --managed`), to
prove `isotax run --kubeconfig` on a cluster that is not friendly to it:

- no RuntimeClass `runc` (a pod that names none gets containerd's default runtime, runc);
  gVisor registered as the class `gvisor` with the containerd handler `gvisor` (not runsc);
- an account of its own (a client certificate, user itx-user, kubeconfig
  layout.ETC/user.kubeconfig) bound to the ClusterRole isotax documents (rights.NEEDED) and
  nothing else;
- Pod Security admission enforcing `baseline` by default (the API server's
  AdmissionConfiguration), and a ValidatingAdmissionPolicy that refuses a namespace labelled
  `privileged`, as many managed clusters do: no hostNetwork pods;
- the workload image in a real OCI registry that asks for credentials: distribution's
  `registry` (built by scripts/kubernetes-build.sh), on the node's address, TLS with a
  certificate of the cluster's CA, htpasswd (bcrypt) with a password made at `up`; the nodes'
  containerd trust it through a hosts.toml for that address alone; a docker config.json with
  the credentials (layout.ETC/pull-secret.json) for `--pull-secret`.

Pure renderers here; the supervisor (cluster.py) writes and applies them. Everything lives
under the cluster's directories and goes with `cluster down`.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

from isotax.host.kubernetes import layout as L
from isotax.host.kubernetes import rights

MARK = L.RUN / "managed"  # there while a managed-style cluster runs
USER = "itx-user"
USER_KUBECONFIG = L.ETC / "user.kubeconfig"
PULL_SECRET = L.ETC / "pull-secret.json"  # the registry's credentials, a docker config.json
REGISTRY_PORT = 5000
# The registry's address, on the first node's, in the cluster's recorded range: computed on
# each read (__getattr__ below), like layout.NODE_IP, so a cluster moved off 10.217.0.0/16
# has its registry where its node is.
REGISTRY: str
REGISTRY_USER = "itx"
HTPASSWD = L.ETC / "registry.htpasswd"
GVISOR_CLASS = GVISOR_HANDLER = "gvisor"
RUNTIME_CLASSES = {GVISOR_CLASS: GVISOR_HANDLER}
CEILING = "itx-pod-security-ceiling"  # the policy that refuses privileged namespaces
# The account's certificate and the registry's serving one (pki.make adds them): computed on
# each read, as the registry's address is.
CERTS: dict[str, tuple[str, str, str | None]]



def registry() -> str:
    """host:port of the registry: the first node's address in the recorded range."""
    return f"{L.NODE_IP}:{REGISTRY_PORT}"


if not TYPE_CHECKING:  # mypy reads the annotations above, so a misspelt name is still caught
    def __getattr__(name: str) -> Any:
        if name == "REGISTRY":
            return registry()
        if name == "CERTS":
            return {"user": (USER, "", None),
                    "registry": ("itx-registry", "", f"IP:{L.NODE_IP}")}
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def admission_config() -> str:
    """The API server's AdmissionConfiguration: Pod Security enforces baseline (and warns
    and audits it) in every namespace without a label of its own; kube-system is exempt."""
    levels = {f"{mode}{suffix}": value for mode in ("enforce", "audit", "warn")
              for suffix, value in (("", "baseline"), ("-version", "latest"))}
    return json.dumps({
        "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
        "plugins": [{"name": "PodSecurity", "configuration": {
            "apiVersion": "pod-security.admission.config.k8s.io/v1",
            "kind": "PodSecurityConfiguration", "defaults": levels,
            "exemptions": {"usernames": [], "runtimeClasses": [],
                           "namespaces": ["kube-system"]}}}],
    }, indent=1) + "\n"


def objects() -> str:
    """What `up --managed` applies once the API server answers, as a kubectl List: the
    gvisor RuntimeClass, the ClusterRole isotax documents bound to the account, and the
    policy that refuses a privileged namespace."""
    label = {"isotax": "1"}
    items: list[dict[str, Any]] = [
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
         "metadata": {"name": name, "labels": label}, "handler": handler}
        for name, handler in RUNTIME_CLASSES.items()]
    items.append(rights.cluster_role(rights.NEEDED))
    items.append(rights.binding(rights.CLUSTER_ROLE, USER))
    items.append({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": CEILING, "labels": label},
        "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [
            {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
             "resources": ["namespaces"]}]},
            "validations": [{
                "expression": "!has(object.metadata.labels) || !('pod-security.kubernetes.io/"
                              "enforce' in object.metadata.labels) || object.metadata.labels["
                              "'pod-security.kubernetes.io/enforce'] != 'privileged'",
                "message": "this cluster allows no namespace labelled pod-security.kubernetes"
                           ".io/enforce=privileged (no hostNetwork, hostPID or privileged "
                           "pods)"}]}})
    items.append({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": CEILING,
                                                                 "labels": label},
        "spec": {"policyName": CEILING, "validationActions": ["Deny"]}})
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=1) + "\n"


def registry_config() -> str:
    """distribution's configuration (YAML, written as JSON): on the node's address alone,
    TLS with the cluster CA's certificate, htpasswd, its store under the cluster's state; no
    debug or metrics listener."""
    return json.dumps({
        "version": 0.1, "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(L.LIB / "registry")},
                    "delete": {"enabled": True}},
        "http": {"addr": registry(), "tls": {"certificate": str(L.PKI / "registry.crt"),
                                           "key": str(L.PKI / "registry.key")}},
        "auth": {"htpasswd": {"realm": "itx-registry", "path": str(HTPASSWD)}},
    }, indent=1) + "\n"


def registry_argv() -> tuple[str, ...]:
    # OpenTelemetry off: distribution's default exporter would reach for localhost:4318.
    return ("env", "OTEL_TRACES_EXPORTER=none", "OTEL_SDK_DISABLED=true",
            str(L.binary("registry")), "serve", str(L.ETC / "registry.json"))


def hosts_toml() -> str:
    """containerd's hosts config for the registry's address alone: HTTPS, the cluster's CA."""
    return (f'server = "https://{registry()}"\n\n[host."https://{registry()}"]\n'
            f'  capabilities = ["pull", "resolve"]\n  ca = "{L.PKI / "ca.crt"}"\n')


def hosts_dir(n: L.NodeLayout) -> str:
    """The directory containerd reads hosts configs from (config_path), per node."""
    return str(n.etc / "certs.d")


def docker_config(password: str) -> str:
    """The registry's credentials as a docker config.json (what --pull-secret and a pusher
    take). Pure."""
    auth = base64.b64encode(f"{REGISTRY_USER}:{password}".encode()).decode()
    return json.dumps({"auths": {registry(): {"auth": auth}}}, indent=1) + "\n"


def workload_ref(recipe_hash: str) -> str:
    return f"{registry()}/itx/workload:{recipe_hash}"
