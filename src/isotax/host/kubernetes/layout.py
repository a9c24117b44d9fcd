"""Where the local cluster lives and how it is addressed: one place for every path, name and
address its parts share. Every name isotax gives starts with itx (its state under
/var/lib/itx-k8s and /run/itx-k8s, its links itx-node0 and itxcni0, its cgroup root /itx-k8s),
so the leak finders see what is left of it."""

from __future__ import annotations

import os
from pathlib import Path

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

LIB = Path("/var/lib/itx-k8s")  # persistent state: etcd, containerd's root, the kubelet's
RUN = Path("/run/itx-k8s")  # runtime state: containerd's state and socket, runsc's root
ETC = LIB / "etc"  # the rendered configuration and kubeconfigs
PKI = LIB / "pki"
LOGS = LIB / "logs"
SUPERVISOR_PID = RUN / "supervisor.pid"
STATE = RUN / "state"  # the supervisor's word: "starting", "ready" or "failed: <why>"
# What the host was like before `cluster up`, for teardown: ip_forward, the default paths the
# components make whatever their flags say, and whether any KUBE-/CNI- chain was there.
BEFORE = LIB / "host-before.json"

NODE = "itx-node1"
NODE_LINK = "itx-node0"  # a port-less bridge holding the node's address (no dummy driver here)
NODE_IP = "10.217.0.1"
CNI_BRIDGE = "itxcni0"
POD_CIDR = "10.217.1.0/24"
SERVICE_CIDR = "10.217.128.0/20"
SERVICE_FIRST_IP = "10.217.128.1"  # the `kubernetes` Service: the API server's certificate names it
APISERVER_PORT = 6443
ETCD_CLIENT = "http://127.0.0.1:12379"
ETCD_PEER = "http://127.0.0.1:12380"
CONTAINERD_SOCKET = RUN / "containerd" / "containerd.sock"
CGROUP_ROOT = "itx-k8s"  # the kubelet's cgroupRoot, in every v1 hierarchy
KUBECONFIG = ETC / "admin.kubeconfig"  # what `isotax run` and kubectl use for this cluster

# Default paths the kubelet, containerd, gVisor's shim and the CNI plugins use whatever their
# flags say; teardown removes those that were not there before `cluster up`.
DEFAULT_DIRS = ("/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/var/lib/cni",
                "/run/containerd")

# RuntimeClass name -> containerd runtime handler (configs.containerd_toml declares both).
RUNTIME_CLASSES = {"runc": "runc", "gvisor": "runsc"}


def binary(name: str) -> Path:
    return BIN / name


def ctr_argv(*args: str) -> list[str]:
    """ctr on the cluster's containerd, in the namespace the kubelet's images and containers
    live in (k8s.io)."""
    return [str(binary("ctr")), "--address", str(CONTAINERD_SOCKET), "-n", "k8s.io", *args]
