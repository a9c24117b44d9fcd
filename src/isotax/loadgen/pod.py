"""The load generator as a pod on another Kubernetes node: the studies' second machine, inside
the cluster. The plan's `[loadgen] node = "itx-node2"` puts the clients in a pod there (the
second node of `isotax cluster up --nodes 2`: a network namespace of this host with its own
containerd, kubelet and kube-proxy), so a pod environment is measured as a client in the
cluster reaches it: from another node's pod, over that node's CNI bridge and the link
between the nodes, and through that node's kube-proxy for a Service.

The pod runs the workload image (loaded into that node's containerd): its clients are the
image's, the same versions as the servers', by construction. It is one pod of RuntimeClass
runc in a namespace of its own (itx-lg-<tag>, labelled isotax), removed at close. Clients
run through `kubectl exec` under coreutils' `timeout` inside the pod, so none outlives its
cell. Its CPU comes from its pod's cgroup on this host (the node's kubelet's).

What it reaches, from its pod's address:
- native, a container or a pod on this host's network: the first node's address (where its
  packets arrive), only the load generator admitted to the port (iptables INPUT);
- a pod on the pod network, a hostNetwork pod of the second node, a VM on its tap: the
  instance's own address, routed (FORWARD admits only the load generator);
- a Service: its ClusterIP, which the load generator's own node translates (its kube-proxy),
  as it does for any client pod;
- a container behind an engine's or isotax's port mapping: not applicable (a mapping is on
  an address of this host for clients outside the cluster; give it network = "host").
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import time
from collections.abc import Iterator, Sequence
from typing import Any

from isotax.environments.base import GUEST_ENV, READY_HELPER
from isotax.environments.kube_api import (
    CONTAINER,
    api_unreachable,
    delete_namespace,
    exec_argv,
    exec_completed,
    foreign_access,
    kubectl,
    kubectl_failed,
    lost,
    namespace_manifest,
    namespaces_left,
    pull_secret_manifests,
    wait_marker,
    wait_running,
)
from isotax.host import owners
from isotax.host.facts.cgroups import tree_pids
from isotax.host.kubernetes import cluster, images, target
from isotax.host.kubernetes import layout as L
from isotax.host.network import NetworkError, TaggedRule, admit_only, delete_tagged_rule
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.base import LoadGenRefused, listen_address, network_of, path_words
from isotax.model import NotApplicable, SanityError
from isotax.protocols import (
    ClientsCpu,
    Completed,
    Instance,
    Leftover,
    LoadGenDescription,
    Reach,
    Unavailable,
)
from isotax.telemetry.cpuacct import usage_s

POD = "itx-loadgen"
# A one-shot TCP listener on ADDRESS PORT (argv), and a connection to one, for the wait on a
# foreign cluster's Service (_through_proxy).
ACCEPT_ONCE = ("import socket, sys\n"
               "s = socket.socket()\n"
               "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
               "s.bind((sys.argv[1], int(sys.argv[2])))\n"
               "s.listen(8)\n"
               "s.accept()[0].close()\n")
CONNECT = ("import socket, sys\n"
           "socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()\n")
NAMESPACE_PREFIX = "itx-lg-"
SCRATCH = "/tmp"


def loadgen_manifest(*, namespace: str, image: str, node: str, owner: str,
                     pull: str = "Never", pull_secrets: Sequence[str] = (),
                     cluster_dns: bool = True) -> dict[str, Any]:
    """The load generator's pod on `node`: the cluster's default runtime, the pod network,
    the image's clients, no limits (a client held back by a limit would measure the limit),
    a token request so it always fits; its node's resolver where the cluster has no DNS
    add-on (the local one). Pure."""
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": POD, "namespace": namespace,
                     "labels": {"isotax": "1", "app": POD},
                     "annotations": {"isotax.owner": owner}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1, "enableServiceLinks": False,
            "automountServiceAccountToken": False,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [{
                "name": CONTAINER, "image": image, "imagePullPolicy": pull,
                "command": [READY_HELPER, "--hold"],
                "env": [{"name": k, "value": v} for k, v in GUEST_ENV.items()],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        },
    }
    if pull_secrets:
        pod["spec"]["imagePullSecrets"] = [{"name": n} for n in pull_secrets]
    if not cluster_dns:
        pod["spec"]["dnsPolicy"] = "Default"
    return pod


class PodCpu:
    """The clients' CPU: the load generator pod's cgroup on this host (its node's kubelet's),
    read around each run (telemetry)."""

    def __init__(self, node: L.NodeLayout, uid: str) -> None:
        self.node, self.uid = node, uid
        self.source = f"cgroup CPU accounting of the load generator's pod (node {node.name})"
        self.cpus: int | None = None

    def usage_s(self) -> float:
        d = L.pod_cgroup(self.node, "cpuacct", self.uid)
        if d is None:
            raise OSError(f"the load generator pod's cgroup (uid {self.uid}) is gone")
        return usage_s(d)

    def mark(self) -> int | None:
        return None  # a total, not per command

    def busiest_since(self, mark: int) -> float | None:
        return None


class PodLoadGen:
    """The LoadGen protocol (isotax.protocols.LoadGen) on a pod of another node."""

    def __init__(self, node: str, image: ImageArtifacts, pull_secrets: Sequence[str] = ()
                 ) -> None:
        self.node_name = node
        self.image = image
        self.pull_secrets = tuple(pull_secrets)  # the plan's pods' (--pull-secret's come too)
        # The Service addresses (and a port) the pod has reached through its node's proxy.
        self._through: set[str] = set()
        self.where = f"a pod on Kubernetes node {node}"
        self.tag = ""
        self.namespace = ""
        self.node: L.NodeLayout | None = None
        self.address = ""  # the load generator pod's
        self.image_ref = ""
        self.cpu_group: PodCpu | None = None
        # The inode of the pod's network namespace: telemetry tells the clients' threads by it.
        self.netns_inode: int | None = None
        # (chain, address, port, proto) -> the REJECT rule that admits only the load generator
        self._admitted: dict[tuple[str, str, int, str], TaggedRule] = {}

    # -- lifecycle ---------------------------------------------------------------------
    def up(self) -> None:
        """The pod, Running on its node. LoadGenRefused (one line, the fix) where the node
        cannot hold it."""
        t = target.current()
        if not t.local:
            access = foreign_access(t, self.pull_secrets)
            if not access.ok:
                raise LoadGenRefused(f"load generator pod: {access}")
            if not t.pod_image:
                raise LoadGenRefused(f"a load generator pod on {t.words()} needs the workload "
                                     "image where its nodes pull from: give it with "
                                     "--pod-image (`isotax image oci-archive` writes it)")
        elif cluster.supervisor_pid() is None or cluster.state() != cluster.READY:
            raise LoadGenRefused(f"the plan puts its load generator on Kubernetes node "
                                 f"{self.node_name}, but no cluster runs here: isotax cluster "
                                 "up --nodes 2")
        else:
            try:
                self.node = L.node_layout(self.node_name)
            except KeyError:
                raise LoadGenRefused(
                    f"[loadgen] node {self.node_name!r}: the local cluster's nodes are "
                    f"{', '.join(n.name for n in L.NODES)}") from None
        ready = kubectl("get", "node", self.node_name, "-o",
                        "jsonpath={.status.conditions[?(@.type=='Ready')].status}", timeout=20)
        if ready.stdout.strip() != "True":
            raise LoadGenRefused(
                f"Kubernetes node {self.node_name} is not in the cluster or not Ready "
                f"({(ready.stderr.strip() or ready.stdout.strip() or 'not Ready')[:150]}): "
                + ("start the cluster with it: isotax cluster down; isotax cluster up --nodes 2"
                   if t.local else "name a Ready node of the cluster as [loadgen] node"))
        self.tag = owners.new_tag(3)
        self.namespace = f"{NAMESPACE_PREFIX}{self.tag}"
        if self.node is None:
            self.image_ref = t.pod_image
        else:
            try:
                self.image_ref, _ = images.load(self.image, self.node)
            except RuntimeError as e:
                raise LoadGenRefused(f"load generator on {self.node_name}: {e}") from None
        objs: list[dict[str, Any]] = [namespace_manifest(self.namespace)]
        if self.node is None:
            try:
                objs += pull_secret_manifests(t, self.namespace,
                                              [*t.pull_secrets, *self.pull_secrets])
            except Unavailable as e:
                raise LoadGenRefused(f"load generator on {self.node_name}: "
                                     f"{e.availability}") from None
        objs.append(loadgen_manifest(
            namespace=self.namespace, image=self.image_ref, node=self.node_name,
            owner=owners.mine(), pull="Never" if self.node else "IfNotPresent",
            pull_secrets=[o["metadata"]["name"] for o in objs if o["kind"] == "Secret"],
            cluster_dns=not self.node))
        for obj in objs:
            done = kubectl("apply", "-f", "-", input_text=json.dumps(obj))
            if done.returncode != 0:
                raise LoadGenRefused(f"load generator on {self.node_name}: kubectl apply of "
                                     f"its {obj['kind']}: {done.stderr.strip()[-200:]}")
        # A foreign cluster's node pulls the image first (1.3 GB): minutes, not seconds. The
        # local one waits at the pace it was started with, as the environment's pods do.
        pod = self._wait_running(120 * L.pace() if self.node else 600)
        self.address = pod["status"].get("podIP", "")
        if self.node is not None:  # a node of this host's: its cgroups and netns are here
            self.cpu_group = PodCpu(self.node, pod["metadata"]["uid"])
            self.netns_inode = pod_netns_inode(self.node, pod["metadata"]["uid"])

    def _wait_running(self, timeout: float) -> dict[str, Any]:
        """The pod Running and its itx-ready marker out; LoadGenRefused in its words else."""
        try:
            pod = wait_running(self.namespace, POD, timeout)
            wait_marker(self.namespace, POD, timeout)
        except Unavailable as e:
            raise LoadGenRefused(f"load generator on {self.node_name}: "
                                 f"{e.availability}") from None
        return pod

    def close(self) -> None:
        """Remove the admission rules and the namespace. Idempotent; never raises."""
        for rule in self._admitted.values():
            delete_tagged_rule(rule)
        self._admitted.clear()
        if self.namespace:
            with contextlib.suppress(RuntimeError):
                delete_namespace(self.namespace)
            self.namespace = ""
        self.cpu_group = None

    # -- the protocol ------------------------------------------------------------------
    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        t0 = time.monotonic()
        done = kubectl(*exec_argv(self.namespace, argv, timeout, POD),
                       timeout=timeout + 15)
        why = kubectl_failed(done)
        if why and (down := api_unreachable()):
            raise lost(down)
        if why:
            # kubectl, not the client, failed: the cell fails with its reason.
            raise SanityError(f"load generator pod {self.namespace}/{POD}: {why} "
                              f"(running {argv[0]})")
        return exec_completed(argv, done, t0)

    def target(self, inst: Instance, port: int, proto: str = "tcp") -> tuple[str, int]:
        if proto not in ("tcp", "udp"):
            raise ValueError(f"protocol {proto!r}: use tcp or udp")
        kind, mode = network_of(inst)
        f = inst.facts()
        if mode == Reach.HOST:
            self._admit_only_us("INPUT", L.NODE_IP, port, proto)
            return self._host_address(inst), port
        if mode in (Reach.ROUTED, Reach.TAP):
            self._admit_only_us("FORWARD", inst.address, port, proto)
            return inst.address, port
        if mode == Reach.SERVICE:
            # The load generator's own node translates the Service's address (its
            # kube-proxy); this host forwards to the pod's.
            self._admit_only_us("FORWARD", f.container_address, port, proto)
            if self.node is None and proto == "tcp":
                self._through_proxy(inst, f.published, f.container_address, port)
            return f.published, port
        raise NotApplicable(f"{kind}: network {mode!r} is a port mapping on an address of "
                            "this host for clients outside the cluster, which a load "
                            f"generator pod on {self.node_name} does not use; give it "
                            "network = \"host\"")

    def _through_proxy(self, inst: Instance, service_ip: str, pod_ip: str, port: int,
                       timeout: float = 60) -> None:
        """On a foreign cluster, until this pod's node translates the Service's address to
        the pod (its proxy has synced the endpoint: the API does not say when): a one-shot
        listener on the pod's own address and the port, and connections to the Service's
        address from here until one is accepted. Before, a connection is refused by the
        proxy's rule for a Service without endpoints, or goes nowhere. (python3: the image's
        busybox nc can neither bind an address nor only connect.)"""
        if service_ip in self._through:
            return
        started = inst.exec(["sh", "-c", f'timeout {timeout:.0f} python3 -c "$0" "$1" "$2" '
                             '>/dev/null 2>&1 </dev/null & echo $!', ACCEPT_ONCE, pod_ip,
                             str(port)], 30)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                # Accepted only by the listener: the proxy's reject and a lost packet fail.
                done = self.exec(["python3", "-c", CONNECT, service_ip, str(port)], 10)
                if done.returncode == 0:
                    self._through.add(service_ip)
                    return
                time.sleep(0.1)
        finally:
            pid = started.stdout.strip().splitlines()[-1:] or [""]
            if pid[0].isdigit():
                inst.exec(["sh", "-c", f"kill {pid[0]} 2>/dev/null; true"], 10)
        raise SanityError(f"the Service {service_ip}:{port} does not reach pod {pod_ip} from "
                          f"the load generator's node {self.node_name} within {timeout:.0f} s "
                          "(its proxy has not translated it)")

    def listen(self, inst: Instance) -> str:
        return listen_address(inst, self._host_address(inst))

    def _host_address(self, inst: Instance) -> str:
        """Where a server on its node's own stack is reached: the local cluster's first node,
        this host; a foreign cluster's node, its address (the pod's hostIP)."""
        return L.NODE_IP if self.node is not None else inst.address

    def _admit_only_us(self, chain: str, address: str, port: int, proto: str) -> None:
        """Only the load generator reaches the server: a packet for its port from any other
        address is rejected (INPUT on this host's stack, FORWARD for an address behind it).
        Inserted first, tagged isotax, removed at close. Not on a foreign cluster's nodes,
        which isotax does not reach (its pods' own network policies hold there)."""
        if self.node is None:
            return
        try:
            admit_only(self._admitted, self.address, chain, address, port, proto)
        except NetworkError as e:
            raise SanityError(f"load generator: {e}") from e

    def path(self, inst: Instance) -> str:
        n = self.node
        me = f"loadgen pod {self.namespace}/{POD} ({self.address}) on {self.node_name}"
        link = ("the cluster's network" if n is None
                else f"CNI bridge {n.bridge} -> veth {n.host_link} (node link) -> {L.NODE_IP}"
                if n.host_link else f"CNI bridge {n.bridge} -> this host ({L.NODE_IP})")
        f = inst.facts()
        if n is None:
            # A foreign cluster: its network between the pods is its own (its CNI).
            via = (f"Service {f.published} (its node's kube-proxy) -> {f.container_address}"
                   if f.reach is Reach.SERVICE else inst.address)
            return (f"{me} -> the cluster's network -> {via} -> {f.kind} "
                    f"({f.runtime or '?'}; {f.elsewhere or 'on this host'})")
        if f.reach is Reach.SERVICE:
            # The Service's address is translated on the client's node, before the link.
            return (f"{me} -> Service {f.published} ({self.node_name}'s kube-proxy: iptables "
                    f"DNAT) -> {link} (host routing) -> {f.container_address} -> bridge "
                    f"{f.bridge or '?'} -> veth -> {f.kind} netns ({f.runtime or '?'})")
        return path_words(f"{me} -> {link}", inst, "no port mapping", "host routing")

    def clients_cpu(self) -> ClientsCpu | None:
        return self.cpu_group

    def clients_netns(self) -> int | None:
        return self.netns_inode  # the pod's, where it runs on this host

    def describe(self) -> LoadGenDescription:
        return LoadGenDescription(kind="pod", where=self.where, node=self.node_name,
                                  namespace=self.namespace, client_address=self.address,
                                  host_address=L.NODE_IP, image=self.image_ref)

    @contextlib.contextmanager
    def scratch_file(self, prefix: str, suffix: str) -> Iterator[str]:
        done = self.exec(["mktemp", f"{SCRATCH}/{prefix}XXXXXX{suffix}"], 30)
        path = done.stdout.strip()
        if done.returncode != 0 or not path.startswith(f"{SCRATCH}/"):
            raise SanityError(f"load generator pod {self.namespace}/{POD}: mktemp failed: "
                              f"{done.stderr.strip()[-200:]}")
        try:
            yield path
        finally:
            with contextlib.suppress(SanityError):
                self.exec(["rm", "-f", path], 30)

    def read_text(self, path: str) -> str:
        done = self.exec(["cat", path], 120)
        if done.returncode != 0:
            raise SanityError(f"load generator pod {self.namespace}/{POD}: cannot read "
                              f"{shlex.quote(path)}: {done.stderr.strip()[-200:]}")
        return done.stdout


def pod_netns_inode(node: L.NodeLayout, uid: str) -> int | None:
    """The inode of the network namespace a pod's processes are in (its pause container's,
    which they share); None where none can be read."""
    d = L.pod_cgroup(node, "cpuacct", uid)
    for pid in tree_pids(d) if d is not None else []:
        with contextlib.suppress(OSError):
            return os.stat(f"/proc/{pid}/ns/net").st_ino
    return None


def leaked_namespaces() -> list[Leftover]:
    """Load generator namespaces still in the run's cluster (their tag names their owner)."""
    return namespaces_left(NAMESPACE_PREFIX, " (a load generator pod)")
