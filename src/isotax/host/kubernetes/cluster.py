"""The local cluster's life: `isotax cluster up` starts a supervisor (`isotax cluster serve`,
detached) that claims an owner ledger, starts the components in order, waits for each, and
stays until `isotax cluster down` sends it SIGTERM; it then removes everything
(teardown.teardown). Its components inherit its ledger (ISOTAX_OWNER), so while it lives
`isotax doctor` knows them as a live owner's, and once it is gone (killed) as leftovers.

Start order and what says each is up (measured here: node Ready 4-5 s after the start, pods
admitted after ~9 s): containerd (its socket answers; the pause image imported and pinned),
etcd (/health), the API server (/readyz), the controller manager and the scheduler, the
kubelet (its node registered; the RuntimeClasses applied; the node Ready), kube-proxy (after
the node exists: it exits when the node's addresses change; its /healthz), and the default
ServiceAccount (pods can be admitted).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from isotax.host import command, network, owners
from isotax.host.facts import numa
from isotax.host.kubernetes import configs, managed, nodecgroups, pki, ranges, teardown
from isotax.host.kubernetes import layout as L
from isotax.host.kubernetes.components import Component, argvs, node_argvs
from isotax.host.kubernetes.target import Target
from isotax.host.locks import exclusive
from isotax.host.processes import read_cmdline
from isotax.protocols import Completed

READY, STARTING = "ready", "starting"
SERVE_WORDS = ("cluster", "serve")


class ClusterError(Exception):
    """The cluster cannot be started or stopped here; one line saying why and the fix."""


def missing(managed_style: bool = False) -> str | None:
    """What this host lacks to start the cluster (managed-style: with the registry and its
    tools), with the fix; None when it has it all."""
    if os.geteuid() != 0:
        return "`isotax cluster up` needs root (containers, cgroups, iptables)"
    tools = (*L.COMPONENTS, *L.TOOLS, *(L.MANAGED_TOOLS if managed_style else ()))
    lacking = [n for n in tools if not L.binary(n).exists()]
    lacking += [str(p) for p in (L.PAUSE_TAR, *(L.CNI_BIN / c for c in ("bridge", "host-local",
                                                                        "portmap")))
                if not p.exists()]
    if lacking:
        return (f"Kubernetes {L.K8S_VERSION} is not built here ({', '.join(lacking[:4])} "
                f"missing): run `bash scripts/setup.sh --kubernetes` (about 10 min)")
    if not L.RUNSC.exists():
        return f"{L.RUNSC} is missing (the gvisor RuntimeClass): run `bash scripts/setup.sh`"
    if shutil.which("openssl") is None or shutil.which("runc") is None:
        return "openssl and runc are needed: run `bash scripts/setup.sh`"
    return None


def supervisor_pid() -> int | None:
    """The live supervisor's PID, or None."""
    try:
        pid = int(L.SUPERVISOR_PID.read_text().strip())
    except (OSError, ValueError):
        return None
    args = read_cmdline(pid)
    return pid if all(w in args for w in SERVE_WORDS) else None


def state() -> str:
    try:
        return L.STATE.read_text().strip()
    except OSError:
        return ""


def kubectl(*args: str, timeout: float = 60, input_text: str | None = None) -> Completed:
    """kubectl on the local cluster, as its admin."""
    return Target(L.KUBECONFIG).kubectl(*args, timeout=timeout, input_text=input_text)


# -- the supervisor ---------------------------------------------------------------------------

# How long `cluster up` waits, in all, at the default pace; every wait of the supervisor (and
# every call it makes while waiting) is scaled by the pace `--timeout` sets against it: a host
# under emulation (the guest room's guests under QEMU TCG) starts the same cluster many times
# slower, and waits sized for a real host would refuse it there.
DEFAULT_TIMEOUT_S = 300.0
_pace = {"factor": 1.0}


def _s(seconds: float) -> float:
    """`seconds` (a wait sized for a real host) at this supervisor's pace."""
    return seconds * _pace["factor"]


def _wait(what: str, ok: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes]
          ) -> None:
    timeout = _s(timeout)
    deadline = time.monotonic() + timeout
    while not ok():
        if proc.poll() is not None:
            raise ClusterError(f"{what}: its process exited ({proc.returncode}); see its log "
                               f"in {L.LOGS}")
        if time.monotonic() > deadline:
            raise ClusterError(f"{what}: not up after {timeout:.0f} s; see {L.LOGS}")
        time.sleep(0.2)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:  # our own, on loopback
            return bool(r.status == 200)
    except OSError:
        return False


def _succeeds(argv: list[str]) -> Callable[[], bool]:
    return lambda: command.run(argv, _s(20)).returncode == 0


def _prepare_host() -> None:
    """Record the host as it is (once), turn forwarding on, then the node's address and the
    cgroup roots."""
    L.LIB.mkdir(parents=True, exist_ok=True)
    if not L.BEFORE.exists():
        L.BEFORE.write_text(json.dumps({
            "created": [d for d in L.DEFAULT_DIRS if not Path(d).exists()],
            "chains": teardown.host_has_chains()}))
    # The CNI bridge plugin turns forwarding on by itself; turned on first the way isotax's
    # bridges do, its value is saved, and the last of them (or the cluster) restores it.
    with exclusive(network.LOCK):
        network.enable_forwarding()
    steps: list[list[str]] = []
    if not Path(f"/sys/class/net/{L.NODE_LINK}").exists():
        steps += [["ip", "link", "add", L.NODE_LINK, "type", "bridge"],
                  ["ip", "addr", "add", f"{L.NODE_IP}/32", "dev", L.NODE_LINK],
                  ["ip", "link", "set", L.NODE_LINK, "up"]]
    # The pods' bridge, made here rather than by the CNI plugin at the first pod: it is the
    # cluster's, there from `up` to `down`, not a pod's (the plugin takes it as it finds it).
    if not Path(f"/sys/class/net/{L.CNI_BRIDGE}").exists():
        steps += [["ip", "link", "add", L.CNI_BRIDGE, "type", "bridge"],
                  ["ip", "link", "set", L.CNI_BRIDGE, "up"]]
    for argv in steps:
        done = command.run(argv, 30)
        if done.returncode != 0:
            raise ClusterError(f"{' '.join(argv)}: {done.stderr.strip()}")
    _cgroup_root(L.CGROUP_ROOT)


def _cgroup_root(name: str) -> None:
    """A kubelet's cgroupRoot, made as this host's cgroup layout needs it (nodecgroups)."""
    try:
        nodecgroups.make_root(nodecgroups.host(), name)
    except nodecgroups.RootError as e:
        raise ClusterError(f"the kubelet's cgroup root: {e}") from None


def _prepare_worker(n: L.NodeLayout) -> None:
    """The second node's network namespace, joined to the host by a routed veth pair: its
    address on its end, the host's (the first node's address) as its gateway, the host's
    routes to it and to its pods; forwarding on inside; its cgroup root."""
    fresh = not Path(f"/run/netns/{n.netns}").exists()
    steps = [["ip", "netns", "add", n.netns]] if fresh else []
    inside = lambda *a: n.enter(list(a))  # noqa: E731
    mtu = str(_uplink_mtu())  # as every link isotax makes
    steps += [["ip", "link", "add", n.host_link, "mtu", mtu, "type", "veth", "peer", "name",
               n.link, "mtu", mtu, "netns", n.netns],
              ["ip", "link", "set", n.host_link, "up"],
              inside("ip", "link", "set", "lo", "up"),
              inside("ip", "addr", "add", f"{n.ip}/32", "dev", n.link),
              inside("ip", "link", "set", n.link, "up"),
              inside("ip", "route", "add", f"{L.NODE_IP}/32", "dev", n.link),
              inside("ip", "route", "add", "default", "via", L.NODE_IP, "dev", n.link),
              inside("sysctl", "-q", "-w", "net.ipv4.ip_forward=1"),
              ["ip", "route", "add", f"{n.ip}/32", "dev", n.host_link, "src", L.NODE_IP],
              ["ip", "route", "add", n.pod_cidr, "via", n.ip, "dev", n.host_link]]
    for argv in steps:
        done = command.run(argv, 30)
        if done.returncode != 0:
            raise ClusterError(f"node {n.name}: {' '.join(argv)}: {done.stderr.strip()}")
    for spec in teardown.worker_forward_rules(n):
        try:
            network.add_tagged_rule("filter", "FORWARD", *spec, insert=True)
        except network.NetworkError as e:
            raise ClusterError(f"node {n.name}: {e}") from None
    _cgroup_root(n.cgroup_root)


def _uplink_mtu() -> int:
    with network.IPRoute() as ipr:
        return network.uplink_mtu(ipr)


def _write_config(cpu_manager: str, n: L.NodeLayout = L.LOCAL,
                  managed_style: bool = False) -> None:
    for rel, text in configs.files(cpu_manager, n, _uplink_mtu(), max(1, len(numa.nodes())),
                                   managed_style, nodecgroups.host()).items():
        path = n.etc / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        # kube-proxy exits when its config file changes: only what differs is rewritten.
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    if n is L.LOCAL:
        pki.make(more=managed.CERTS if managed_style else None)
        pki.write_kubeconfigs()
        if managed_style:
            _managed_secrets()


def _managed_secrets() -> None:
    """The managed-style cluster's account (its kubeconfig) and the registry's credentials:
    a password made now, its bcrypt line for the registry, and a docker config.json."""
    server = f"https://{L.NODE_IP}:{L.APISERVER_PORT}"
    managed.USER_KUBECONFIG.write_text(pki.kubeconfig(
        server, (L.PKI / "ca.crt").read_bytes(), (L.PKI / "user.crt").read_bytes(),
        (L.PKI / "user.key").read_bytes(), managed.USER))
    if managed.HTPASSWD.exists() and managed.PULL_SECRET.exists():
        return
    password = secrets.token_urlsafe(18)
    done = command.run([str(L.binary("itx-htpasswd")), managed.REGISTRY_USER], 30,
                       input=password)
    if done.returncode != 0:
        raise ClusterError(f"itx-htpasswd: {done.stderr.strip()[-200:]}")
    managed.HTPASSWD.write_text(done.stdout)
    managed.PULL_SECRET.write_text(managed.docker_config(password))
    for path in (managed.USER_KUBECONFIG, managed.HTPASSWD, managed.PULL_SECRET):
        path.chmod(0o600)


def serve(cpu_manager: str = "none", nodes: int = 1, managed_style: bool = False,
          timeout: float = DEFAULT_TIMEOUT_S) -> int:
    """The supervisor: start the cluster (`nodes` 2: with a second node, layout.WORKER;
    managed_style: set up as managed clusters are, host.kubernetes.managed), its waits paced
    by `timeout` (the time `cluster up` gives it), say so in layout.STATE, stay until SIGTERM
    or SIGINT, then remove it all. Its exit status: 0 when everything was removed."""
    _pace["factor"] = max(1.0, timeout / DEFAULT_TIMEOUT_S)
    owners.claim()
    for name in (L.CGROUP_ROOT, nodecgroups.root_unit(L.CGROUP_ROOT), L.CNI_BRIDGE,
                 L.NODE_LINK, L.NODE):
        owners.mark(name)
    if nodes > 1:
        for name in (L.WORKER.name, L.WORKER.netns, L.WORKER.host_link, L.WORKER.cgroup_root,
                     nodecgroups.root_unit(L.WORKER.cgroup_root)):
            owners.mark(name)
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    L.RUN.mkdir(parents=True, exist_ok=True)
    L.SUPERVISOR_PID.write_text(str(os.getpid()))
    L.STATE.write_text(STARTING)
    L.PACE.write_text(f"{_pace['factor']:g}\n")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        _prepare_host()
        if managed_style:
            managed.MARK.write_text("managed\n")
        _write_config(cpu_manager, managed_style=managed_style)
        L.LOGS.mkdir(parents=True, exist_ok=True)
        _start_all(procs, stop, managed_style)
        if nodes > 1:
            _prepare_worker(L.WORKER)
            _write_config(cpu_manager, L.WORKER, managed_style)
            _start_worker(L.WORKER, procs, stop)
        L.STATE.write_text(READY)
        while not stop["now"]:
            dead = [(n, p) for n, p in procs.items() if p.poll() is not None]
            if dead:
                L.STATE.write_text(f"failed: {dead[0][0]} exited ({dead[0][1].returncode}) "
                                   f"while the cluster ran; see {L.LOGS}")
            time.sleep(0.5)
    except Exception as e:  # whatever failed, the supervisor removes what it made
        L.STATE.write_text(f"failed: {e}")
        while not stop["now"]:  # `cluster up` reads the failure, then `down` removes
            time.sleep(0.2)
    problems = teardown.teardown()
    for line in problems:
        print(f"isotax cluster: left: {line}", file=sys.stderr)
    return 1 if problems else 0


def _launch(c: Component, n: L.NodeLayout, procs: dict[str, subprocess.Popen[bytes]],
            stop: dict[str, bool]) -> subprocess.Popen[bytes]:
    """Start a component, its output in the node's log directory; recorded in procs under
    its name (a second node's: prefixed with the node's)."""
    if stop["now"]:
        raise ClusterError("stopped while starting")
    n.logs.mkdir(parents=True, exist_ok=True)
    with open(n.logs / f"{c.name}.log", "ab") as log:
        p = subprocess.Popen(c.argv, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=log, start_new_session=True,
                             env={**os.environ, "PATH": f"{L.BIN}:{os.environ['PATH']}"})
    procs[c.name if n is L.LOCAL else f"{n.name}/{c.name}"] = p
    return p


def _containerd_ready(n: L.NodeLayout, p: subprocess.Popen[bytes]) -> None:
    """Wait for a node's containerd, then give it the pause image, pinned."""
    _wait(f"containerd of {n.name}", _succeeds(L.ctr_argv("version", node=n)), 60, p)
    for argv in (L.ctr_argv("images", "import", "--all-platforms", str(L.PAUSE_TAR), node=n),
                 L.ctr_argv("images", "label", L.PAUSE_IMAGE,
                            "io.cri-containerd.pinned=pinned", node=n)):
        done = command.run(argv, _s(120))
        if done.returncode != 0:
            raise ClusterError(f"the pause image on {n.name}: {done.stderr.strip()[-200:]}")


def _node_ready(n: L.NodeLayout, p: subprocess.Popen[bytes]) -> None:
    _wait(f"the kubelet's node {n.name}", lambda: kubectl(
        "get", "node", n.name, timeout=_s(10)).returncode == 0, 120, p)
    _wait(f"the node {n.name} Ready", lambda: kubectl(
        "get", "node", n.name, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
        timeout=_s(10)).stdout.strip() == "True", 180, p)


def _healthz(n: L.NodeLayout) -> Callable[[], bool]:
    """Whether kube-proxy of node n answers on its healthz port (its namespace's loopback)."""
    url = "http://127.0.0.1:10256/healthz"
    if not n.netns:
        return lambda: _http_ok(url)
    probe = ("import sys, urllib.request\n"
             f"try: sys.exit(0 if urllib.request.urlopen({url!r}, timeout=2).status == 200 "
             "else 1)\nexcept OSError: sys.exit(1)")
    return _succeeds(n.enter([sys.executable, "-c", probe]))


def _start_worker(n: L.NodeLayout, procs: dict[str, subprocess.Popen[bytes]],
                  stop: dict[str, bool]) -> None:
    """The second node: its containerd, its kubelet (its node Ready), its kube-proxy."""
    by_name = {c.name: c for c in node_argvs(n)}
    for d in (n.lib, n.run):
        d.mkdir(parents=True, exist_ok=True)
    _containerd_ready(n, _launch(by_name["containerd"], n, procs, stop))
    _node_ready(n, _launch(by_name["kubelet"], n, procs, stop))
    p = _launch(by_name["kube-proxy"], n, procs, stop)
    _wait(f"kube-proxy of {n.name}", _healthz(n), 60, p)


def _start_all(procs: dict[str, subprocess.Popen[bytes]], stop: dict[str, bool],
               managed_style: bool = False) -> None:
    by_name = {c.name: c for c in argvs(managed_style)}

    def start(name: str) -> subprocess.Popen[bytes]:
        return _launch(by_name[name], L.LOCAL, procs, stop)

    _containerd_ready(L.LOCAL, start("containerd"))
    p = start("etcd")
    _wait("etcd", lambda: _http_ok(f"{L.ETCD_CLIENT}/health"), 60, p)
    p = start("kube-apiserver")
    _wait("the API server", lambda: kubectl("get", "--raw", "/readyz", timeout=_s(10)).returncode
          == 0, 180, p)
    start("kube-controller-manager")
    start("kube-scheduler")
    p = start("kubelet")
    # Retried: a young API server may not serve its OpenAPI yet, which kubectl's validation
    # reads (seen under TCG: "timed out ... openapi").
    tried: list[Completed] = []

    def classes_applied() -> bool:
        tried.append(kubectl("apply", "-f", str(L.ETC / "runtimeclasses.json"),
                             timeout=_s(60)))
        return tried[-1].returncode == 0

    try:
        _wait("the RuntimeClasses", classes_applied, 120, procs["kube-apiserver"])
    except ClusterError as e:
        raise ClusterError(f"{e}: {tried[-1].stderr.strip()[-200:]}" if tried
                           else str(e)) from None
    _node_ready(L.LOCAL, p)
    p = start("kube-proxy")
    _wait("kube-proxy", _healthz(L.LOCAL), 60, p)
    _wait("the default ServiceAccount", lambda: kubectl(
        "-n", "default", "get", "serviceaccount", "default", timeout=_s(10)).returncode == 0, 60, p)
    if managed_style:
        _start_managed(start("registry"), procs["kube-apiserver"])


def _start_managed(registry: subprocess.Popen[bytes], apiserver: subprocess.Popen[bytes]
                   ) -> None:
    """The managed-style cluster's own objects (the account's ClusterRole, the policy that
    refuses privileged namespaces), each waited for until the API server enforces it, and
    its registry, waited for until it answers (401: it asks for credentials)."""
    done = kubectl("apply", "-f", str(L.ETC / "managed.json"), timeout=_s(60))
    if done.returncode != 0:
        raise ClusterError(f"the managed-style objects: {done.stderr.strip()[-200:]}")
    probe = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "itx-ceiling-probe", "labels": {"pod-security.kubernetes.io/enforce":
                                                "privileged"}}})
    _wait("the policy refusing privileged namespaces", lambda: managed.CEILING in kubectl(
        "create", "--dry-run=server", "-f", "-", input_text=probe, timeout=_s(10)).stderr, 60,
        apiserver)
    user = Target(managed.USER_KUBECONFIG)
    _wait("the account's ClusterRole", lambda: user.kubectl(
        "auth", "can-i", "create", "pods", "--subresource=exec", "-n", "itx-pod-probe",
        timeout=_s(10)
    ).stdout.strip() == "yes", 60, apiserver)
    _wait("the registry", lambda: _registry_asks(), 60, registry)


def _registry_asks() -> bool:
    """Whether the registry answers its /v2/ with 401 (it wants credentials), over TLS
    checked against the cluster's CA."""
    context = ssl.create_default_context(cafile=str(L.PKI / "ca.crt"))
    try:
        urllib.request.urlopen(f"https://{managed.REGISTRY}/v2/", timeout=2, context=context)
    except urllib.error.HTTPError as e:
        return e.code == 401
    except OSError:
        return False
    return False


# -- the commands -----------------------------------------------------------------------------

def choose_range() -> str:
    """The /16 the cluster takes here: the first of ranges.CANDIDATES that none of the host's
    routes and addresses overlaps, recorded (layout.RANGE_FILE) for every later command."""
    try:
        net = ranges.choose(ranges.host_taken())
    except ranges.RangeError as e:
        raise ClusterError(str(e)) from None
    L.LIB.mkdir(parents=True, exist_ok=True)
    L.RANGE_FILE.write_text(f"{net}\n")
    return str(net)


def up(cpu_manager: str = "none", timeout: float = DEFAULT_TIMEOUT_S, nodes: int = 1,
       managed_style: bool = False) -> float:
    """Start the cluster (its supervisor, detached), with `nodes` nodes (1 or 2), on the range
    choose_range() takes, set up as managed clusters are with managed_style, within `timeout`
    seconds (each of the supervisor's waits scaled to match); the seconds it took.
    ClusterError with one line (and everything removed) when it cannot start."""
    if nodes not in (1, 2):
        raise ClusterError(f"--nodes {nodes}: the local cluster has 1 or 2 nodes")
    why = missing(managed_style)
    if why:
        raise ClusterError(why)
    if supervisor_pid() is not None:
        raise ClusterError(f"the cluster is already up (supervisor {supervisor_pid()}); "
                           "`isotax cluster down` stops it")
    left = teardown.present()
    if left:
        raise ClusterError(f"a cluster isotax started is left on this host ({left[0]}): "
                           "`isotax cluster down` removes it")
    if teardown.host_has_chains():
        raise ClusterError("this host has KUBE-/CNI- iptables chains: another Kubernetes runs "
                           "here; isotax starts its own only on a host without one")
    t0 = time.monotonic()
    choose_range()
    L.RUN.mkdir(parents=True, exist_ok=True)
    log = L.RUN / "supervisor.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "isotax", *SERVE_WORDS, f"--cpu-manager={cpu_manager}",
             f"--nodes={nodes}", f"--timeout={timeout:g}",
             *(["--managed"] if managed_style else [])],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
    deadline = time.monotonic() + timeout
    while True:
        now = state()
        if now == READY:
            return time.monotonic() - t0
        failed = now.startswith("failed") or proc.poll() is not None
        if failed or time.monotonic() > deadline:
            why = now if now.startswith("failed") else (
                f"the supervisor exited ({proc.returncode}); see {log}" if proc.poll()
                is not None else f"not ready after {timeout:.0f} s")
            down()
            raise ClusterError(f"the cluster did not start: {why}")
        time.sleep(0.2)


def down(timeout: float = 180) -> list[str]:
    """Stop the cluster and remove everything it made; what is left, one line each."""
    pid = supervisor_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while supervisor_pid() is not None and time.monotonic() < deadline:
            time.sleep(0.2)
    if supervisor_pid() is None and teardown.present():
        # No supervisor (killed, or never started): remove what is there.
        teardown.teardown()
    return teardown.present()
