"""The local cluster's configuration files, rendered from layout.py: pure functions, one per
file, so a test reads exactly what each component is given.

What this host needs, each found the hard way (measured here, 2026-11-27):
- containerd's `restrict_oom_score_adj`: root here lacks CAP_SYS_RESOURCE, so a sandbox's
  -998 cannot be set below containerd's own score (runc init fails: "can't get final child's
  PID from pipe"); clamped instead.
- everything private: containerd's root, state, sockets and CNI dirs, runc's and runsc's
  roots, the netns mounts (under containerd's state dir); NRI off (it would open
  /var/run/nri/nri.sock); no TCP listener but the CRI streaming server on 127.0.0.1.
- the kubelet: `failCgroupV1: false` (Kubernetes 1.35 and later refuse cgroup v1 otherwise),
  the cgroupfs driver, its cgroupRoot /itx-k8s, its read-only port off, its healthz on
  127.0.0.1, its serving port on the node's own address.
- kube-proxy in iptables mode on the node's address, node ports on that address alone, no
  localhost node ports.
- the CNI bridge `itxcni0` without masquerading: pods talk to the node and each other only.
"""

from __future__ import annotations

import json

from isotax.host.kubernetes import layout as L


def containerd_toml() -> str:
    """containerd 2's config (version 3), with the runtimes the RuntimeClasses name."""
    return f"""version = 3
root = "{L.LIB}/containerd"
state = "{L.RUN}/containerd"
temp = "{L.LIB}/containerd-tmp"

[grpc]
  address = "{L.CONTAINERD_SOCKET}"
[ttrpc]
  address = "{L.CONTAINERD_SOCKET}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "{L.RUN}/s"
  [plugins.'io.containerd.internal.v1.opt']
    path = "{L.LIB}/opt"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{L.PAUSE_IMAGE}"
  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "/usr/bin/runc"
          Root = "{L.RUN}/runc"
          SystemdCgroup = false
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
        runtime_type = "io.containerd.runsc.v1"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = "{L.ETC}/runsc.toml"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{L.CNI_BIN}"]
      conf_dir = "{L.ETC}/cni/net.d"
      max_conf_num = 1
"""


def runsc_toml() -> str:
    """gVisor's shim options: isotax's runsc, its root, and runsc's own flags (systrap)."""
    return f"""binary_name = "{L.RUNSC}"
root = "{L.RUN}/runsc"
log_path = "{L.LOGS}/runsc/%ID%/shim.log"
log_level = "info"
[runsc_config]
  platform = "systrap"
  debug-log = "{L.LOGS}/runsc/%ID%/"
"""


def cni_conflist() -> str:
    """One bridge, itxcni0, host-local addresses kept under isotax's state, portmap."""
    return json.dumps({
        "cniVersion": "1.0.0", "name": "itx-k8s",
        "plugins": [
            {"type": "bridge", "bridge": L.CNI_BRIDGE, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": f"{L.LIB}/cni/networks",
                      "ranges": [[{"subnet": L.POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}, indent=1) + "\n"


def kubelet_config(cpu_manager: str = "none") -> str:
    """The KubeletConfiguration (YAML is a superset of JSON: written as JSON). cpu_manager
    "static" gives Guaranteed pods with whole CPUs exclusive cores, CPU 0 kept for the
    system."""
    if cpu_manager not in ("none", "static"):
        raise ValueError(f"cpu manager policy {cpu_manager!r}: use none or static")
    config: dict[str, object] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": L.NODE_IP, "port": 10250, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": f"{L.PKI}/ca.crt"}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{L.CGROUP_ROOT}", "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{L.CONTAINERD_SOCKET}",
        "imageServiceEndpoint": f"unix://{L.CONTAINERD_SOCKET}",
        "podLogsDir": f"{L.LIB}/pod-logs", "staticPodPath": "",
        "clusterDomain": "cluster.local", "resolvConf": "/etc/resolv.conf",
        "cpuManagerPolicy": cpu_manager, "serializeImagePulls": False,
        # isotax imports its images (imagePullPolicy: Never): never collect them.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%"},
        "protectKernelDefaults": False, "localStorageCapacityIsolation": True,
    }
    if cpu_manager == "static":
        config["reservedSystemCPUs"] = "0"
    return json.dumps(config, indent=1) + "\n"


def kube_proxy_config() -> str:
    """kube-proxy in iptables mode, on the node's address; health and metrics on loopback."""
    return json.dumps({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": f"{L.ETC}/kube-proxy.kubeconfig"},
        "hostnameOverride": L.NODE, "bindAddress": L.NODE_IP,
        "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
        "clusterCIDR": L.POD_CIDR, "nodePortAddresses": [f"{L.NODE_IP}/32"],
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        # 0: leave the host's conntrack settings as they are.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
    }, indent=1) + "\n"


def runtime_classes() -> str:
    """The RuntimeClasses, one per containerd runtime handler (as a kubectl List)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
         "metadata": {"name": name, "labels": {"isotax": "1"}}, "handler": handler}
        for name, handler in L.RUNTIME_CLASSES.items()]}, indent=1) + "\n"


def crictl_yaml() -> str:
    return (f"runtime-endpoint: unix://{L.CONTAINERD_SOCKET}\n"
            f"image-endpoint: unix://{L.CONTAINERD_SOCKET}\ntimeout: 30\n")


def files(cpu_manager: str = "none") -> dict[str, str]:
    """Every file under layout.ETC, by its path there."""
    return {"containerd.toml": containerd_toml(), "runsc.toml": runsc_toml(),
            "cni/net.d/10-itx.conflist": cni_conflist(),
            "kubelet.json": kubelet_config(cpu_manager),
            "kube-proxy.json": kube_proxy_config(), "runtimeclasses.json": runtime_classes(),
            "crictl.yaml": crictl_yaml()}
