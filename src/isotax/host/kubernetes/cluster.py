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
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from isotax.host import command, network, owners
from isotax.host.kubernetes import configs, pki, teardown
from isotax.host.kubernetes import layout as L
from isotax.host.kubernetes.components import argvs
from isotax.host.locks import exclusive
from isotax.host.processes import read_cmdline
from isotax.protocols import Completed

READY, STARTING = "ready", "starting"
SERVE_WORDS = ("cluster", "serve")


class ClusterError(Exception):
    """The cluster cannot be started or stopped here; one line saying why and the fix."""


def missing() -> str | None:
    """What this host lacks to start the cluster, with the fix; None when it has it all."""
    if os.geteuid() != 0:
        return "`isotax cluster up` needs root (containers, cgroups, iptables)"
    lacking = [n for n in (*L.COMPONENTS, *L.TOOLS) if not L.binary(n).exists()]
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


def kubectl(*args: str, timeout: float = 60) -> Completed:
    return command.run([str(L.binary("kubectl")), f"--kubeconfig={L.KUBECONFIG}", *args],
                       timeout)


# -- the supervisor ---------------------------------------------------------------------------

def _wait(what: str, ok: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes]
          ) -> None:
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
    return lambda: command.run(argv, 20).returncode == 0


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
    # The kubelet checks its cgroupRoot in every v1 hierarchy (name=systemd included).
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        if hierarchy.name != "unified" and hierarchy.is_dir():
            (hierarchy / L.CGROUP_ROOT).mkdir(exist_ok=True)
    cpuset = Path("/sys/fs/cgroup/cpuset")
    if (cpuset / L.CGROUP_ROOT).is_dir():
        for f in ("cpuset.cpus", "cpuset.mems"):
            (cpuset / L.CGROUP_ROOT / f).write_text((cpuset / f).read_text())


def _write_config(cpu_manager: str) -> None:
    for rel, text in configs.files(cpu_manager).items():
        path = L.ETC / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        # kube-proxy exits when its config file changes: only what differs is rewritten.
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    pki.make()
    pki.write_kubeconfigs()


def serve(cpu_manager: str = "none") -> int:
    """The supervisor: start the cluster, say so in layout.STATE, stay until SIGTERM or
    SIGINT, then remove it all. Its exit status: 0 when everything was removed."""
    owners.claim()
    for name in (L.CGROUP_ROOT, L.CNI_BRIDGE, L.NODE_LINK, L.NODE):
        owners.mark(name)
    stop = {"now": False}

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    L.RUN.mkdir(parents=True, exist_ok=True)
    L.SUPERVISOR_PID.write_text(str(os.getpid()))
    L.STATE.write_text(STARTING)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        _prepare_host()
        _write_config(cpu_manager)
        L.LOGS.mkdir(parents=True, exist_ok=True)
        _start_all(procs, stop)
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


def _start_all(procs: dict[str, subprocess.Popen[bytes]], stop: dict[str, bool]) -> None:
    by_name = {c.name: c for c in argvs()}

    def start(name: str) -> subprocess.Popen[bytes]:
        if stop["now"]:
            raise ClusterError("stopped while starting")
        with open(L.LOGS / f"{name}.log", "ab") as log:
            p = subprocess.Popen(by_name[name].argv, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=log, start_new_session=True,
                                 env={**os.environ, "PATH": f"{L.BIN}:{os.environ['PATH']}"})
        procs[name] = p
        return p

    p = start("containerd")
    _wait("containerd", _succeeds(L.ctr_argv("version")), 60, p)
    for argv in (L.ctr_argv("images", "import", "--all-platforms", str(L.PAUSE_TAR)),
                 L.ctr_argv("images", "label", L.PAUSE_IMAGE,
                            "io.cri-containerd.pinned=pinned")):
        done = command.run(argv, 120)
        if done.returncode != 0:
            raise ClusterError(f"the pause image: {done.stderr.strip()[-200:]}")
    p = start("etcd")
    _wait("etcd", lambda: _http_ok(f"{L.ETCD_CLIENT}/health"), 60, p)
    p = start("kube-apiserver")
    _wait("the API server", lambda: kubectl("get", "--raw", "/readyz", timeout=10).returncode
          == 0, 180, p)
    start("kube-controller-manager")
    start("kube-scheduler")
    p = start("kubelet")
    _wait("the kubelet's node", lambda: kubectl("get", "node", L.NODE, timeout=10).returncode
          == 0, 120, p)
    done = kubectl("apply", "-f", str(L.ETC / "runtimeclasses.json"))
    if done.returncode != 0:
        raise ClusterError(f"the RuntimeClasses: {done.stderr.strip()[-200:]}")
    _wait("the node Ready", lambda: kubectl(
        "get", "node", L.NODE, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
        timeout=10).stdout.strip() == "True", 180, p)
    p = start("kube-proxy")
    _wait("kube-proxy", lambda: _http_ok("http://127.0.0.1:10256/healthz"), 60, p)
    _wait("the default ServiceAccount", lambda: kubectl(
        "-n", "default", "get", "serviceaccount", "default", timeout=10).returncode == 0, 60, p)


# -- the commands -----------------------------------------------------------------------------

def up(cpu_manager: str = "none", timeout: float = 300) -> float:
    """Start the cluster (its supervisor, detached); the seconds it took. ClusterError with
    one line (and everything removed) when it cannot start."""
    why = missing()
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
    L.RUN.mkdir(parents=True, exist_ok=True)
    log = L.RUN / "supervisor.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "isotax", *SERVE_WORDS, f"--cpu-manager={cpu_manager}"],
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
