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
           static CPU manager gives such a pod whole cores). Without them the pod has no
           limit, as a bare container without them has none, and is Burstable: it requests a
           token 100m CPU and 64 MiB, so every pod of a plan fits at once (the others paused);
           its words say which. /dev/shm is half of its memory (its limit, else the node's),
           as in isotax's bare containers, not the runtime's 64 MB.
  options  runtime_class: the pod's RuntimeClass ("": none named, the cluster's default
           runtime; runc, gvisor: what `isotax cluster up` registers); isolation: what the
           plan expects the pod to be (container, sandbox, vm; "": whatever it is), checked
           against what the identity probe finds inside it (gVisor's dmesg, a VM's own
           kernel), never read from the RuntimeClass handler's name; pull_secret: a Secret's
           NAME or a docker config.json for the image's registry (on a foreign cluster);
           node: the node it runs on (itx-node1, this host's own, by default; itx-node2 is
           the second node of `isotax cluster up --nodes 2`); endpoints: with network
           "service", the pods behind the Service (kube/endpoints.py: endpoints - 1 more of
           its spec on its node, each serving a workload that spreads over them).

Commands run through `kubectl exec` under coreutils' `timeout` inside (killing kubectl does not
stop the process in the pod). The pod's own cgroup (the kubelet's, under its cgroup root's
kubepods: host.kubernetes.nodecgroups says where on v1 and v2) is what its footprint, its
processes and its limits are read from; pause and resume go through the node's containerd (its
runtime's own pause).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from isotax import protocols
from isotax.environments.base import (
    READY_HELPER,
    EnvironmentBase,
    Removals,
    Stopwatch,
    register,
    stops_once,
    undo_start,
)
from isotax.environments.container_fs import ROOTFS_DATA_DIR, SCRATCH, VOLUME_DIR
from isotax.environments.evidence import PROBE, detected, host_facts, parse_facts
from isotax.environments.kube.endpoints import (
    ENDPOINTS_OPTION,
    EndpointPod,
    endpoints_problem,
    start_endpoints,
)
from isotax.environments.kube.manifests import (
    POD,
    SERVICE_WORDS,
    TOKEN_CPU,
    TOKEN_MEMORY_MIB,
    pod_manifest,
    service_manifest,
)
from isotax.environments.kube.node_cpus import cpu_words
from isotax.environments.kube.service import wait_service
from isotax.environments.kube.starts import PodBurst
from isotax.environments.kube_api import (
    api_unreachable,
    delete_namespace,
    foreign_access,
    get_pod,
    image_differs,
    kib,
    kubectl,
    local_addresses,
    lost,
    namespace_manifest,
    namespaces_left,
    pod_exec,
    pod_security_level,
    pod_security_refusal,
    pod_words,
    pull_secret_manifests,
    task_status,
    wait_marker,
    wait_running,
    with_shims,
)
from isotax.host import command, owners
from isotax.host.facts.cgroups import tree_pids
from isotax.host.kubernetes import cluster, images, nodecgroups, target
from isotax.host.kubernetes import layout as L
from isotax.protocols import (
    Availability,
    Burst,
    Completed,
    EnvSpec,
    Facts,
    Instance,
    Isolation,
    NodeIdentity,
    ParamSpec,
    Reach,
    SocketStack,
    Unavailable,
    VersionCommand,
)
from isotax.telemetry.footprint import cgroup_kernel_bytes

NAMESPACE_PREFIX = "itx-pod-"
REACH = {"pod": Reach.ROUTED, "host": Reach.HOST, "service": Reach.SERVICE}


class PodInstance:
    def __init__(self, spec: EnvSpec) -> None:
        self.spec = spec
        self.target = target.current()
        self.runtime_class = str(spec.options.get("runtime_class", ""))
        # What the plan expects it to be; on the local cluster, else, what isotax set its
        # class up to give (a foreign cluster's handler names are no proof of anything).
        self.expected = str(spec.options.get("isolation", "")) or (
            L.RUNTIME_ISOLATION.get(self.runtime_class, "") if self.target.local else "")
        # What the identity probe found the pod to be, and its words (start()).
        self.found: Isolation | None = None
        self.found_words = ""
        node = str(spec.options.get("node", ""))
        # The local cluster's nodes are this host's (the first by default); a foreign one's
        # node is the scheduler's choice where the plan names none.
        self.layout: L.NodeLayout | None = None
        if self.target.local:
            try:
                self.layout = L.node_layout(node or L.NODE)
            except KeyError:
                raise Unavailable(Availability.no(
                    f"node {node!r}: the local cluster's nodes are "
                    f"{', '.join(n.name for n in L.NODES)}")) from None
        self.node_wanted = self.layout.name if self.layout else node
        # Its RuntimeClass's handler, as the cluster says: words only, never what it is.
        self.handler = L.RUNTIME_CLASSES.get(self.runtime_class, "") if self.target.local \
            else ""
        self.elsewhere = ""  # the node, where it is not this host
        self.cpus_words = ""  # the CPUs its processes may use (a static CPU manager's cores)
        # Its node where not this host: the identity check's (protocols.ElsewhereNode).
        self.node_machine: NodeIdentity | None = None
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
        self.shm_mib = 0
        self.guaranteed = False
        self.image_ref = ""
        self.import_s = 0.0
        self.scratch = SCRATCH
        self.data_dir = VOLUME_DIR if spec.storage == "volume" else ROOTFS_DATA_DIR
        self.milestones: Mapping[str, float] = {}
        self.level = pod_security_level(spec.network == "host")
        self.secrets: list[str] = []  # the pull secrets' names in its namespace
        # The pods beside it behind its Service (network "service", endpoints > 1).
        self.endpoints = int(spec.options.get("endpoints", 1))
        self.others: list[EndpointPod] = []
        self._created = False
        self._stopped = False

    # -- start --------------------------------------------------------------------------------
    def prepare(self) -> None:
        """What every pod of this spec needs before one is created: the image on the node (a
        foreign cluster's checks), the resources, the namespace and its pull secrets."""
        if self.layout is not None:
            self.image_ref, self.import_s = images.load(self.spec.image, self.layout)
        else:
            self.image_ref = self._foreign_checks()
        self.cpu, self.memory_mib, self.shm_mib = self._resources()
        self.guaranteed = bool(self.spec.vcpus and self.spec.memory_mib)
        self._created = True  # from here, stop() deletes the namespace
        self._apply(namespace_manifest(self.namespace, self.level), self.level)
        if self.layout is None:
            for obj in pull_secret_manifests(self.target, self.namespace, self._pull_specs()):
                self._apply(obj)
                self.secrets.append(obj["metadata"]["name"])

    def manifest(self, name: str = POD, *, burst: bool = False) -> dict[str, Any]:
        """A pod of this spec named `name` in its namespace (prepare() first); one of a
        burst's: Burstable with a sliver of requests whatever the plan sets (many of them)."""
        return pod_manifest(namespace=self.namespace, image=self.image_ref, name=name,
                            runtime_class=self.runtime_class, network=self.spec.network,
                            storage=self.spec.storage, cpu=self.cpu,
                            memory_mib=self.memory_mib, owner=owners.mine(),
                            guaranteed=self.guaranteed, burst=burst, shm_mib=self.shm_mib,
                            node=self.node_wanted,
                            pull="Never" if self.layout else "IfNotPresent",
                            pull_secrets=self.secrets, cluster_dns=self.layout is None)

    def start(self) -> None:
        sw = Stopwatch(self.spec.requested_at)
        self.prepare()
        if self.spec.network == "service":
            self._apply(service_manifest(self.namespace, protocols.workload_ports()))
        sw.mark("create")
        self._apply(self.manifest(), self.level)
        # A foreign cluster's node pulls the image first (1.3 GB): minutes, not seconds. The
        # local one waits at the pace it was started with (an emulated host's is slower).
        pace = L.pace() if self.layout else 1.0
        pod = wait_running(self.namespace, POD, timeout=120 * pace if self.layout else 600)
        sw.mark("started")
        self.uid = pod["metadata"]["uid"]
        statuses = pod["status"].get("containerStatuses") or [{}]
        self.container_id = str(statuses[0].get("containerID", "")).removeprefix(
            "containerd://")
        self.node = pod["spec"].get("nodeName", "")
        self.qos = pod["status"].get("qosClass", "")
        self.pod_ip = pod["status"].get("podIP", "")
        host_ip = pod["status"].get("hostIP", "")
        if self.layout is None:
            self._know_the_node(host_ip)
        stamp = wait_marker(self.namespace, POD, timeout=60 * pace)
        seen = sw.mark("ready")
        sw.marks["first_instruction"] = seen
        if stamp is not None and sw.t0 < stamp / 1e9 <= time.monotonic():
            sw.marks["first_instruction"] = stamp / 1e9 - sw.t0
        if self.spec.network == "host":
            self.address = "127.0.0.1" if self.layout is L.LOCAL else host_ip
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
            self.others = start_endpoints(self, self.namespace, self.endpoints,
                                          lambda n: self.manifest(n, burst=True),
                                          lambda obj: self._apply(obj, self.level),
                                          120 * pace)
            wait_service(self.layout, self.namespace, self.cluster_ip,
                         [self.pod_ip, *(o.address for o in self.others)], timeout=60 * pace)
        self._what_it_is()
        if self.spec.storage == "rootfs":
            self.exec(["mkdir", "-p", ROOTFS_DATA_DIR], 30).check()
        if self.layout is None:
            self._same_bits()
        self.cpus_words = cpu_words(self.layout, self.host_pids()) if self.layout else ""
        self.milestones = dict(sw.marks)

    # -- a cluster isotax did not start (--kubeconfig) ----------------------------------------
    def _foreign_checks(self) -> str:
        """The pod image and the RuntimeClass a foreign cluster must have; the image's
        reference there. Unavailable, in one line with the fix, otherwise."""
        if not self.target.pod_image:
            raise Unavailable(Availability.no(
                f"pods on {self.target.words()} need the workload image where its nodes pull "
                "from", "`isotax image oci-archive FILE`, push FILE to a registry (skopeo copy "
                "oci-archive:FILE docker://REGISTRY/isotax-workload:TAG), then isotax run "
                "--pod-image REGISTRY/isotax-workload:TAG"))
        if not self.runtime_class:
            return self.target.pod_image  # the cluster's default runtime
        got = kubectl("get", "runtimeclass", self.runtime_class, "-o", "json", timeout=30)
        if got.returncode != 0:
            if down := api_unreachable():
                raise lost(down)
            have = kubectl("get", "runtimeclass", "-o", "name", timeout=30).stdout.split()
            raise Unavailable(Availability.no(
                f"{self.target.words()} has no RuntimeClass {self.runtime_class!r} (it has: "
                f"{', '.join(h.removeprefix('runtimeclass.node.k8s.io/') for h in have) or 'none'}"
                ")", "name one of those as runtime_class in the plan, or none for the "
                "cluster's default"))
        self.handler = str(json.loads(got.stdout).get("handler", ""))
        return self.target.pod_image

    def _pull_specs(self) -> list[str]:
        """The pull secrets for this pod: --pull-secret's, and the plan's option."""
        own = str(self.spec.options.get("pull_secret", ""))
        return [*self.target.pull_secrets, *([own] if own else [])]

    def _what_it_is(self) -> None:
        """What the pod is, from the identity probe inside it against its node's kernel and
        boot (gVisor's dmesg, a VM's own kernel; the RuntimeClass handler's name says
        nothing): Unavailable, in one line, where that is not what the plan expects."""
        done = self.exec(["sh", "-c", PROBE], 60)
        try:
            shown = parse_facts(done.stdout)
        except ValueError as e:
            raise Unavailable(Availability.no(
                f"pod {self.namespace}/{POD}: the identity probe: {e}")) from None
        node = (self.node_machine.as_host(shown.version) if self.node_machine is not None
                else host_facts())
        self.found = detected(shown, node)
        if self.found is Isolation.HOST:
            self.found = Isolation.CONTAINER  # the node's own kernel and boot: a container
        self.found_words = shown.words()
        if self.expected and self.expected != self.found.value:
            raise Unavailable(Availability.no(
                f"pod {self.namespace}/{POD} of {self._class_words()} is a {self.found} "
                f"({self.found_words}), the plan expects a {self.expected}",
                "name the RuntimeClass that gives one as options.runtime_class, or fix "
                "options.isolation"))

    def _class_words(self) -> str:
        return (f"RuntimeClass {self.runtime_class}" if self.runtime_class
                else "the cluster's default runtime")

    def _know_the_node(self, host_ip: str) -> None:
        """Whether the pod's node is this host (native is then on the same node), and that
        node's kernel and boot, for the identity check."""
        if host_ip and host_ip in local_addresses():
            return
        got = kubectl("get", "node", self.node, "-o", "json", timeout=30)
        info = json.loads(got.stdout).get("status", {}).get("nodeInfo", {}) \
            if got.returncode == 0 else {}
        self.node_machine = NodeIdentity(str(info.get("kernelVersion", "")),
                                         str(info.get("bootID", "")))
        self.elsewhere = f"node {self.node} ({host_ip}) of {self.target.words()}"

    def _same_bits(self) -> None:
        """The pod's packages are the workload image's, version for version (the image was
        pushed from it); Unavailable naming those that differ otherwise."""
        want = dict(self.spec.image.package_versions())
        done = self.exec(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *want], 60)
        differ = image_differs(want, done.stdout)
        if differ:
            raise Unavailable(Availability.no(
                f"pod image {self.image_ref} is not isotax's workload image "
                f"{self.spec.image.recipe_hash}: {'; '.join(differ[:3])}",
                "push this host's image (`isotax image oci-archive FILE`) and give its "
                "reference to --pod-image"))

    def _resources(self) -> tuple[str, int, int]:
        """(CPUs, MiB) of its limits, the plan's ("", 0: none), and its /dev/shm in MiB: half
        of its memory limit, else of the node's memory."""
        if self.spec.memory_mib:
            return str(self.spec.vcpus or ""), self.spec.memory_mib, self.spec.memory_mib // 2
        # The node's memory (a foreign cluster's scheduler picks the node: its nodes'
        # smallest, so the pod fits wherever it goes).
        if self.node_wanted:
            got = kubectl("get", "node", self.node_wanted, "-o", "json")
            items = [json.loads(got.stdout)] if got.returncode == 0 else []
        else:
            got = kubectl("get", "nodes", "-o", "json")
            items = json.loads(got.stdout).get("items", []) if got.returncode == 0 else []
        sizes = [kib(str(i.get("status", {}).get("capacity", {}).get("memory", "0Ki")))
                 for i in items]
        return str(self.spec.vcpus or ""), 0, (min(sizes) if sizes else 1048576) // 2048

    def _apply(self, obj: Mapping[str, Any], level: str = "") -> None:
        self.spec.workdir.mkdir(parents=True, exist_ok=True)
        name = obj["metadata"]["name"] if obj["kind"] == "Secret" else obj["kind"].lower()
        path = self.spec.workdir / f"{name}.json"
        path.write_text(json.dumps(obj))
        done = kubectl("apply", "-f", str(path))
        if done.returncode != 0 and (down := api_unreachable()):
            raise lost(down)
        refused = pod_security_refusal(done.stderr, level, f"pod {self.spec.name} (network "
                                       f"{self.spec.network})") if level and done.returncode \
            else ""
        if refused:
            raise Unavailable(Availability.no(refused))
        if done.returncode != 0:
            raise Unavailable(Availability.no(
                f"kubectl apply of the {obj['kind']} failed: {done.stderr.strip()[-300:]}",
                f"try `kubectl --kubeconfig {self.target.kubeconfig} apply -f {path}`"))

    def _pod(self) -> dict[str, Any]:
        return get_pod(self.namespace, POD)

    # -- the protocol -------------------------------------------------------------------------
    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        return pod_exec(self.namespace, POD, argv, timeout)

    def other_endpoints(self) -> Sequence[Instance]:
        """protocols.ServiceEndpoints: the other pods behind its Service (endpoints > 1)."""
        return self.others

    @property
    def socket_stack(self) -> SocketStack:
        if self.found is Isolation.SANDBOX:
            return SocketStack.GVISOR_HOSTINET if self.spec.network == "host" \
                else SocketStack.GVISOR_NETSTACK
        return SocketStack.LINUX

    def node_identity(self) -> NodeIdentity | None:
        """protocols.ElsewhereNode: the pod's node, where it is not this host."""
        return self.node_machine

    def facts(self) -> Facts:
        return Facts(
            # hostNetwork on a node other than this host: the node's own address, routed.
            "pod", Reach.ROUTED if self.spec.network == "host" and self.layout is not L.LOCAL
            else REACH[self.spec.network],
            # What the identity probe found inside it (start()), as the plan expected.
            isolation=self.found,
            runtime=self._class_words() + (f" (handler {self.handler})" if self.handler
                                           else ""),
            bridge=self.layout.bridge if self.layout and self.spec.network != "host" else "",
            elsewhere=self.elsewhere,
            published=self.cluster_ip,
            container_address=self.pod_ip if self.spec.network == "service" else "",
            memory_limit_mib=self.spec.memory_mib or None, vcpus=self.spec.vcpus or None,
            words=self._words())

    def _words(self) -> dict[str, str]:
        return {
            "kubernetes": (f"Kubernetes {L.K8S_VERSION}, node {self.node or '?'}"
                           + (" (a network namespace of this host)"
                              if self.layout and self.layout.netns else ""))
            if self.layout else f"node {self.node or '?'} of {self.target.words()}",
            "pod": f"{self.namespace}/{POD} ({self.qos or '?'} QoS: " + (
                f"requests = limits = {self.cpu} CPU, {self.memory_mib} MiB)" if self.guaranteed
                else f"limits {self.cpu or 'no'} CPU, "
                     f"{f'{self.memory_mib} MiB' if self.memory_mib else 'no memory'}, as the "
                     f"plan's vcpus and memory_mib; requests {TOKEN_CPU} CPU, "
                     f"{TOKEN_MEMORY_MIB} MiB)") + f"; /dev/shm {self.shm_mib} MiB",
            "network": {"pod": f"pod network: {self.pod_ip} on " + (
                f"{self.layout.bridge} (CNI bridge)" if self.layout else "the cluster's network"),
                        "host": "hostNetwork: the node's own stack",
                        "service": f"ClusterIP Service {self.cluster_ip} (kube-proxy, "
                                   f"iptables) in front of {self.pod_ip}" + (
                            f" and {len(self.others)} more endpoints like it on its node"
                            if self.others else "")}[self.spec.network],
            "address": self.address,
            "rootfs": f"image {self.image_ref} in containerd (overlayfs), writable; "
                      f"{SCRATCH} an emptyDir in memory"
                      + ("" if self.layout else "; not paused between cells (the node's "
                         "runtime is out of isotax's reach)"),
            "storage": f"an emptyDir at {VOLUME_DIR}" if self.spec.storage == "volume"
            else f"the container's writable layer, data in {ROOTFS_DATA_DIR}",
            "pid1": f"{READY_HELPER} --hold",
            **({"cpus": self.cpus_words} if self.cpus_words else {}),
            **({"cgroup": f"{limits} ({nodecgroups.host().words()})"}
               if self.layout and (limits := L.pod_limits(self.layout, self.uid)) else {}),
        }

    def _cgroup(self, hierarchy: str) -> Path | None:
        """The pod's cgroup (its node's kubelet's, under its cgroup root): on v1 in the
        hierarchy named, on v2 the one group; None on a foreign cluster."""
        return L.pod_cgroup(self.layout, hierarchy, self.uid) if self.layout else None

    def host_pids(self) -> Sequence[int]:
        d = self._cgroup("memory")
        return with_shims(tree_pids(d)) if d is not None else []

    def kernel_memory_bytes(self) -> int | None:
        d = self._cgroup("memory")
        return cgroup_kernel_bytes(None, d) if nodecgroups.host().version == 2 \
            else cgroup_kernel_bytes(d, None)

    def _task(self, verb: str) -> Completed:
        """`ctr tasks <verb>` of the workload container, through the node's containerd: its
        runtime pauses it as it does its own (runc freezes its cgroup; runsc stops the
        sandbox itself: a frozen cgroup under gVisor's systrap platform left its servers
        segfaulting after the thaw, measured here)."""
        return command.run(L.ctr_argv("tasks", verb, self.container_id, node=self.layout), 60)

    def pause(self) -> None:
        if self.layout is None:
            return  # a foreign node's runtime is out of reach (its words say so)
        done = self._task("pause")
        if done.returncode != 0:
            raise RuntimeError(f"pod {self.namespace}/{POD}: ctr tasks pause: "
                               f"{done.stderr.strip()[:200]}")

    def resume(self) -> None:
        if self.layout is None:
            return
        done = self._task("resume")
        if done.returncode != 0 and "not paused" not in done.stderr:
            raise RuntimeError(f"pod {self.namespace}/{POD}: ctr tasks resume: "
                               f"{done.stderr.strip()[:200]}")

    def alive(self) -> str:
        if self._stopped:
            return "the pod was deleted"
        if self.target.local and cluster.supervisor_pid() is None:
            return "the cluster is down (its supervisor is gone)"
        if self.container_id and self.layout is not None:
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

    @stops_once
    def stop(self) -> None:
        """Delete the namespace (the pod, its Service and volumes go with it): Instance.stop's
        contract."""
        out = Removals(f"pod {self.namespace}/{POD}")
        if self._created:
            if self.container_id and self.layout is not None:
                self._task("resume")  # a paused container cannot stop
            out.attempt(f"namespace {self.namespace}", lambda: delete_namespace(self.namespace))
        out.done()


@register
class Pod(EnvironmentBase):
    kind: ClassVar[str] = "pod"
    description: ClassVar[str] = ("a Kubernetes pod (the cluster's default runtime, or a "
                                  "RuntimeClass: runc, gvisor) on the "
                                  "cluster `isotax cluster up` starts here, or on the one "
                                  "`isotax run --kubeconfig` names")
    # A pod's instance says what it is (the identity probe inside it: a gvisor pod a sandbox).
    isolation: ClassVar[Isolation] = Isolation.CONTAINER
    supports_numa: ClassVar[bool] = False
    # What a killed run leaves: its pods' namespaces (itx-pod-*).
    leak_finders: ClassVar[tuple[Any, ...]] = (partial(namespaces_left, NAMESPACE_PREFIX, ""),)
    options: ClassVar[tuple[ParamSpec, ...]] = (
        # No choices: a cluster --kubeconfig names has RuntimeClasses and nodes of its own
        # (checked when the pod starts).
        ParamSpec("runtime_class", str, "", "the pod's RuntimeClass (\"\": none, the "
                  "cluster's default runtime; the local cluster has "
                  f"{', '.join(L.RUNTIME_CLASSES)})"),
        ParamSpec("isolation", str, "", "what the plan expects the pod to be, checked against "
                  "what the identity probe finds inside it (\"\": whatever it is)",
                  choices=("", "container", "sandbox", "vm")),
        ParamSpec("pull_secret", str, "", "on a cluster --kubeconfig names: the image's "
                  "registry credentials, a Secret's NAME (NAMESPACE/NAME) or a docker "
                  "config.json, copied into the pod's namespace"),
        ENDPOINTS_OPTION,
        ParamSpec("node", str, "", f"the node the pod runs on (the local cluster: {L.NODE}, "
                  f"this host, by default; {L.WORKER.name}, the second node of `isotax "
                  "cluster up --nodes 2`; a foreign one: the scheduler's choice)"),
    )
    networks: ClassVar[tuple[str, ...]] = ("pod", "host", "service")
    storages: ClassVar[tuple[str, ...]] = ("volume", "rootfs")

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        return VersionCommand("kubelet", (str(L.binary("kubelet")), "--version"))

    @classmethod
    def network_layer(cls, network: str) -> tuple[str, str] | None:
        return ("pod", SERVICE_WORDS) if network == "service" else None

    @classmethod
    def options_problem(cls, network: str, options: Mapping[str, Any]) -> str | None:
        return endpoints_problem(network, options)

    def available(self) -> Availability:
        t = target.current()
        if not t.local:
            return foreign_access(t)
        why = cluster.missing()
        if why:
            return Availability.no(why)
        if cluster.supervisor_pid() is None or cluster.state() != cluster.READY:
            return Availability.no("no Kubernetes cluster runs here", "isotax cluster up")
        return Availability.yes()

    def bursts(self, spec: EnvSpec) -> Burst | None:
        """Pods of spec started at a rate in one namespace, timed from one watch of the API
        (kube.starts)."""
        a = self.available()
        if not a.ok:
            raise Unavailable(a)
        return PodBurst(PodInstance(spec), spec.workdir)

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
