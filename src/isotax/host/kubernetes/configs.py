"""The local cluster's configuration files, rendered from layout.py: pure functions, one per
file, so a test reads exactly what each component is given.

What this host needs, each found the hard way (measured here, 2026-11-27):
- containerd's `restrict_oom_score_adj`: root here lacks CAP_SYS_RESOURCE, so a sandbox's
  -998 cannot be set below containerd's own score (runc init fails: "can't get final child's
  PID from pipe"); clamped instead.
- everything private: containerd's root, state, sockets and CNI dirs, runc's and runsc's
  roots, the netns mounts (under containerd's state dir); NRI off (it would open
  /var/run/nri/nri.sock); no TCP listener but the CRI streaming server on 127.0.0.1.
- the kubelet: its cgroupRoot /itx-k8s, the cgroup driver the host's layout calls for
  (nodecgroups: cgroupfs on v1 and on v2 without systemd, systemd on v2 under systemd, with
  containerd's runc `SystemdCgroup` and runsc's `systemd-cgroup` to match: the kubelet takes
  its driver from containerd), `failCgroupV1: false` on v1 only (Kubernetes 1.35 and later
  refuse cgroup v1 otherwise), its read-only port off, its healthz on 127.0.0.1, its serving
  port on the node's own address.
- kube-proxy in iptables mode on the node's address, node ports on that address alone, no
  localhost node ports.
- the CNI bridge `itxcni0` without masquerading: pods talk to the node and each other only.
"""

from __future__ import annotations

import json

from isotax.host.kubernetes import layout as L
from isotax.host.kubernetes import managed
from isotax.host.kubernetes.nodecgroups import V1, CgroupLayout


def containerd_toml(n: L.NodeLayout = L.LOCAL, gvisor_handler: str = "runsc",
                    hosts_dir: str = "", cgroups: CgroupLayout = V1) -> str:
    """containerd 2's config (version 3), with the runtimes the RuntimeClasses name (gVisor's
    under the handler name `gvisor_handler`); with hosts_dir, the registries' hosts configs
    (a managed-style cluster's registry); runc's cgroups through systemd where the kubelet's
    are (containerd tells the kubelet its driver from the default runtime's SystemdCgroup)."""
    registry = (f"\n    [plugins.'io.containerd.cri.v1.images'.registry]\n"
                f"      config_path = \"{hosts_dir}\"" if hosts_dir else "")
    return f"""version = 3
root = "{n.lib}/containerd"
state = "{n.run}/containerd"
temp = "{n.lib}/containerd-tmp"

[grpc]
  address = "{n.containerd_socket}"
[ttrpc]
  address = "{n.containerd_socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = "{n.run}/s"
  [plugins.'io.containerd.internal.v1.opt']
    path = "{n.lib}/opt"
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{L.PAUSE_IMAGE}"{registry}
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
          Root = "{n.run}/runc"
          SystemdCgroup = {str(cgroups.systemd).lower()}
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.{gvisor_handler}]
        runtime_type = "io.containerd.runsc.v1"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.{gvisor_handler}.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = "{n.etc}/runsc.toml"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{L.CNI_BIN}"]
      conf_dir = "{n.etc}/cni/net.d"
      max_conf_num = 1
"""


def runsc_toml(n: L.NodeLayout = L.LOCAL, cgroups: CgroupLayout = V1) -> str:
    """gVisor's shim options: isotax's runsc, its root, and runsc's own flags (systrap; its
    cgroups through systemd where the kubelet's are: the shim passes --systemd-cgroup on and
    reads the sandbox's cgroup as systemd's)."""
    systemd = '  systemd-cgroup = "true"\n' if cgroups.systemd else ""
    return f"""binary_name = "{L.RUNSC}"
root = "{n.run}/runsc"
log_path = "{n.logs}/runsc/%ID%/shim.log"
log_level = "info"
[runsc_config]
  platform = "systrap"
  debug-log = "{n.logs}/runsc/%ID%/"
{systemd}"""


def cni_conflist(n: L.NodeLayout = L.LOCAL, mtu: int = 1500) -> str:
    """One bridge per node (itxcni0 on the first), host-local addresses from the node's range
    kept under isotax's state, portmap. The pods' links get `mtu`: the host uplink's, as every
    link isotax makes (so a pod and native carry the same packet sizes)."""
    return json.dumps({
        "cniVersion": "1.0.0", "name": "itx-k8s",
        "plugins": [
            {"type": "bridge", "bridge": n.bridge, "isGateway": True, "ipMasq": False,
             "hairpinMode": True, "mtu": mtu,
             "ipam": {"type": "host-local", "dataDir": f"{n.lib}/cni/networks",
                      "ranges": [[{"subnet": n.pod_cidr}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}, indent=1) + "\n"


def kubelet_config(cpu_manager: str = "none", n: L.NodeLayout = L.LOCAL,
                   numa_nodes: int = 1, cgroups: CgroupLayout = V1) -> str:
    """The KubeletConfiguration (YAML is a superset of JSON: written as JSON). cpu_manager
    "static" gives Guaranteed pods with whole CPUs exclusive cores, CPU 0 kept for the
    system; on a host of several NUMA nodes with the topology manager's single-numa-node
    policy too (a pod's cores and memory on one node: the Kubernetes answer to Project
    Pacific's finding)."""
    if cpu_manager not in ("none", "static"):
        raise ValueError(f"cpu manager policy {cpu_manager!r}: use none or static")
    config: dict[str, object] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": n.ip, "port": 10250, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": f"{L.PKI}/ca.crt"}},
        "authorization": {"mode": "Webhook"},
        # The root in cgroupfs form on either driver: the systemd one makes it a slice itself.
        "cgroupDriver": cgroups.driver, "cgroupRoot": f"/{n.cgroup_root}",
        **({"failCgroupV1": False} if cgroups.version == 1 else {}),
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{n.containerd_socket}",
        "imageServiceEndpoint": f"unix://{n.containerd_socket}",
        "podLogsDir": f"{n.lib}/pod-logs", "staticPodPath": "",
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
        if numa_nodes > 1:
            config["topologyManagerPolicy"] = "single-numa-node"
            config["topologyManagerScope"] = "pod"
    return json.dumps(config, indent=1) + "\n"


def kube_proxy_config(n: L.NodeLayout = L.LOCAL) -> str:
    """kube-proxy in iptables mode, on the node's address; health and metrics on loopback
    (the node's own: a second node's is its network namespace's)."""
    return json.dumps({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": f"{L.ETC}/kube-proxy.kubeconfig"},
        "hostnameOverride": n.name, "bindAddress": n.ip,
        "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
        "clusterCIDR": n.pod_cidr, "nodePortAddresses": [f"{n.ip}/32"],
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        # 0: leave the host's conntrack settings as they are.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
    }, indent=1) + "\n"


def runtime_classes(classes: dict[str, str] | None = None) -> str:
    """The RuntimeClasses, one per containerd runtime handler (as a kubectl List)."""
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
         "metadata": {"name": name, "labels": {"isotax": "1"}}, "handler": handler}
        for name, handler in (L.RUNTIME_CLASSES if classes is None else classes).items()]},
        indent=1) + "\n"


def crictl_yaml(n: L.NodeLayout = L.LOCAL) -> str:
    return (f"runtime-endpoint: unix://{n.containerd_socket}\n"
            f"image-endpoint: unix://{n.containerd_socket}\ntimeout: 30\n")


def files(cpu_manager: str = "none", n: L.NodeLayout = L.LOCAL, mtu: int = 1500,
          numa_nodes: int = 1, managed: bool = False,
          cgroups: CgroupLayout = V1) -> dict[str, str]:
    """Every file of a node under its etc (layout.ETC for the first), by its path there; the
    cluster's own (the RuntimeClasses) with the first node's. A second node never gets the
    static CPU manager: both kubelets see the same CPUs, and two static policies would hand
    out the same core twice."""
    out = {"containerd.toml": containerd_toml(n, cgroups=cgroups),
           "runsc.toml": runsc_toml(n, cgroups),
           "cni/net.d/10-itx.conflist": cni_conflist(n, mtu),
           "kubelet.json": kubelet_config(cpu_manager if n is L.LOCAL else "none", n,
                                          numa_nodes, cgroups),
           "kube-proxy.json": kube_proxy_config(n), "crictl.yaml": crictl_yaml(n)}
    if n is L.LOCAL:
        out["runtimeclasses.json"] = runtime_classes()
    if managed:
        out.update(managed_files(n, cgroups))
    return out


def managed_files(n: L.NodeLayout, cgroups: CgroupLayout = V1) -> dict[str, str]:
    """What `cluster up --managed` changes of a node's files (host.kubernetes.managed): gVisor
    under the handler `gvisor`, the registry's hosts config; the first node's also the
    RuntimeClasses (gvisor alone), Pod Security's admission config, the objects applied at
    the start and the registry's configuration."""
    out = {"containerd.toml": containerd_toml(n, managed.GVISOR_HANDLER, managed.hosts_dir(n),
                                              cgroups),
           f"certs.d/{managed.REGISTRY}/hosts.toml": managed.hosts_toml()}
    if n is L.LOCAL:
        out.update({"runtimeclasses.json": runtime_classes(managed.RUNTIME_CLASSES),
                    "admission.json": managed.admission_config(),
                    "managed.json": managed.objects(),
                    "registry.json": managed.registry_config()})
    return out
