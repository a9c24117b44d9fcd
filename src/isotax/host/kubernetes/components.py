"""The local cluster's processes: each component's command line (pure), in the order they
start, with what says that each is up."""

from __future__ import annotations

from dataclasses import dataclass

from isotax.host.kubernetes import layout as L
from isotax.host.kubernetes.managed import registry_argv as managed_registry_argv


@dataclass(frozen=True)
class Component:
    name: str
    argv: tuple[str, ...]


def argvs(managed: bool = False) -> list[Component]:
    """Every component's command line, in start order. Pure. Each listens on loopback or on
    the node's own address (layout.NODE_IP on itx-node0), never on a wildcard. managed: the
    API server with Pod Security's defaults (host.kubernetes.managed), and the registry."""
    etc, pki, b = L.ETC, L.PKI, L.binary
    kube = lambda n: str(etc / f"{n}.kubeconfig")  # noqa: E731
    own = {c.name: c for c in _node_own(L.LOCAL)}
    return [
        own["containerd"],
        Component("etcd", (
            str(b("etcd")), "--name", "itx-etcd", "--data-dir", str(L.LIB / "etcd"),
            "--listen-client-urls", L.ETCD_CLIENT, "--advertise-client-urls", L.ETCD_CLIENT,
            "--listen-peer-urls", L.ETCD_PEER, "--initial-advertise-peer-urls", L.ETCD_PEER,
            "--initial-cluster", f"itx-etcd={L.ETCD_PEER}", "--initial-cluster-state", "new")),
        Component("kube-apiserver", (
            str(b("kube-apiserver")), f"--bind-address={L.NODE_IP}",
            f"--advertise-address={L.NODE_IP}", f"--secure-port={L.APISERVER_PORT}",
            f"--etcd-servers={L.ETCD_CLIENT}",
            f"--tls-cert-file={pki}/apiserver.crt", f"--tls-private-key-file={pki}/apiserver.key",
            f"--client-ca-file={pki}/ca.crt",
            f"--kubelet-client-certificate={pki}/apiserver-kubelet-client.crt",
            f"--kubelet-client-key={pki}/apiserver-kubelet-client.key",
            "--kubelet-preferred-address-types=InternalIP",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki}/sa.pub",
            f"--service-account-signing-key-file={pki}/sa.key",
            f"--service-cluster-ip-range={L.SERVICE_CIDR}",
            "--service-node-port-range=30000-32767", "--authorization-mode=Node,RBAC",
            "--allow-privileged=true",
            *([f"--admission-control-config-file={etc}/admission.json"] if managed else []))),
        Component("kube-controller-manager", (
            str(b("kube-controller-manager")), "--bind-address=127.0.0.1",
            "--secure-port=10257", f"--kubeconfig={kube('controller-manager')}",
            f"--authentication-kubeconfig={kube('controller-manager')}",
            f"--authorization-kubeconfig={kube('controller-manager')}",
            f"--root-ca-file={pki}/ca.crt", f"--service-account-private-key-file={pki}/sa.key",
            f"--cluster-signing-cert-file={pki}/ca.crt",
            f"--cluster-signing-key-file={pki}/ca.key",
            f"--service-cluster-ip-range={L.SERVICE_CIDR}",
            "--use-service-account-credentials=true", "--leader-elect=false")),
        Component("kube-scheduler", (
            str(b("kube-scheduler")), "--bind-address=127.0.0.1", "--secure-port=10259",
            f"--kubeconfig={kube('scheduler')}",
            f"--authentication-kubeconfig={kube('scheduler')}",
            f"--authorization-kubeconfig={kube('scheduler')}", "--leader-elect=false")),
        own["kubelet"],
        # Only once the node is registered: kube-proxy exits when its node's addresses change
        # (none -> NODE_IP), which they do when the kubelet registers it.
        own["kube-proxy"],
        *([Component("registry", managed_registry_argv())] if managed else []),
    ]


def _node_own(n: L.NodeLayout) -> tuple[Component, ...]:
    """A node's own processes (containerd, the kubelet, kube-proxy) on its own files. Pure."""
    b = L.binary
    return (
        Component("containerd", (str(b("containerd")), "--config",
                                 str(n.etc / "containerd.toml"))),
        Component("kubelet", (
            str(b("kubelet")), f"--config={n.etc}/kubelet.json", f"--kubeconfig={n.kubeconfig}",
            f"--root-dir={n.lib}/kubelet", f"--cert-dir={n.lib}/kubelet/pki",
            f"--hostname-override={n.name}", f"--node-ip={n.ip}", "--v=1")),
        Component("kube-proxy", (str(b("kube-proxy")), f"--config={n.etc}/kube-proxy.json",
                                 "--v=1")),
    )


def node_argvs(n: L.NodeLayout) -> list[Component]:
    """A second node's own processes, each in the node's network namespace, in start order.
    Pure. They listen on the node's address or its namespace's loopback, which only this host
    reaches."""
    return [Component(c.name, tuple(n.enter(list(c.argv)))) for c in _node_own(n)]
