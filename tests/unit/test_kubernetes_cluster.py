"""The local Kubernetes cluster's pure parts: its components' command lines and configuration
(nothing listens on a wildcard, the host's needs are in), its certificates' extensions and
kubeconfigs, and the teardown's reading of real iptables-save output captured with the
cluster up (tests/data/kubernetes)."""

from __future__ import annotations

import base64
import json
import tomllib
from pathlib import Path

import pytest
from support import DATA

from isotax.host.kubernetes import configs, pki, teardown
from isotax.host.kubernetes import layout as L
from isotax.host.kubernetes.components import argvs, node_argvs


def test_components_start_in_order_from_isotax_binaries_on_private_addresses() -> None:
    comps = argvs()
    assert [c.name for c in comps] == list(L.COMPONENTS)
    for c in comps:
        assert c.argv[0] == str(L.binary(c.name))
        words = " ".join(c.argv)
        assert "0.0.0.0" not in words and "::" not in words, c.name
    api = next(c for c in comps if c.name == "kube-apiserver").argv
    assert f"--bind-address={L.NODE_IP}" in api
    assert f"--service-cluster-ip-range={L.SERVICE_CIDR}" in api
    for name in ("kube-controller-manager", "kube-scheduler"):
        assert "--bind-address=127.0.0.1" in next(c for c in comps if c.name == name).argv


def test_containerd_runs_runc_and_runsc_privately() -> None:
    conf = tomllib.loads(configs.containerd_toml())
    assert conf["version"] == 3 and conf["grpc"]["address"] == str(L.CONTAINERD_SOCKET)
    plugins = conf["plugins"]
    cri = plugins["io.containerd.cri.v1.runtime"]
    # No CAP_SYS_RESOURCE here: a sandbox's oom_score_adj is clamped, not refused.
    assert cri["restrict_oom_score_adj"] is True
    runtimes = cri["containerd"]["runtimes"]
    assert set(runtimes) == set(L.RUNTIME_CLASSES.values())
    assert runtimes["runc"]["options"]["SystemdCgroup"] is False  # cgroupfs, as the kubelet
    assert runtimes["runsc"]["runtime_type"] == "io.containerd.runsc.v1"
    assert plugins["io.containerd.grpc.v1.cri"]["stream_server_address"] == "127.0.0.1"
    assert plugins["io.containerd.nri.v1.nri"]["disable"] is True
    assert tomllib.loads(configs.runsc_toml())["runsc_config"]["platform"] == "systrap"


def test_the_kubelet_on_cgroup_v1_and_its_cpu_manager() -> None:
    k = json.loads(configs.kubelet_config())
    assert k["failCgroupV1"] is False and k["cgroupDriver"] == "cgroupfs"
    assert k["cgroupRoot"] == f"/{L.CGROUP_ROOT}" and k["readOnlyPort"] == 0
    assert k["address"] == L.NODE_IP and k["healthzBindAddress"] == "127.0.0.1"
    assert k["cpuManagerPolicy"] == "none" and "reservedSystemCPUs" not in k
    static = json.loads(configs.kubelet_config("static"))
    assert static["cpuManagerPolicy"] == "static" and static["reservedSystemCPUs"] == "0"
    # One NUMA node (this host): no topology policy; several: a pod's cores on one node.
    assert "topologyManagerPolicy" not in static
    numa = json.loads(configs.kubelet_config("static", numa_nodes=2))
    assert numa["topologyManagerPolicy"] == "single-numa-node"
    assert "topologyManagerPolicy" not in json.loads(configs.kubelet_config("none",
                                                                            numa_nodes=2))
    with pytest.raises(ValueError, match="use none or static"):
        configs.kubelet_config("dynamic")


def test_kube_proxy_cni_and_runtime_classes() -> None:
    kp = json.loads(configs.kube_proxy_config())
    assert kp["mode"] == "iptables" and kp["bindAddress"] == L.NODE_IP
    assert kp["nodePortAddresses"] == [f"{L.NODE_IP}/32"]
    assert kp["healthzBindAddress"].startswith("127.0.0.1:")
    cni = json.loads(configs.cni_conflist())
    bridge = cni["plugins"][0]
    assert bridge["bridge"] == L.CNI_BRIDGE and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": L.POD_CIDR}]]
    classes = json.loads(configs.runtime_classes())["items"]
    assert {c["metadata"]["name"]: c["handler"] for c in classes} == L.RUNTIME_CLASSES
    assert set(configs.files()) >= {"containerd.toml", "kubelet.json", "kube-proxy.json"}


def test_the_second_node_is_its_own_in_a_network_namespace() -> None:
    w = L.WORKER
    # Nothing of the second node's shares a path, an address or a name with the first's.
    for field in ("name", "ip", "pod_cidr", "bridge", "cgroup_root", "run", "etc"):
        assert getattr(w, field) != getattr(L.LOCAL, field), field
    assert str(w.containerd_socket).startswith(f"{w.run}/") and w.netns.startswith("itx")
    assert all(n.startswith("itx") and len(n) <= 15 for n in (w.host_link, w.link, w.bridge))
    comps = node_argvs(w)
    assert [c.name for c in comps] == ["containerd", "kubelet", "kube-proxy"]
    for c in comps:
        # In the node's namespace only (not `ip netns exec`, which remounts /sys).
        assert c.argv[:3] == ("nsenter", f"--net=/run/netns/{w.netns}", "--")
        assert c.argv[3] == str(L.binary(c.name))
    kubelet = next(c for c in comps if c.name == "kubelet").argv
    assert f"--node-ip={w.ip}" in kubelet and f"--hostname-override={w.name}" in kubelet
    assert f"--kubeconfig={w.kubeconfig}" in kubelet and w.kubeconfig != L.LOCAL.kubeconfig
    files = configs.files("static", w)
    assert "runtimeclasses.json" not in files  # the cluster's, applied with the first node
    k = json.loads(files["kubelet.json"])
    # Both kubelets see the same CPUs: only the first may hand out exclusive ones.
    assert k["cpuManagerPolicy"] == "none" and k["cgroupRoot"] == f"/{w.cgroup_root}"
    assert k["address"] == w.ip and k["containerRuntimeEndpoint"].endswith(
        str(w.containerd_socket))
    kp = json.loads(files["kube-proxy.json"])
    assert kp["hostnameOverride"] == w.name and kp["nodePortAddresses"] == [f"{w.ip}/32"]
    conf = tomllib.loads(files["containerd.toml"])
    assert conf["root"].startswith(str(w.lib)) and conf["state"].startswith(str(w.run))
    assert json.loads(files["cni/net.d/10-itx.conflist"])["plugins"][0]["ipam"]["ranges"] == \
        [[{"subnet": w.pod_cidr}]]
    assert f"system:node:{w.name}" == pki.CERTS[f"kubelet-{w.name}"][0]
    assert L.node_layout(w.name) is w
    with pytest.raises(KeyError):
        L.node_layout("itx-node9")


def test_certificates_serve_the_nodes_names_and_kubeconfigs_embed_them() -> None:
    serving = pki.extensions(pki.CERTS["apiserver"][2])
    assert "extendedKeyUsage=serverAuth" in serving
    assert f"IP:{L.NODE_IP}" in serving and f"IP:{L.SERVICE_FIRST_IP}" in serving
    assert "extendedKeyUsage=clientAuth" in pki.extensions(None)
    assert pki.CERTS["kubelet"][:2] == (f"system:node:{L.NODE}", "system:nodes")
    cfg = json.loads(pki.kubeconfig("https://10.217.0.1:6443", b"CA", b"CERT", b"KEY", "u"))
    assert cfg["clusters"][0]["cluster"]["server"] == "https://10.217.0.1:6443"
    assert base64.b64decode(cfg["users"][0]["user"]["client-key-data"]) == b"KEY"
    assert cfg["current-context"] == "itx"


def test_teardown_reads_the_chains_kube_proxy_made() -> None:
    nat = (DATA / "kubernetes" / "iptables-save-nat.txt").read_text()
    flt = (DATA / "kubernetes" / "iptables-save-filter.txt").read_text()
    chains = teardown.our_chains(nat)
    assert "KUBE-SERVICES" in chains and "KUBE-POSTROUTING" in chains
    assert all(c.startswith(("KUBE-", "CNI-")) for c in chains)
    assert "PREROUTING" not in chains
    jumps = teardown.jumps_to_ours(flt)
    # The built-in chains' jumps, whole: a quoted comment stays one argument.
    assert ["-D", "INPUT", "-j", "KUBE-FIREWALL"] in jumps
    assert ["-D", "FORWARD", "-m", "comment", "--comment", "kubernetes forwarding rules",
            "-j", "KUBE-FORWARD"] in jumps
    # isotax's own rules and kube-proxy's rules inside its chains are not touched here.
    assert not any("isotax" in r for j in jumps for r in j)
    assert not any(j[1].startswith("KUBE-") for j in jumps)


def test_the_captured_node_and_runtime_classes() -> None:
    node = json.loads((DATA / "kubernetes" / "node.json").read_text())["items"][0]
    assert node["metadata"]["name"] == L.NODE
    assert node["status"]["nodeInfo"]["kubeletVersion"] == L.K8S_VERSION
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
    classes = json.loads((DATA / "kubernetes" / "runtimeclasses.json").read_text())["items"]
    assert {c["metadata"]["name"]: c["handler"] for c in classes} == L.RUNTIME_CLASSES


def test_a_longer_timeout_paces_every_wait_and_the_pods_start(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """`cluster up --timeout 3600` (the guest room's, under TCG): the supervisor's waits
    grow twelvefold, a wait that outlasts even that names its step, and the pace is left
    for a pod's start to read; never below a real host's."""
    import subprocess
    import sys

    from isotax.host.kubernetes import cluster

    monkeypatch.setattr(L, "PACE", tmp_path / "pace")
    assert L.pace() == 1.0  # no cluster: a real host's
    monkeypatch.setitem(cluster._pace, "factor", 3600 / cluster.DEFAULT_TIMEOUT_S)
    assert cluster._s(10) == 120
    (tmp_path / "pace").write_text("12\n")
    assert L.pace() == 12
    (tmp_path / "pace").write_text("0.5\n")
    assert L.pace() == 1.0
    monkeypatch.setitem(cluster._pace, "factor", 0.001)  # a wait of 60 s becomes 0.06 s
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(cluster.ClusterError, match=r"^the API server: not up after 0 s"):
            cluster._wait("the API server", lambda: False, 60, sleeper)
    finally:
        sleeper.kill()
        sleeper.wait()
