"""What isotax's pods (the `pod` environment's, the load generator's) say to the run's
cluster, through kubectl on its kubeconfig (host.kubernetes.target: the local cluster, or the
one --kubeconfig names): exec and its failures, an API server that stopped answering, a pod's
own words for where it is and the waits for it to run, isotax's namespaces and what is left of
them, what an account may do on a cluster isotax did not start; and the pure readers of what
the nodes say (ctr, iptables-save, EndpointSlices, dpkg-query)."""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from isotax.environments.base import READY_HELPER, READY_MARKER
from isotax.environments.runtime_cli import timed_exit_status, under_timeout
from isotax.host import command, owners
from isotax.host.kubernetes import cluster, rights, target
from isotax.host.kubernetes import layout as L
from isotax.parsers import procfs
from isotax.protocols import (
    Availability,
    Completed,
    Leftover,
    PlatformLost,
    Stage,
    Unavailable,
)

CONTAINER = "workload"  # the one container of each of isotax's pods


# A waiting pod's reasons that waiting will not mend: it fails now, in its own words.
HOPELESS = ("ErrImageNeverPull", "ErrImagePull", "ImagePullBackOff", "InvalidImageName",
            "RuntimeClass", "Unschedulable", "CreateContainerError")


def kubectl(*args: str, timeout: float = 60, input_text: str | None = None) -> Completed:
    """kubectl on the run's cluster (host.kubernetes.target: the local one, or --kubeconfig's)."""
    return target.current().kubectl(*args, timeout=timeout, input_text=input_text)


# Pod Security admission: the level each of isotax's namespaces is labelled with, the least
# its pod needs. The workload image runs as root with the runtime's default capabilities
# (baseline allows that; restricted does not); hostNetwork needs privileged.
PSA_LABEL = "pod-security.kubernetes.io/enforce"


def pod_security_level(host_network: bool) -> str:
    """The Pod Security level a pod of isotax's needs. Pure."""
    return "privileged" if host_network else "baseline"


def namespace_manifest(name: str, level: str = "baseline") -> dict[str, Any]:
    """A namespace of isotax's, labelled isotax, with the run that made it (where the process
    names one), so a cluster's owner sees whose it is, and with the Pod Security level its pod
    needs (a cluster whose default enforces a stricter one admits it then, or says it
    forbids it)."""
    labels = {"isotax": "1", PSA_LABEL: level}
    run = re.sub(r"[^A-Za-z0-9_.-]", "-", owners.my_run())[:63].strip("-_.")
    if run:
        labels["isotax.run"] = run
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels,
                         "annotations": {"isotax.owner": owners.mine()}}}


def pod_security_refusal(kubectl_words: str, level: str, why: str) -> str:
    """The one line for a namespace or pod the cluster refused for its Pod Security (a level
    it forbids in a namespace label, or a pod beyond the level a namespace enforces); "" for
    any other refusal. Pure."""
    words = kubectl_words.strip().splitlines()[-1] if kubectl_words.strip() else ""
    if "PodSecurity" not in words and PSA_LABEL not in words and "pod-security" not in words:
        return ""
    return (f"the cluster forbids Pod Security level {level} in isotax's namespaces, which "
            f"{why} needs ({words[-300:]}): give the pod network = \"pod\" or "
            "\"service\", or ask the cluster's admin to allow that level")


def exec_argv(namespace: str, argv: Sequence[str], timeout: float, pod: str) -> list[str]:
    """`kubectl exec` arguments: the program under `timeout` inside the pod. Pure."""
    return ["exec", "-n", namespace, pod, "-c", CONTAINER, "--",
            *under_timeout(argv, timeout)]


def pod_exec(namespace: str, pod: str, argv: Sequence[str], timeout: float) -> Completed:
    """argv run in the pod's container (exec_argv); PlatformLost where the API server stopped
    answering, so a lost cluster is not taken for the program's failure."""
    t0 = time.monotonic()
    p = kubectl(*exec_argv(namespace, argv, timeout, pod), timeout=timeout + 15)
    if kubectl_failed(p) and (down := api_unreachable()):
        raise lost(down)
    return exec_completed(argv, p, t0)


def kubectl_failed(done: Completed) -> str:
    """kubectl's own words where `kubectl exec` itself failed (the API server or the kubelet
    unreachable, the pod gone), "" where it ran the program (whatever that returned) or
    timed out. Pure."""
    if done.returncode in (0, command.TIMED_OUT) or re.search(
            r"command terminated with exit code \d+\s*$", done.stderr):
        return ""
    lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
    return lines[-1][:240] if lines else f"kubectl exited {done.returncode}"


def api_unreachable() -> str:
    """kubectl's words when the cluster's API server does not answer (its /readyz), "" when
    it does."""
    done = kubectl("get", "--raw", "/readyz", "--request-timeout=10s", timeout=20)
    if done.returncode == 0:
        return ""
    return kubectl_failed(done) or f"/readyz: {done.stdout.strip()[-200:]}"


def lost(why: str) -> PlatformLost:
    return PlatformLost(f"the Kubernetes API server of {target.current().words()} does not "
                        f"answer: {why}")


def image_differs(want: Mapping[str, str], dpkg_query: str) -> list[str]:
    """The packages whose version inside a pod (`dpkg-query -W` output, "name version" per
    line) differs from the workload image's, in words; [] when the bits are the same. Pure."""
    have = dict(line.split(None, 1) for line in dpkg_query.splitlines() if " " in line.strip())
    return [f"{name} {have.get(name, 'missing')} (the image has {version})"
            for name, version in sorted(want.items()) if have.get(name, "").strip() != version]


def endpoint_ready(slices: Mapping[str, Any], pod_ips: Sequence[str]) -> bool:
    """Whether an EndpointSliceList has every one of the pods' addresses as a ready
    endpoint. Pure."""
    ready = {a for item in slices.get("items", []) or [] for ep in item.get("endpoints", []) or []
             if (ep.get("conditions") or {}).get("ready") for a in ep.get("addresses", [])}
    return set(pod_ips) <= ready


def task_status(ctr_tasks_ls: str, container_id: str) -> str:
    """A container's task status in `ctr tasks ls` output (RUNNING, PAUSED, STOPPED, ...);
    "" when it has no task (its processes are gone). Pure."""
    for line in ctr_tasks_ls.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3 and parts[0] == container_id:
            return parts[2]
    return ""


def exec_completed(argv: Sequence[str], done: Completed, t0: float) -> Completed:
    """What a program run by `kubectl exec` (exec_argv) did: its exit status and its own
    words, without kubectl's line for a non-zero exit."""
    err = re.sub(r"command terminated with exit code \d+\n?$", "", done.stderr)
    return Completed(tuple(argv), timed_exit_status(done.returncode, done.stderr), done.stdout,
                     err, time.monotonic() - t0)


def ready_ns(log: str) -> int | None:
    """The CLOCK_MONOTONIC ns of itx-ready's marker in the container's log. Pure."""
    m = re.search(rf"{READY_MARKER} (\d+)", log)
    return int(m.group(1)) if m else None


def kib(quantity: str) -> int:
    """KiB of a Kubernetes memory quantity as the API reports allocatable ("24115920Ki",
    "32Gi", "33554432"). Pure."""
    m = re.fullmatch(r"(\d+)([KMGT]i)?", quantity.strip())
    if not m:
        return 0
    scale = {"Ki": 1, "Mi": 1 << 10, "Gi": 1 << 20, "Ti": 1 << 30}
    return int(m.group(1)) * scale[m.group(2)] if m.group(2) else int(m.group(1)) // 1024


def local_addresses() -> set[str]:
    """This host's IPv4 addresses (its own network namespace's)."""
    out = command.run(["ip", "-o", "-4", "addr", "show"], 10).stdout
    return {f.split("/")[0] for line in out.splitlines()
            for f in line.split()[3:4]}


def pod_words(pod: Mapping[str, Any]) -> str:
    """Why a pod is where it is, in its own words (its container's waiting or terminated
    reason and message, else its conditions'). Pure."""
    status = pod.get("status", {})
    for c in status.get("containerStatuses", []) or []:
        for key in ("waiting", "terminated"):
            s = (c.get("state") or {}).get(key)
            if s:
                return f"{s.get('reason', key)}: {s.get('message', '')}".strip(": ")
    for c in status.get("conditions", []) or []:
        if c.get("status") == "False" and c.get("message"):
            return f"{c.get('reason', '')}: {c['message']}".strip(": ")
    return status.get("phase", "no status")


def service_programmed(nat: str, cluster_ip: str, pod_ips: Sequence[str]) -> bool:
    """Whether `iptables-save -t nat` output has kube-proxy's rules for the Service address
    and an endpoint at each of the pods' addresses. Pure."""
    return f"-d {cluster_ip}/32" in nat and all(
        re.search(rf"--to-destination {re.escape(ip)}:\d+", nat) is not None for ip in pod_ips)


def delete_namespace(namespace: str) -> None:
    done = kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=90s",
                   "--ignore-not-found", timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl delete namespace {namespace}: {done.stderr.strip()[:200]}")


def namespaces_left(prefix: str, what: str) -> list[Leftover]:
    """isotax's namespaces of `prefix` still in the run's cluster (the local one while it
    runs, or --kubeconfig's): their tag names their owner, so a resumed run's recovery removes
    those a dead run could not (its API server gone)."""
    t = target.current()
    if t.local and (cluster.supervisor_pid() is None or cluster.state() != cluster.READY):
        return []
    got = t.kubectl("get", "namespaces", "-l", "isotax=1", "-o", "name", timeout=30)
    names = [n.removeprefix("namespace/") for n in got.stdout.split()]
    return [Leftover(f"Kubernetes namespace {n}{what}",
                     [(t.kubectl_path, f"--kubeconfig={t.kubeconfig}", "delete",
                       "namespace", n, "--wait=true")], stage=Stage.CONTAINER, names=(n,))
            for n in names if n.startswith(prefix)]


def foreign_access(t: target.Target, secrets: Sequence[str] = ()) -> Availability:
    """Whether the account of t's kubeconfig can reach its API server, with a kubectl within
    its supported version skew, and may do everything isotax does there (rights.NEEDED in
    isotax's namespaces and the cluster's, and reading the pull secrets named by NAME), in
    one line naming what it cannot and the fix. Asked once per process for each cluster and
    set of secrets, before anything is created there."""
    return _foreign_access(t, tuple(dict.fromkeys((*t.pull_secrets, *secrets))))


@functools.lru_cache(maxsize=8)
def _foreign_access(t: target.Target, secrets: tuple[str, ...]) -> Availability:
    if not t.local and t.kubectl_path != str(L.binary("kubectl")):
        if not Path(t.kubectl_path).is_file():
            return Availability.no(f"{target.KUBECTL_VAR}={t.kubectl_path}: no such file",
                                   "name a kubectl binary, or unset it for isotax's own")
    elif not L.binary("kubectl").exists():
        return Availability.no(f"kubectl {L.K8S_VERSION} is not built here",
                               "bash scripts/setup.sh --kubernetes")
    version = t.kubectl("version", "-o", "json", "--request-timeout=15s", timeout=30)
    client, server = "", ""
    with contextlib.suppress(ValueError):
        client, server = rights.versions(version.stdout)
    if not server:
        return Availability.no(f"{t.words()} cannot be reached: "
                               f"{kubectl_failed(version) or version.stderr.strip()[-200:]}",
                               "check the kubeconfig's server and credentials")
    skew = rights.skew_problem(client, server)
    if skew:
        return Availability.no(skew, f"set {target.KUBECTL_VAR} to a kubectl "
                                     f"v{'.'.join(map(str, rights.minor(server) or ()))}.x")
    try:
        wanted = wanted_rights(t, secrets)
    except ValueError as e:
        return Availability.no(str(e), "give --pull-secret an existing docker config.json "
                                       "or the NAME (NAMESPACE/NAME) of a Secret")
    try:
        missing = missing_rights(t, wanted)
    except RuntimeError as e:
        return Availability.no(f"{t.words()} did not answer isotax's access reviews: {e}",
                               "use an account that may create SelfSubjectAccessReviews "
                               "(every authenticated one may, through system:basic-user)")
    if missing:
        return Availability.no(
            f"the account of {t.kubeconfig} may not "
            f"{', '.join(r.words() for r in missing)}",
            f"have the cluster's admin grant exactly that: isotax cluster role --kubeconfig "
            f"{t.kubeconfig} | kubectl apply -f -")
    return Availability.yes()


def wanted_rights(t: target.Target, secrets: Sequence[str] = ()) -> list[rights.Right]:
    """Every right isotax needs on t: rights.NEEDED, and reading each pull secret given by
    name. ValueError in one line for a pull secret that is neither a file nor a name."""
    specs = dict.fromkeys((*t.pull_secrets, *secrets))
    named = [src for src in (pull_secret_source(s, kubeconfig_namespace(t)) for s in specs)
             if isinstance(src, tuple)]
    return [*rights.NEEDED, *(rights.secret_right(ns, name) for ns, name in named)]


def missing_rights(t: target.Target, wanted: Sequence[rights.Right]) -> list[rights.Right]:
    """Those of `wanted` the account of t may not do, in one kubectl call: a List of
    SelfSubjectAccessReviews, isotax's namespaces asked in one name of each prefix (none
    exists before the run makes it). RuntimeError where the reviews get no answer."""
    probe = [f"{prefix}rights" for prefix in rights.NAMESPACE_PREFIXES]
    asked = t.kubectl("create", "-o", "json", "-f", "-", timeout=60,
                      input_text=json.dumps(rights.reviews(wanted, probe)))
    if asked.returncode != 0:
        raise RuntimeError(kubectl_failed(asked) or asked.stderr.strip()[-200:])
    return rights.denied(asked.stdout, wanted)


# -- pull secrets --------------------------------------------------------------------------

PULL_SECRET_PREFIX = "itx-pull-"


def kubeconfig_namespace(t: target.Target) -> str:
    """The namespace of the kubeconfig's current context ("default" where it names none):
    where a pull secret named without one is."""
    got = t.kubectl("config", "view", "--minify", "-o",
                    "jsonpath={.contexts[0].context.namespace}", timeout=20)
    return got.stdout.strip() or "default"


def pull_secret_source(spec: str, default_namespace: str) -> Path | tuple[str, str]:
    """Where a pull secret comes from: a docker config.json file (its path), or a Secret of
    the user's, (namespace, name). ValueError in one line for neither."""
    path = Path(spec).expanduser()
    if path.is_file():
        try:
            auths = json.loads(path.read_text()).get("auths")
        except (OSError, ValueError, AttributeError):
            auths = None
        if not isinstance(auths, dict):
            raise ValueError(f"pull secret {spec}: not a docker config.json (no \"auths\")")
        return path
    ns, _, name = spec.rpartition("/")
    if not re.fullmatch(r"[a-z0-9]([-.a-z0-9]*[a-z0-9])?", name) or (
            ns and not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", ns)):
        raise ValueError(f"pull secret {spec!r}: no such file, nor a Secret's NAME or "
                         "NAMESPACE/NAME")
    return (ns or default_namespace, name)


def pull_secret_manifests(t: target.Target, namespace: str, specs: Sequence[str]
                          ) -> list[dict[str, Any]]:
    """The pull secrets, as Secrets of isotax's namespace (itx-pull-N, labelled isotax):
    a file's content as a dockerconfigjson, a named Secret's type and data copied.
    Unavailable in one line where a named Secret cannot be read."""
    out = []
    for i, spec in enumerate(dict.fromkeys(specs)):
        src = pull_secret_source(spec, kubeconfig_namespace(t))
        if isinstance(src, Path):
            kind = "kubernetes.io/dockerconfigjson"
            data = {".dockerconfigjson": base64.b64encode(src.read_bytes()).decode()}
        else:
            got = t.kubectl("get", "secret", "-n", src[0], src[1], "-o", "json", timeout=30)
            if got.returncode != 0:
                raise Unavailable(Availability.no(
                    f"pull secret {spec}: {kubectl_failed(got) or got.stderr.strip()[-200:]}",
                    f"create it (kubectl create secret docker-registry {src[1]} -n {src[0]} "
                    "...), or give --pull-secret a docker config.json"))
            secret = json.loads(got.stdout)
            kind, data = secret.get("type", "Opaque"), secret.get("data", {})
        out.append({"apiVersion": "v1", "kind": "Secret", "type": kind,
                    "metadata": {"name": f"{PULL_SECRET_PREFIX}{i}", "namespace": namespace,
                                 "labels": {"isotax": "1"}},
                    "data": data})
    return out


PULL_WORDS = ("401", "403", "Unauthorized", "unauthorized", "no basic auth",
              "authorization failed", "pull access denied", "denied")


def pull_refusal(pod_words_: str, image: str) -> str:
    """The one line for a pod whose image its node could not pull for want of credentials;
    "" for any other state. Pure."""
    if not any(w in pod_words_ for w in ("ErrImagePull", "ImagePullBackOff")) or not any(
            w in pod_words_ for w in PULL_WORDS):
        return ""
    return (f"the cluster's nodes may not pull {image} ({pod_words_[:400]}): give the "
            "registry's credentials with --pull-secret NAME|config.json, or options.pull_secret "
            "in the plan")


def get_pod(namespace: str, name: str) -> dict[str, Any]:
    """The pod as the API has it; {} where it cannot be read."""
    got = kubectl("get", "pod", "-n", namespace, name, "-o", "json", timeout=30)
    return json.loads(got.stdout) if got.returncode == 0 else {}


def wait_running(namespace: str, name: str, timeout: float) -> dict[str, Any]:
    """The pod once Running. Unavailable in its own words where it ended before it ran, where
    waiting will not mend it (HOPELESS), or after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = get_pod(namespace, name)
        phase = pod.get("status", {}).get("phase", "")
        if phase == "Running":
            return pod
        if phase in ("Failed", "Succeeded"):
            raise Unavailable(Availability.no(f"pod {namespace}/{name} is {phase} before it "
                                              f"ran: {pod_words(pod)}"))
        waiting = pod_words(pod)
        if any(w in waiting for w in HOPELESS):
            images = [c.get("image", "") for c in pod.get("spec", {}).get("containers", [])]
            pulling = pull_refusal(waiting, images[0] if images else "its image")
            raise Unavailable(Availability.no(f"pod {namespace}/{name}: "
                                              f"{pulling or waiting}"))
        time.sleep(0.05)
    raise Unavailable(Availability.no(f"pod {namespace}/{name} not running after "
                                      f"{timeout:.0f} s: {pod_words(get_pod(namespace, name))}"))


def wait_marker(namespace: str, name: str, timeout: float) -> int | None:
    """Until itx-ready's marker is in the pod's log: its CLOCK_MONOTONIC ns (None where the
    marker has none). Unavailable after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = kubectl("logs", "-n", namespace, name, "-c", CONTAINER, timeout=20)
        if READY_MARKER in log.stdout:
            return ready_ns(log.stdout)
        time.sleep(0.05)
    raise Unavailable(Availability.no(f"pod {namespace}/{name}: no {READY_MARKER} from "
                                      f"{READY_HELPER} within {timeout:.0f} s"))


def with_shims(pids: Sequence[int]) -> list[int]:
    """A pod cgroup's processes and the runtime's shims that hold them: containerd's shim per
    pod sandbox (containerd-shim-runc-v2, -runsc-v1) lives outside the pod's cgroup, yet its
    memory and CPU are the pod's cost as much as the pause process's."""
    shims = set()
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            parent = procfs.parse_pid_stat(Path(f"/proc/{pid}/stat").read_text()).ppid
            if parent not in pids and Path(f"/proc/{parent}/comm").read_text().startswith(
                    "containerd-shim"):
                shims.add(parent)
    return [*pids, *sorted(shims)]
