"""The local cluster's certificates (openssl) and kubeconfigs: one CA of its own, the API
server's serving certificate (for the node's address, the `kubernetes` Service's and
loopback), a client certificate per component and for the admin, the service-account key pair.
Made once, kept under layout.PKI until `cluster down`."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from isotax.host import command
from isotax.host.kubernetes import layout as L

DAYS = "365"
# name -> (common name, organisation, subject alternative names; None for a client certificate)
CERTS: dict[str, tuple[str, str, str | None]] = {
    "apiserver": ("kube-apiserver", "", ",".join([
        f"IP:{L.NODE_IP}", f"IP:{L.SERVICE_FIRST_IP}", "IP:127.0.0.1", "DNS:kubernetes",
        "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
        "DNS:kubernetes.default.svc.cluster.local", "DNS:localhost"])),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters", None),
    "admin": ("itx-admin", "system:masters", None),
    "controller-manager": ("system:kube-controller-manager", "", None),
    "scheduler": ("system:kube-scheduler", "", None),
    "kubelet": (f"system:node:{L.NODE}", "system:nodes", None),
    # The second node's kubelet (`cluster up --nodes 2`): the Node authorizer lets a kubelet
    # touch only its own node's objects, so each node has its own identity.
    f"kubelet-{L.WORKER.name}": (f"system:node:{L.WORKER.name}", "system:nodes", None),
    "kube-proxy": ("system:kube-proxy", "", None),
}
# The components (and the admin) that talk to the API server with a kubeconfig.
KUBECONFIGS = ("admin", "controller-manager", "scheduler", "kubelet",
               f"kubelet-{L.WORKER.name}", "kube-proxy")


def _openssl(*args: str) -> None:
    done = command.run(["openssl", *args], 60)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()[-300:]}")


def extensions(san: str | None) -> str:
    """The X.509 v3 extensions of a leaf certificate: serving with its names, or client. Pure."""
    lines = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment"]
    lines += (["extendedKeyUsage=serverAuth", f"subjectAltName={san}"] if san
              else ["extendedKeyUsage=clientAuth"])
    return "\n".join(lines) + "\n"


def make(pki: Path = L.PKI,
         more: dict[str, tuple[str, str, str | None]] | None = None) -> None:
    """Every certificate and key that is not there yet (CERTS, and `more`)."""
    pki.mkdir(parents=True, exist_ok=True)
    ca, ca_key = pki / "ca.crt", pki / "ca.key"
    if not ca.exists():
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
                 "-out", str(ca), "-days", DAYS, "-subj", "/CN=itx-k8s-ca")
    for name, (cn, org, san) in {**CERTS, **(more or {})}.items():
        crt, key = pki / f"{name}.crt", pki / f"{name}.key"
        if crt.exists():
            continue
        csr, ext = pki / f"{name}.csr", pki / f"{name}.ext"
        subject = f"/CN={cn}" + (f"/O={org}" if org else "")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
                 "-subj", subject)
        ext.write_text(extensions(san))
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                 "-CAcreateserial", "-out", str(crt), "-days", DAYS, "-extfile", str(ext))
        csr.unlink()
        ext.unlink()
    if not (pki / "sa.key").exists():
        _openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
        _openssl("rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    for key in pki.glob("*.key"):
        key.chmod(0o600)


def kubeconfig(server: str, ca: bytes, cert: bytes, key: bytes, user: str) -> str:
    """A kubeconfig with its certificates embedded (JSON, which YAML readers take). Pure."""
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "itx",
        "clusters": [{"name": "itx", "cluster": {"server": server,
                                                 "certificate-authority-data": b64(ca)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert),
                                          "client-key-data": b64(key)}}],
        "contexts": [{"name": "itx", "context": {"cluster": "itx", "user": user}}],
    }, indent=1) + "\n"


def write_kubeconfigs(pki: Path = L.PKI, etc: Path = L.ETC) -> None:
    server = f"https://{L.NODE_IP}:{L.APISERVER_PORT}"
    ca = (pki / "ca.crt").read_bytes()
    for name in KUBECONFIGS:
        path = etc / f"{name}.kubeconfig"
        path.write_text(kubeconfig(server, ca, (pki / f"{name}.crt").read_bytes(),
                                   (pki / f"{name}.key").read_bytes(), f"itx-{name}"))
        path.chmod(0o600)
