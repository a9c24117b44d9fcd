"""Pods of one spec started together and timed as Kubernetes users time them (the pod kind's
Burst, protocols.starts): one watch of the API for all of them, the node's CRI for what the API
cannot say.

- The API is reached through `kubectl proxy` on a unix socket in the burst's workdir (one
  kubectl process, so every kubeconfig's way of logging in works, and each request after it is
  a plain HTTP call of a millisecond or so, where a kubectl process a pod costs ~90 ms of CPU
  and would be part of what it times).
- One watch of the namespace's pods (GET .../pods?watch=1) is open before the first pod is
  created; each event is stamped with this process's clock as it is read. A phase's time is
  the first event that shows it, less the moment its pod's create request was sent
  (parsers.pod_events: created, scheduled, sandbox_ready, initialized, started, ready). The
  API's own timestamps (whole seconds) are kept for the kube-burner export.
- On the local cluster the node's containerd adds, from `crictl inspectp`/`inspect`: when the
  sandbox's creation began (cri_sandbox), and the container's create and start (cri_created,
  cri_started), in nanoseconds of the same clock.
- The image is on the node before the first pod (the local cluster imports it; a foreign one
  pulls it for the environment's own pod first), and every pod says imagePullPolicy Never or
  IfNotPresent: image pull is never in these times.
- Every pod requests a sliver (manifests.BURST_CPU; Burstable, the plan's limits) so that 100
  of them fit on a node whatever the plan's vcpus: a start-up measures starting, not the
  scheduler's refusal.

Everything is in one namespace of isotax's (itx-pod-<tag>), deleted by close() with the proxy
stopped: the pod kind's leak finder knows the namespace by its prefix.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from isotax.environments.kube_api import api_unreachable, lost
from isotax.host import command
from isotax.host.kubernetes import layout as L
from isotax.host.kubernetes.target import Target
from isotax.model import SanityError
from isotax.parsers.pod_events import CriTimes, PodTimes, cri_times, pod_times
from isotax.protocols import StartRecord

PROXY_WAIT_S = 15.0
NAME = "itx-start-{}"  # the pods' names in the burst's namespace


class _Unix(http.client.HTTPConnection):
    """HTTP over the proxy's unix socket."""

    def __init__(self, path: str, timeout: float | None = 30) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.path)
        self.sock = s


class Pods(Protocol):
    """What a burst needs of the pod kind's instance (kube.pod.PodInstance): its namespace
    and image made ready, its pods' manifests, and the stop that deletes the namespace."""

    namespace: str
    layout: L.NodeLayout | None
    target: Target

    def prepare(self) -> None: ...

    def manifest(self, name: str = ..., *, burst: bool = ...) -> dict[str, Any]: ...

    def stop(self) -> None: ...


class PodBurst:
    source = ("the API's watch of the pods' conditions (phases from each pod's create "
              "request), and on the local cluster the node's CRI (crictl: sandbox, container "
              "create and start)")

    def __init__(self, pods: Pods, workdir: Path) -> None:
        self.pods = pods  # its namespace, image and manifests; its stop() deletes them
        self.sock = str(workdir / "api.sock")
        self.proxy: subprocess.Popen[bytes] | None = None
        self.events: list[tuple[float, Mapping[str, Any]]] = []
        self.watch_error = ""
        self._lock = threading.Lock()
        self._watch: threading.Thread | None = None
        self._watch_conn: _Unix | None = None
        self.requested: dict[str, tuple[float, float]] = {}  # name -> (monotonic, epoch)
        self._opened = False

    # -- opening: the namespace, the proxy, the watch -----------------------------------
    def _open(self) -> None:
        self._opened = True
        self.pods.prepare()
        t = self.pods.target
        self.proxy = subprocess.Popen(
            [t.kubectl_path, f"--kubeconfig={t.kubeconfig}", "proxy",
             f"--unix-socket={self.sock}"], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + PROXY_WAIT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                self._request("GET", "/version")
                break
            if self.proxy.poll() is not None:
                raise SanityError("kubectl proxy ended: " + (self.proxy.stderr.read().decode(
                    errors="replace")[-300:] if self.proxy.stderr else ""))
            time.sleep(0.05)
        else:
            raise SanityError(f"kubectl proxy did not answer on {self.sock} within "
                              f"{PROXY_WAIT_S:.0f} s")
        ready = threading.Event()
        self._watch = threading.Thread(target=self._watching, args=(ready,), daemon=True)
        self._watch.start()
        if not ready.wait(30) or self.watch_error:
            raise SanityError(f"the watch of {self.pods.namespace}'s pods did not open: "
                              f"{self.watch_error or 'no answer in 30 s'}")

    def _request(self, method: str, path: str, body: Mapping[str, Any] | None = None
                 ) -> tuple[int, bytes]:
        c = _Unix(self.sock)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def _watching(self, ready: threading.Event) -> None:
        """The watch's reader: every event with the moment it was read."""
        c = _Unix(self.sock, timeout=None)
        self._watch_conn = c
        try:
            c.request("GET", f"/api/v1/namespaces/{self.pods.namespace}/pods?watch=1")
            r = c.getresponse()
            if r.status != 200:
                self.watch_error = f"HTTP {r.status}: {r.read()[:200]!r}"
                return
            ready.set()
            for line in r:
                t = time.monotonic()
                if line.strip():
                    with self._lock:
                        self.events.append((t, json.loads(line)))
        except (OSError, ValueError, http.client.HTTPException) as e:
            self.watch_error = self.watch_error or str(e)
        finally:
            ready.set()

    # -- starting ------------------------------------------------------------------------
    @property
    def running(self) -> int:
        return len(self.requested)

    def _create(self, name: str) -> None:
        body = self.pods.manifest(name, burst=True)
        t, wall = time.monotonic(), time.time()
        status, text = self._request("POST", f"/api/v1/namespaces/{self.pods.namespace}/pods",
                                     body)
        if status != 201:
            if down := api_unreachable():
                raise lost(down)
            raise SanityError(f"the API refused pod {name}: HTTP {status}: "
                              f"{text.decode(errors='replace')[:300]}")
        self.requested[name] = (t, wall)

    def _seen(self) -> dict[str, PodTimes]:
        with self._lock:
            events = list(self.events)
        return pod_times(events)

    def _wait(self, names: list[str], deadline: float) -> dict[str, PodTimes]:
        """Until every one of names has started; SanityError at the first that cannot, or at
        the deadline."""
        while True:
            seen = self._seen()
            for n in names:
                if n in seen and seen[n].failed:
                    raise SanityError(f"pod {self.pods.namespace}/{n} will not start: "
                                      f"{seen[n].failed}")
            if all(n in seen and "started" in seen[n].seen for n in names):
                return seen
            if self.watch_error:
                raise SanityError(f"the watch of the pods ended: {self.watch_error}")
            if time.monotonic() > deadline:
                left = [n for n in names if "started" not in seen.get(n, PodTimes(n)).seen]
                raise SanityError(f"{len(left)} of {len(names)} pods had not started after "
                                  f"the time allowed (first: {left[0]})")
            # Seldom: the watch thread stamps each event as it is read, and this loop's
            # parsing holds the interpreter meanwhile (a stamp can wait for it).
            time.sleep(0.1)

    def start(self, count: int, rate_per_s: float, timeout: float) -> list[StartRecord]:
        if not self._opened:
            self._open()
        first = len(self.requested)
        names = [NAME.format(first + i + 1) for i in range(count)]
        deadline = time.monotonic() + timeout
        t0 = time.monotonic()
        for i, name in enumerate(names):
            if rate_per_s > 0:
                time.sleep(max(0.0, t0 + i / rate_per_s - time.monotonic()))
            self._create(name)
            if rate_per_s <= 0:
                self._wait([name], deadline)
        seen = self._wait(names, deadline)
        cri = self._cri() if self.pods.layout is not None else {}
        return [self._record(seen[n], cri.get(seen[n].uid)) for n in names]

    def _record(self, pod: PodTimes, cri: CriTimes | None) -> StartRecord:
        t, wall = self.requested[pod.name]
        phases = {k: v - t for k, v in pod.seen.items() if k != "deleted"}
        if cri is not None:
            for phase, at in (("cri_sandbox", cri.sandbox_created),
                              ("cri_created", cri.container_created),
                              ("cri_started", cri.container_started)):
                if at:
                    phases[phase] = at - wall
        return StartRecord(pod.name, phases, wall, pod.node, self.pods.namespace, dict(pod.api))

    def _crictl(self, *args: str) -> str:
        layout = self.pods.layout
        assert layout is not None
        done = command.run(layout.enter([str(L.binary("crictl")), "--config",
                                         str(layout.etc / "crictl.yaml"), *args]), 60)
        return done.stdout if done.returncode == 0 else ""

    def _cri(self) -> dict[str, CriTimes]:
        """The node's CRI times of the burst's pods (empty where crictl cannot say)."""
        label = f"io.kubernetes.pod.namespace={self.pods.namespace}"
        sandboxes = self._crictl("pods", "-q", "--label", label).split()
        containers = self._crictl("ps", "-a", "-q", "--label", label).split()
        if not sandboxes or not containers:
            return {}
        try:
            return cri_times(self._crictl("inspectp", "-o", "json", *sandboxes),
                             self._crictl("inspect", "-o", "json", *containers))
        except ValueError:
            return {}

    # -- closing -------------------------------------------------------------------------
    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.pods.stop()  # the namespace, and every pod in it
        if self._watch_conn is not None:
            with contextlib.suppress(OSError):
                if self._watch_conn.sock is not None:
                    self._watch_conn.sock.shutdown(socket.SHUT_RDWR)
        if self.proxy is not None and self.proxy.poll() is None:
            command.kill_group(self.proxy)  # type: ignore[arg-type]
            self.proxy.wait()
        if self._watch is not None:
            self._watch.join(10)
        self.proxy = None
