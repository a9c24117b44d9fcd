"""Where the local cluster lives and how it is addressed: one place for every path, name and
address its parts share. Every name isotax gives starts with itx (its state under
/var/lib/itx-k8s and /run/itx-k8s, its links itx-node0 and itxcni0, its cgroup root /itx-k8s:
a slice itx_k8s.slice under systemd, see nodecgroups), so the leak finders see what is left of
it.

Its addresses all lie in one /16 (10.217.0.0/16 unless the host holds it: ranges.py), which
`cluster up` records in RANGE_FILE; every later command (pods, the load generator, teardown,
doctor) reads the range from there. NODE_IP, POD_CIDR, SERVICE_CIDR and SERVICE_FIRST_IP are
therefore not constants but module attributes computed on each read (__getattr__ below), as
are a node's ip and pod_cidr."""

from __future__ import annotations

import os
from dataclasses import dataclass
from ipaddress import IPv4Network
from pathlib import Path
from typing import TYPE_CHECKING

from isotax.host.kubernetes import nodecgroups

K8S_VERSION = "v1.37.2"  # what scripts/kubernetes-build.sh builds (and only it pins)
# Where scripts/kubernetes-build.sh installs the binaries, cached by version.
PREFIX = Path(os.environ.get("ISOTAX_K8S_PREFIX", "/opt/isotax/kubernetes")) / K8S_VERSION
BIN = PREFIX / "bin"
CNI_BIN = PREFIX / "cni"
PAUSE_TAR = PREFIX / "images" / "pause.tar"
PAUSE_IMAGE = "localhost/itx/pause:3.10.2"
RUNSC = Path("/opt/isotax/runsc/runsc")  # where scripts/setup.sh installs gVisor's runsc

COMPONENTS = ("containerd", "etcd", "kube-apiserver", "kube-controller-manager",
              "kube-scheduler", "kubelet", "kube-proxy")
TOOLS = ("kubectl", "crictl", "ctr", "containerd-shim-runc-v2", "containerd-shim-runsc-v1")
# A managed-style cluster's (`cluster up --managed`): distribution's registry, a pusher, and
# the registry's bcrypt htpasswd lines.
MANAGED_TOOLS = ("registry", "crane", "itx-htpasswd")

LIB = Path("/var/lib/itx-k8s")  # persistent state: etcd, containerd's root, the kubelet's
RUN = Path("/run/itx-k8s")  # runtime state: containerd's state and socket, runsc's root
ETC = LIB / "etc"  # the rendered configuration and kubeconfigs
PKI = LIB / "pki"
LOGS = LIB / "logs"
SUPERVISOR_PID = RUN / "supervisor.pid"
STATE = RUN / "state"  # the supervisor's word: "starting", "ready" or "failed: <why>"
PACE = RUN / "pace"  # how many times a real host's waits `cluster up --timeout` gave it

# What the host was like before `cluster up`, for teardown: ip_forward, the default paths the
# components make whatever their flags say, and whether any KUBE-/CNI- chain was there.
BEFORE = LIB / "host-before.json"

NODE = "itx-node1"
NODE_LINK = "itx-node0"  # a port-less bridge holding the node's address (no dummy driver here)
CNI_BRIDGE = "itxcni0"
DEFAULT_RANGE = "10.217.0.0/16"
RANGE_FILE = LIB / "range"  # the /16 `cluster up` chose (ranges.choose), one line
# Computed from the recorded range on each read (__getattr__): the first node's address
# (x.y.0.1), its pods' range (x.y.1.0/24), the Services' range (x.y.128.0/20) and its first
# address (the `kubernetes` Service: the API server's certificate names it).
NODE_IP: str
POD_CIDR: str
SERVICE_CIDR: str
SERVICE_FIRST_IP: str
APISERVER_PORT = 6443
ETCD_CLIENT = "http://127.0.0.1:12379"
ETCD_PEER = "http://127.0.0.1:12380"
CONTAINERD_SOCKET = RUN / "containerd" / "containerd.sock"
CGROUP_ROOT = "itx-k8s"  # the kubelet's cgroupRoot (nodecgroups: where that is on this host)
KUBECONFIG = ETC / "admin.kubeconfig"  # what `isotax run` and kubectl use for this cluster

# Default paths the kubelet, containerd, gVisor's shim and the CNI plugins use whatever their
# flags say; teardown removes those that were not there before `cluster up`.
DEFAULT_DIRS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni",
                "/run/containerd")

# RuntimeClass name -> containerd runtime handler (configs.containerd_toml declares both).
RUNTIME_CLASSES = {"runc": "runc", "gvisor": "runsc"}
# What a pod of each is, as isotax set them up ("": containerd's default runtime, runc): what
# a local pod is expected to be where the plan's options.isolation says nothing. A foreign
# cluster's classes say nothing of the kind (a handler's name is no proof).
RUNTIME_ISOLATION = {"": "container", "runc": "container", "gvisor": "sandbox"}


def cluster_range() -> IPv4Network:
    """The cluster's /16: the one `cluster up` recorded, else the default (no cluster)."""
    try:
        return IPv4Network(RANGE_FILE.read_text().strip())
    except (OSError, ValueError):
        return IPv4Network(DEFAULT_RANGE)


def in_range(net: IPv4Network, third: int, fourth: int = 0, prefixlen: int = 32) -> str:
    """An address (prefixlen 32) or a network of the cluster's /16, by its last two bytes.
    Pure."""
    address = net.network_address + (third << 8) + fourth
    return str(address) if prefixlen == 32 else f"{address}/{prefixlen}"


if not TYPE_CHECKING:  # mypy reads the annotations above, so a misspelt name is still caught
    def __getattr__(name: str) -> str:
        net = cluster_range()
        derived = {"NODE_IP": lambda: in_range(net, 0, 1),
                   "POD_CIDR": lambda: in_range(net, 1, prefixlen=24),
                   "SERVICE_CIDR": lambda: in_range(net, 128, prefixlen=20),
                   "SERVICE_FIRST_IP": lambda: in_range(net, 128, 1)}
        if name in derived:
            return derived[name]()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class NodeLayout:
    """One node's own parts: its name and address, its pods' range and bridge, its cgroup
    root, and where its containerd, kubelet and configuration live. The first node is this
    host itself; a second one (`isotax cluster up --nodes 2`) is a network namespace on it,
    joined by a veth pair, with its own containerd, kubelet and kube-proxy: the studies'
    second machine, inside the cluster."""

    name: str
    index: int  # its address is x.y.0.<index> of the cluster's range, its pods' x.y.<index>.0/24
    bridge: str  # the CNI bridge its pods are on
    cgroup_root: str  # the kubelet's cgroupRoot (nodecgroups: where that is on this host)
    lib: Path
    run: Path
    etc: Path
    netns: str = ""  # "" for this host's own network namespace
    host_link: str = ""  # the host's end of the veth pair to netns
    link: str = ""  # its end in netns, holding ip

    @property
    def ip(self) -> str:
        return in_range(cluster_range(), 0, self.index)

    @property
    def pod_cidr(self) -> str:
        return in_range(cluster_range(), self.index, prefixlen=24)

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd" / "containerd.sock"

    @property
    def logs(self) -> Path:
        return self.lib / "logs"

    @property
    def kubeconfig(self) -> Path:
        """The kubelet's: a client certificate of its own node (the Node authorizer's)."""
        return ETC / ("kubelet.kubeconfig" if not self.netns else f"kubelet-{self.name}"
                      ".kubeconfig")

    def enter(self, argv: list[str]) -> list[str]:
        """argv run in the node's network namespace (nsenter joins only it: `ip netns exec`
        would also remount /sys, and runsc and the kubelet would lose the cgroup mounts)."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--", *argv] if self.netns \
            else argv


LOCAL = NodeLayout(NODE, 1, CNI_BRIDGE, CGROUP_ROOT, LIB, RUN, ETC)
WORKER = NodeLayout("itx-node2", 2, "itxcni1", "itx-k8s-n2",
                    LIB / "node2", RUN / "node2", ETC / "node2", netns="itx-node2",
                    host_link="itx-n2h", link="itx-n2c")
NODES = (LOCAL, WORKER)


def node_layout(name: str) -> NodeLayout:
    """The node of that name; KeyError when the local cluster has none."""
    for n in NODES:
        if n.name == name:
            return n
    raise KeyError(name)


def binary(name: str) -> Path:
    return BIN / name


def pace() -> float:
    """The running cluster's pace (1: a real host's), for what waits on it from outside (a
    pod's start, the image's import)."""
    try:
        return max(1.0, float(PACE.read_text()))
    except (OSError, ValueError):
        return 1.0


def ctr_argv(*args: str, node: NodeLayout | None = None) -> list[str]:
    """ctr on a node's containerd (the first node's by default), in the namespace the
    kubelet's images and containers live in (k8s.io)."""
    socket = (node or LOCAL).containerd_socket
    return [str(binary("ctr")), "--address", str(socket), "-n", "k8s.io", *args]


def pod_cgroup(n: NodeLayout, hierarchy: str, uid: str) -> Path | None:
    """A pod's cgroup: the node's kubelet's, under its cgroup root, in its QoS class's group;
    on v1 in the hierarchy named (cpuacct, memory, ...), on v2 the one group. None when it is
    not there."""
    layout = nodecgroups.host()
    for qos in ("", "burstable", "besteffort"):
        d = nodecgroups.pod_dir(layout, n.cgroup_root, qos, uid, hierarchy)
        if uid and d.is_dir():
            return d
    return None


def pod_limits(n: NodeLayout, uid: str) -> str:
    """The limits a pod's cgroup really has, in words ("" where it cannot be read)."""
    return nodecgroups.read_limits(nodecgroups.host(), {
        h: pod_cgroup(n, h, uid) for h in ("cpu", "memory", "cpuset")})
