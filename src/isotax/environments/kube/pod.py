"""A Kubernetes pod as an environment: the workload image, loaded into the cluster's
containerd (host.kubernetes.images), run as one pod of the plan's RuntimeClass, in a namespace
of its own (itx-pod-<tag>, labelled isotax) that its stop() deletes. The cluster is the one
`isotax cluster up` starts on this host (host.kubernetes), so native is measured on the same
node.

The plan's axes:

  network  "pod": the pod's own address on the CNI bridge (itxcni0), reached by the host's
           routing; "host": hostNetwork, the node's own stack; "service": a ClusterIP Service
           in front of the pod, every workload port on it, so the traffic goes through
           kube-proxy's iptables DNAT.
  storage  "rootfs": data in the container's writable layer (containerd's overlayfs);
           "volume": an emptyDir at /mnt (a directory of the kubelet's on the node's disk).
  vcpus, memory_mib
           with both set: the pod's requests and limits, equal (Guaranteed QoS: the kubelet's
           static CPU manager gives such a pod whole cores). Without them the other
           environments run unlimited, and every environment of a plan runs at once (the
           others paused): a Guaranteed pod the node's size would leave no room for the next
           pod. So the pod is Burstable: limits the node's allocatable CPUs and its memory
           less a margin (no tighter than the others), requests a token 100m CPU and 64 MiB
           (so every pod of the plan fits); its words say which.
  options  runtime_class: the pod's RuntimeClass (runc, gvisor: what `isotax cluster up`
           registers); node: the node it runs on (itx-node1, this host's own, by default;
           itx-node2 is the second node of `isotax cluster up --nodes 2`).

Commands run through `kubectl exec` under coreutils' `timeout` inside (killing kubectl does not
stop the process in the pod). The pod's own cgroup (the kubelet's, under /itx-k8s/kubepods)
is what its footprint is read from; pause and resume go through the node's containerd (its
runtime's own pause).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from isotax import protocols
from isotax.environments.base import (
    GUEST_ENV,
    READY_HELPER,
    READY_MARKER,
    EnvironmentBase,
    Removals,
    Stopwatch,
    register,
    undo_start,
)
from isotax.environments.container_fs import ROOTFS_DATA_DIR, SCRATCH, VOLUME_DIR
from isotax.environments.runtime_cli import timed_exit_status, under_timeout
from isotax.host import command, owners
from isotax.host.kubernetes import cluster, images
from isotax.host.kubernetes import layout as L
from isotax.parsers import procfs
from isotax.protocols import (
    Availability,
    Completed,
    EnvSpec,
    Facts,
    Instance,
    Isolation,
    Leftover,
    ParamSpec,
    PlatformLost,
    Reach,
    SocketStack,
    Stage,
    Unavailable,
    VersionCommand,
)
from isotax.telemetry.footprint import cgroup_kernel_bytes

POD = "itx-pod"  # the pod's name in its own namespace
CONTAINER = "workload"
NAMESPACE_PREFIX = "itx-pod-"
MEMORY_MARGIN_MIB = 512  # left to the node's own processes where the plan sets no memory
# A Burstable pod's requests (the plan sets no vcpus and memory_mib): what the scheduler
# reserves for it, small enough that every pod of a plan fits on the node at once.
TOKEN_CPU, TOKEN_MEMORY_MIB = "100m", 64
REACH = {"pod": Reach.ROUTED, "host": Reach.HOST, "service": Reach.SERVICE}


def kubectl(*args: str, timeout: float = 60, input_text: str | None = None) -> Completed:
    return cluster.kubectl(*args, timeout=timeout, input_text=input_text)


def runtime_isolation(runtime_class: str) -> Isolation:
    """What a pod of the RuntimeClass is: gVisor's handler a sandbox, runc a container."""
    return Isolation.SANDBOX if L.RUNTIME_CLASSES.get(runtime_class) == "runsc" \
        else Isolation.CONTAINER


def pod_manifest(*, namespace: str, image: str, runtime_class: str, network: str,
                 storage: str, cpu: str, memory_mib: int, owner: str,
                 guaranteed: bool = True, node: str = L.NODE) -> dict[str, Any]:
    """The pod, as the API takes it, on `node`: limits `cpu` and `memory_mib`, requests the
    same (Guaranteed) or a token share (Burstable). Pure."""
    mounts = [{"name": "scratch", "mountPath": SCRATCH}]
    volumes: list[dict[str, Any]] = [{"name": "scratch", "emptyDir": {"medium": "Memory"}}]
    if storage == "volume":
        mounts.append({"name": "data", "mountPath": VOLUME_DIR})
        volumes.append({"name": "data", "emptyDir": {}})
    limits = {"cpu": cpu, "memory": f"{memory_mib}Mi"}
    requests = limits if guaranteed else {"cpu": TOKEN_CPU, "memory": f"{TOKEN_MEMORY_MIB}Mi"}
    spec: dict[str, Any] = {
        "runtimeClassName": runtime_class, "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1, "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        # The scheduler still checks that it fits: "no room" is its Unschedulable.
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{
            "name": CONTAINER, "image": image, "imagePullPolicy": "Never",
            "command": [READY_HELPER, "--hold"],
            "env": [{"name": k, "value": v} for k, v in {**GUEST_ENV, "TMPDIR": SCRATCH}.items()],
            "resources": {"requests": requests, "limits": limits},
            "volumeMounts": mounts}],
        "volumes": volumes,
    }
    if network == "host":
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": POD, "namespace": namespace,
                         "labels": {"isotax": "1", "app": POD},
                         "annotations": {"isotax.owner": owner}},
            "spec": spec}


def service_manifest(namespace: str, ports: Sequence[protocols.Port]) -> dict[str, Any]:
    """A ClusterIP Service with every workload port (each protocol) in front of the pod. Pure."""
    entries = [{"name": f"p{p.number}-{proto}", "port": p.number, "targetPort": p.number,
                "protocol": proto.upper()} for p in ports for proto in p.protocols]
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": POD, "namespace": namespace, "labels": {"isotax": "1"}},
            "spec": {"type": "ClusterIP", "selector": {"app": POD}, "ports": entries}}


def exec_argv(namespace: str, argv: Sequence[str], timeout: float, pod: str = POD
              ) -> list[str]:
    """`kubectl exec` arguments: the program under `timeout` inside the pod. Pure."""
    return ["exec", "-n", namespace, pod, "-c", CONTAINER, "--",
            *under_timeout(argv, timeout)]


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
    return PlatformLost(f"the Kubernetes API server (https://{L.NODE_IP}:{L.APISERVER_PORT}) "
                        f"does not answer: {why}")


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


class PodInstance:
    def __init__(self, spec: EnvSpec) -> None:
        self.spec = spec
        self.runtime_class = str(spec.options.get("runtime_class", "runc"))
        self.layout = L.node_layout(str(spec.options.get("node", L.NODE)))
        self.tag = owners.new_tag(3)
        self.namespace = f"{NAMESPACE_PREFIX}{self.tag}"
        self.address = ""
        self.cluster_ip = ""
        self.pod_ip = ""
        self.uid = ""
        self.container_id = ""
        self.node = ""
        self.qos = ""
        self.cpu = ""
        self.memory_mib = 0
        self.guaranteed = False
        self.image_ref = ""
        self.import_s = 0.0
        self.scratch = SCRATCH
        self.data_dir = VOLUME_DIR if spec.storage == "volume" else ROOTFS_DATA_DIR
        self.milestones: Mapping[str, float] = {}
        self._created = False
        self._stopped = False

    # -- start --------------------------------------------------------------------------------
    def start(self) -> None:
        sw = Stopwatch()
        self.image_ref, self.import_s = images.load(self.spec.image, self.layout)
        self.cpu, self.memory_mib = self._resources()
        self.guaranteed = bool(self.spec.vcpus and self.spec.memory_mib)
        self._created = True  # from here, stop() deletes the namespace
        self._apply({"apiVersion": "v1", "kind": "Namespace",
                     "metadata": {"name": self.namespace, "labels": {"isotax": "1"}}})
        if self.spec.network == "service":
            self._apply(service_manifest(self.namespace, protocols.workload_ports()))
        sw.mark("create")
        self._apply(pod_manifest(namespace=self.namespace, image=self.image_ref,
                                 runtime_class=self.runtime_class, network=self.spec.network,
                                 storage=self.spec.storage, cpu=self.cpu,
                                 memory_mib=self.memory_mib, owner=owners.mine(),
                                 guaranteed=self.guaranteed, node=self.layout.name))
        pod = self._wait_running(sw, timeout=120)
        self.uid = pod["metadata"]["uid"]
        statuses = pod["status"].get("containerStatuses") or [{}]
        self.container_id = str(statuses[0].get("containerID", "")).removeprefix(
            "containerd://")
        self.node = pod["spec"].get("nodeName", "")
        self.qos = pod["status"].get("qosClass", "")
        self.pod_ip = pod["status"].get("podIP", "")
        stamp = self._wait_marker(timeout=60)
        seen = sw.mark("ready")
        sw.marks["first_instruction"] = seen
        if stamp is not None and sw.t0 < stamp / 1e9 <= time.monotonic():
            sw.marks["first_instruction"] = stamp / 1e9 - sw.t0
        if self.spec.network == "host":
            self.address = self.layout.ip if self.layout.netns else "127.0.0.1"
        else:
            self.address = self.pod_ip
        if self.spec.network == "service":
            got = kubectl("get", "service", "-n", self.namespace, POD, "-o",
                          "jsonpath={.spec.clusterIP}")
            self.cluster_ip = got.stdout.strip()
            if got.returncode != 0 or not self.cluster_ip:
                raise Unavailable(Availability.no(
                    f"the Service in front of pod {self.namespace}/{POD} has no address: "
                    f"{got.stderr.strip()[:200]}"))
            self._wait_service(timeout=60)
        if self.spec.storage == "rootfs":
            self.exec(["mkdir", "-p", ROOTFS_DATA_DIR], 30).check()
        self.milestones = dict(sw.marks)

    def _resources(self) -> tuple[str, int]:
        """(CPUs, MiB) for requests and limits: the plan's, else the node's allocatable."""
        got = kubectl("get", "node", self.layout.name, "-o", "json")
        alloc = json.loads(got.stdout)["status"]["allocatable"] if got.returncode == 0 else {}
        cpu = str(self.spec.vcpus) if self.spec.vcpus else str(alloc.get("cpu", "1"))
        if self.spec.memory_mib:
            return cpu, self.spec.memory_mib
        kib = int(re.sub(r"Ki$", "", str(alloc.get("memory", "1048576Ki"))))
        return cpu, max(256, kib // 1024 - MEMORY_MARGIN_MIB)

    def _apply(self, obj: Mapping[str, Any]) -> None:
        self.spec.workdir.mkdir(parents=True, exist_ok=True)
        path = self.spec.workdir / f"{obj['kind'].lower()}.json"
        path.write_text(json.dumps(obj))
        done = kubectl("apply", "-f", str(path))
        if done.returncode != 0 and (down := api_unreachable()):
            raise lost(down)
        if done.returncode != 0:
            raise Unavailable(Availability.no(
                f"kubectl apply of the {obj['kind']} failed: {done.stderr.strip()[-300:]}",
                f"try `kubectl --kubeconfig {L.KUBECONFIG} apply -f {path}`"))

    def _pod(self) -> dict[str, Any]:
        got = kubectl("get", "pod", "-n", self.namespace, POD, "-o", "json", timeout=30)
        return json.loads(got.stdout) if got.returncode == 0 else {}

    def _wait_running(self, sw: Stopwatch, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pod = self._pod()
            status = pod.get("status", {})
            phase = status.get("phase", "")
            if phase == "Running":
                sw.mark("started")
                return pod
            if phase in ("Failed", "Succeeded"):
                raise Unavailable(Availability.no(f"pod {self.namespace}/{POD} is {phase} "
                                                  f"before it ran: {pod_words(pod)}"))
            waiting = pod_words(pod)
            # What waiting will not mend: fail now, in the pod's own words.
            if any(w in waiting for w in ("ErrImageNeverPull", "RuntimeClass",
                                          "Unschedulable", "CreateContainerError")):
                raise Unavailable(Availability.no(f"pod {self.namespace}/{POD}: {waiting}"))
            time.sleep(0.05)
        raise Unavailable(Availability.no(f"pod {self.namespace}/{POD} not running after "
                                          f"{timeout:.0f} s: {pod_words(self._pod())}"))

    def _wait_service(self, timeout: float) -> None:
        """Until every node's kube-proxy has put the pod behind the Service's address in
        its nat table (a client's node translates it; a second node's table is its
        namespace's): before, a client's packets to it go nowhere (the endpoint follows the
        pod's readiness, and kube-proxy syncs a moment later)."""
        deadline = time.monotonic() + timeout
        nodes = [n for n in L.NODES if not n.netns or Path(f"/run/netns/{n.netns}").exists()]
        while time.monotonic() < deadline:
            nats = [command.run(n.enter(["iptables-save", "-t", "nat"]), 30).stdout
                    for n in nodes]
            if all(service_programmed(nat, self.cluster_ip, self.pod_ip) for nat in nats):
                return
            time.sleep(0.1)
        raise Unavailable(Availability.no(
            f"kube-proxy did not put pod {self.namespace}/{POD} ({self.pod_ip}) behind its "
            f"Service {self.cluster_ip} within {timeout:.0f} s"))

    def _wait_marker(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = kubectl("logs", "-n", self.namespace, POD, "-c", CONTAINER, timeout=20)
            if READY_MARKER in log.stdout:
                return ready_ns(log.stdout)
            time.sleep(0.05)
        raise Unavailable(Availability.no(f"pod {self.namespace}/{POD}: no {READY_MARKER} "
                                          f"from {READY_HELPER} within {timeout:.0f} s"))

    # -- the protocol -------------------------------------------------------------------------
    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        t0 = time.monotonic()
        p = kubectl(*exec_argv(self.namespace, argv, timeout), timeout=timeout + 15)
        if kubectl_failed(p) and (down := api_unreachable()):
            raise lost(down)
        return exec_completed(argv, p, t0)

    @property
    def socket_stack(self) -> SocketStack:
        if runtime_isolation(self.runtime_class) is Isolation.SANDBOX:
            return SocketStack.GVISOR_HOSTINET if self.spec.network == "host" \
                else SocketStack.GVISOR_NETSTACK
        return SocketStack.LINUX

    def facts(self) -> Facts:
        iso = runtime_isolation(self.runtime_class)
        return Facts(
            # hostNetwork on a second node: the node's own address, routed by this host.
            "pod", Reach.ROUTED if self.spec.network == "host" and self.layout.netns
            else REACH[self.spec.network],
            isolation=iso if iso is not Isolation.CONTAINER else None,
            runtime=f"RuntimeClass {self.runtime_class} "
                    f"({L.RUNTIME_CLASSES.get(self.runtime_class, '?')})",
            bridge=self.layout.bridge if self.spec.network != "host" else "",
            published=self.cluster_ip,
            container_address=self.pod_ip if self.spec.network == "service" else "",
            memory_limit_mib=self.spec.memory_mib or None, vcpus=self.spec.vcpus or None,
            words=self._words())

    def _words(self) -> dict[str, str]:
        return {
            "kubernetes": f"Kubernetes {L.K8S_VERSION}, node {self.node or '?'}"
                          + (" (a network namespace of this host)" if self.layout.netns
                             else ""),
            "pod": f"{self.namespace}/{POD} ({self.qos or '?'} QoS: " + (
                f"requests = limits = {self.cpu} CPU, {self.memory_mib} MiB)" if self.guaranteed
                else f"limits {self.cpu} CPU, {self.memory_mib} MiB, the node's size; requests "
                     f"{TOKEN_CPU} CPU, {TOKEN_MEMORY_MIB} MiB: the plan sets no vcpus and "
                     "memory_mib)"),
            "network": {"pod": f"pod network: {self.pod_ip} on {self.layout.bridge} (CNI "
                               "bridge)",
                        "host": "hostNetwork: the node's own stack",
                        "service": f"ClusterIP Service {self.cluster_ip} (kube-proxy, "
                                   f"iptables) in front of {self.pod_ip}"}[self.spec.network],
            "address": self.address,
            "rootfs": f"image {self.image_ref} in containerd (overlayfs), writable; "
                      f"{SCRATCH} an emptyDir in memory",
            "storage": f"an emptyDir at {VOLUME_DIR}" if self.spec.storage == "volume"
            else f"the container's writable layer, data in {ROOTFS_DATA_DIR}",
            "pid1": f"{READY_HELPER} --hold",
        }

    def _cgroup(self, hierarchy: str) -> Path | None:
        """The pod's cgroup in a v1 hierarchy (its node's kubelet's, under its cgroup root)."""
        return L.pod_cgroup(self.layout, hierarchy, self.uid)

    def host_pids(self) -> Sequence[int]:
        d = self._cgroup("memory")
        if d is None:
            return []
        pids: set[int] = set()
        for procs in d.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids.update(procfs.parse_pids(procs.read_text()))
        return sorted(pids)

    def kernel_memory_bytes(self) -> int | None:
        return cgroup_kernel_bytes(self._cgroup("memory"), None)

    def _task(self, verb: str) -> Completed:
        """`ctr tasks <verb>` of the workload container, through the node's containerd: its
        runtime pauses it as it does its own (runc freezes its cgroup; runsc stops the
        sandbox itself: a frozen cgroup under gVisor's systrap platform left its servers
        segfaulting after the thaw, measured here)."""
        return command.run(L.ctr_argv("tasks", verb, self.container_id, node=self.layout), 60)

    def pause(self) -> None:
        done = self._task("pause")
        if done.returncode != 0:
            raise RuntimeError(f"pod {self.namespace}/{POD}: ctr tasks pause: "
                               f"{done.stderr.strip()[:200]}")

    def resume(self) -> None:
        done = self._task("resume")
        if done.returncode != 0 and "not paused" not in done.stderr:
            raise RuntimeError(f"pod {self.namespace}/{POD}: ctr tasks resume: "
                               f"{done.stderr.strip()[:200]}")

    def alive(self) -> str:
        if self._stopped:
            return "the pod was deleted"
        if cluster.supervisor_pid() is None:
            return "the cluster is down (its supervisor is gone)"
        if self.container_id:
            # The node's containerd knows at once (the kubelet tells the API a moment later).
            tasks = command.run(L.ctr_argv("tasks", "ls", node=self.layout), 30)
            status = task_status(tasks.stdout, self.container_id)
            if tasks.returncode == 0 and status in ("", "STOPPED"):
                return (f"pod {self.namespace}/{POD}: its container "
                        f"{self.container_id[:12]} has no process left on {self.layout.name} "
                        f"(containerd: {status or 'no task'})")
        pod = self._pod()
        if not pod:
            if down := api_unreachable():
                raise lost(down)
            return f"pod {self.namespace}/{POD} is gone"
        phase = pod.get("status", {}).get("phase", "")
        return "" if phase == "Running" else f"the pod is {phase or '?'}: {pod_words(pod)}"

    def stop(self) -> None:
        """Delete the namespace (the pod, its Service and volumes go with it): Instance.stop's
        contract."""
        if self._stopped:
            return
        self._stopped = True
        out = Removals(f"pod {self.namespace}/{POD}")
        if self._created:
            if self.container_id:
                self._task("resume")  # a paused container cannot stop
            out.attempt(f"namespace {self.namespace}", lambda: delete_namespace(self.namespace))
        out.done()


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


def service_programmed(nat: str, cluster_ip: str, pod_ip: str) -> bool:
    """Whether `iptables-save -t nat` output has kube-proxy's rules for the Service address
    and an endpoint at the pod's address. Pure."""
    return (f"-d {cluster_ip}/32" in nat
            and re.search(rf"--to-destination {re.escape(pod_ip)}:\d+", nat) is not None)


def delete_namespace(namespace: str) -> None:
    done = kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=90s",
                   "--ignore-not-found", timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"kubectl delete namespace {namespace}: {done.stderr.strip()[:200]}")


def leaked_namespaces() -> list[Leftover]:
    """isotax's pod namespaces still in the local cluster (their tag names their owner)."""
    if cluster.supervisor_pid() is None or cluster.state() != cluster.READY:
        return []
    got = kubectl("get", "namespaces", "-l", "isotax=1", "-o", "name", timeout=30)
    names = [n.removeprefix("namespace/") for n in got.stdout.split()]
    return [Leftover(f"Kubernetes namespace {n}", [(str(L.binary("kubectl")),
                                                   f"--kubeconfig={L.KUBECONFIG}", "delete",
                                                   "namespace", n, "--wait=true")],
                     stage=Stage.CONTAINER, names=(n,))
            for n in names if n.startswith(NAMESPACE_PREFIX)]


@register
class Pod(EnvironmentBase):
    kind: ClassVar[str] = "pod"
    description: ClassVar[str] = ("a Kubernetes pod of a RuntimeClass (runc, gvisor) on the "
                                  "cluster `isotax cluster up` starts here")
    isolation: ClassVar[Isolation] = Isolation.CONTAINER  # gvisor's RuntimeClass: a sandbox
    supports_numa: ClassVar[bool] = False
    leak_finders: ClassVar[tuple[Any, ...]] = (leaked_namespaces,)
    options: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("runtime_class", str, "runc", "the pod's RuntimeClass",
                  choices=tuple(L.RUNTIME_CLASSES)),
        ParamSpec("node", str, L.NODE, "the node the pod runs on (itx-node2: the second node "
                  "of `isotax cluster up --nodes 2`)", choices=tuple(n.name for n in L.NODES)),
    )
    networks: ClassVar[tuple[str, ...]] = ("pod", "host", "service")
    storages: ClassVar[tuple[str, ...]] = ("volume", "rootfs")

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        return VersionCommand("kubelet", (str(L.binary("kubelet")), "--version"))

    def available(self) -> Availability:
        why = cluster.missing()
        if why:
            return Availability.no(why)
        if cluster.supervisor_pid() is None or cluster.state() != cluster.READY:
            return Availability.no("no Kubernetes cluster runs here", "isotax cluster up")
        return Availability.yes()

    def start(self, spec: EnvSpec) -> Instance:
        a = self.available()
        if not a.ok:
            raise Unavailable(a)
        inst = PodInstance(spec)
        try:
            inst.start()
        except BaseException:
            undo_start(inst.stop)
            raise
        return inst
