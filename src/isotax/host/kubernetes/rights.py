"""What an account must be allowed to do on a cluster isotax did not build, and how that is
asked and granted: the rights (every verb on every resource isotax's kubectl calls use), the
SelfSubjectAccessReviews that ask the API server about each (one `kubectl create` of a List:
exact answers even where a webhook authorizer makes `auth can-i --list` incomplete), the
reader of their answers, and the ClusterRole that grants exactly what is missing. Also the
version skew between kubectl and the API server. Pure functions, tested on real output.

isotax's namespaces (itx-pod-<tag>, itx-lg-<tag>) are made by the run with fresh names, so no
RoleBinding can exist in them beforehand: their rights come from a ClusterRole bound with a
ClusterRoleBinding, and are asked in a namespace of each prefix that does not exist yet.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

CLUSTER_ROLE = "itx-isotax"  # the ClusterRole isotax's docs give, and `cluster up --managed` binds
NAMESPACE_PREFIXES = ("itx-pod-", "itx-lg-")  # the environments' and the load generator's
SUPPORTED_SKEW = 1  # kubectl is supported within one minor version of the API server


@dataclass(frozen=True)
class Right:
    """One verb on one resource, cluster-wide (namespaced False) or in isotax's namespaces,
    or in one namespace (a pull secret's own)."""

    verb: str
    resource: str  # "pods", "pods/exec", "endpointslices"
    group: str = ""  # the API group: "" core, "discovery.k8s.io", "node.k8s.io"
    namespaced: bool = True
    namespace: str = ""  # a namespace of the user's (a pull secret's); "" isotax's own
    name: str = ""  # one object (resourceNames), "" any

    def words(self) -> str:
        what = self.resource + (f".{self.group}" if self.group else "")
        where = ("" if not self.namespaced else f" {self.name!r} in namespace {self.namespace}"
                 if self.namespace else " in isotax's namespaces")
        return f"{self.verb} {what}{where}"


def _rights(group: str, resource: str, verbs: str, namespaced: bool = True) -> list[Right]:
    return [Right(v, resource, group, namespaced) for v in verbs.split()]


# Each kubectl call isotax makes on a foreign cluster, and the rights it takes:
# - apply (a GET, then a create) of its namespaces, pods, Services and pull secrets;
# - delete namespace --wait (a list and watch until it is gone), the leftovers' list;
# - get of a pod's status, its log (the ready marker), exec (create, and get: kubectl's
#   WebSocket upgrade is a GET the API server authorizes as get);
# - the Services' EndpointSlices (ready endpoints), the nodes (their size, kernel, boot),
#   the RuntimeClasses (a plan's class checked before a pod names it).
NEEDED: tuple[Right, ...] = (
    *_rights("", "namespaces", "create delete get list watch", namespaced=False),
    *_rights("", "nodes", "get list", namespaced=False),
    *_rights("node.k8s.io", "runtimeclasses", "get list", namespaced=False),
    *_rights("", "pods", "create get"),
    *_rights("", "pods/exec", "create get"),
    *_rights("", "pods/log", "get"),
    *_rights("", "services", "create get"),
    *_rights("", "secrets", "create get"),
    *_rights("discovery.k8s.io", "endpointslices", "list"),
)


def secret_right(namespace: str, name: str) -> Right:
    """Reading the user's pull secret NAME in its namespace, to copy it into isotax's."""
    return Right("get", "secrets", "", True, namespace, name)


def reviews(rights: Sequence[Right], probe_namespaces: Sequence[str]) -> dict[str, Any]:
    """The SelfSubjectAccessReviews asking about each right, as one kubectl List: a right in
    isotax's namespaces once per probe namespace (one of each prefix). Pure."""
    items = []
    for r in rights:
        spaces: Sequence[str] = ([r.namespace] if r.namespace else probe_namespaces) \
            if r.namespaced else [""]
        for ns in spaces:
            resource, _, sub = r.resource.partition("/")
            attrs = {"verb": r.verb, "group": r.group, "resource": resource}
            if sub:
                attrs["subresource"] = sub
            if ns:
                attrs["namespace"] = ns
            if r.name:
                attrs["name"] = r.name
            items.append({"apiVersion": "authorization.k8s.io/v1",
                          "kind": "SelfSubjectAccessReview",
                          "spec": {"resourceAttributes": attrs}})
    return {"apiVersion": "v1", "kind": "List", "items": items}


def json_documents(text: str) -> list[dict[str, Any]]:
    """The JSON documents of kubectl's output, one after another (`create -o json` prints
    each object it created), a List's items in its place. Pure."""
    out: list[dict[str, Any]] = []
    decoder, i = json.JSONDecoder(), 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        doc, i = decoder.raw_decode(text, i)
        out += doc.get("items", []) if doc.get("kind") == "List" else [doc]


def denied(answers: str, rights: Sequence[Right]) -> list[Right]:
    """The rights the API server's answers (`kubectl create -o json` of reviews()) do not
    allow, in rights' order. Pure."""
    refused = set()
    for item in json_documents(answers):
        attrs = item.get("spec", {}).get("resourceAttributes", {})
        if item.get("status", {}).get("allowed") is True:
            continue
        resource = attrs.get("resource", "") + (
            f"/{attrs['subresource']}" if attrs.get("subresource") else "")
        refused.add((attrs.get("verb", ""), resource, attrs.get("group", ""),
                     attrs.get("name", "")))
    return [r for r in rights if (r.verb, r.resource, r.group, r.name) in refused]


def cluster_role(rights: Iterable[Right], name: str = CLUSTER_ROLE) -> dict[str, Any]:
    """The ClusterRole that grants exactly these rights (a pull secret's: get of that one
    secret), one rule per resource and name, in a stable order. Pure."""
    rules: dict[tuple[str, str, str], list[str]] = {}
    for r in rights:
        verbs = rules.setdefault((r.group, r.resource, r.name), [])
        if r.verb not in verbs:
            verbs.append(r.verb)
    out = []
    for (group, resource, obj), verbs in rules.items():
        rule: dict[str, Any] = {"apiGroups": [group], "resources": [resource],
                                "verbs": sorted(verbs)}
        if obj:
            rule["resourceNames"] = [obj]
        out.append(rule)
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"isotax": "1"}}, "rules": out}


def role_name(username: str) -> str:
    """The ClusterRole (and binding) for what one account lacks: itx-isotax-<account>. Pure."""
    tail = re.sub(r"[^a-z0-9.-]+", "-", username.lower()).strip("-.")[:40].strip("-.")
    return f"{CLUSTER_ROLE}-{tail or 'account'}"


def binding(role: str, username: str, name: str = "") -> dict[str, Any]:
    """The ClusterRoleBinding of role to an account (`kubectl auth whoami`'s username: a
    ServiceAccount's system:serviceaccount:NS:NAME, else a user). Pure."""
    m = re.fullmatch(r"system:serviceaccount:([^:]+):([^:]+)", username)
    subject = ({"kind": "ServiceAccount", "namespace": m.group(1), "name": m.group(2)} if m
               else {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": username})
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name or role, "labels": {"isotax": "1"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": role},
            "subjects": [subject]}


def whoami(selfsubjectreview: str) -> str:
    """The username in `kubectl auth whoami -o json` output; "" where it has none. Pure."""
    try:
        return str(json.loads(selfsubjectreview)["status"]["userInfo"]["username"])
    except (ValueError, KeyError, TypeError):
        return ""


# -- kubectl's version skew --------------------------------------------------------------------

def versions(kubectl_version_json: str) -> tuple[str, str]:
    """(kubectl's gitVersion, the API server's) in `kubectl version -o json` output; "" for
    one it does not have (the server unreachable). Pure."""
    data = json.loads(kubectl_version_json)
    return (str((data.get("clientVersion") or {}).get("gitVersion", "")),
            str((data.get("serverVersion") or {}).get("gitVersion", "")))


def minor(git_version: str) -> tuple[int, int] | None:
    """(major, minor) of a Kubernetes gitVersion ("v1.37.2", "v1.31.1-aliyun.1",
    "v1.30.4-gke.1348000", "v1.29.3+k3s1"); None where it is not one. Pure."""
    m = re.match(r"v?(\d+)\.(\d+)", git_version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def skew_problem(client: str, server: str) -> str:
    """Why kubectl `client` is out of its supported skew with API server `server` (one minor
    version either way), in words; "" when it is within it, or a version is not known. Pure."""
    c, s = minor(client), minor(server)
    if c is None or s is None:
        return ""
    if c[0] != s[0] or abs(c[1] - s[1]) > SUPPORTED_SKEW:
        return (f"kubectl {client} is out of its supported version skew with the cluster's "
                f"API server {server} (within {SUPPORTED_SKEW} minor version either way)")
    return ""
