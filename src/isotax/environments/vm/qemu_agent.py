"""Host side of the guest command agent (guest/itx-agent.py): JSON lines over a unix socket.

Why a virtio-serial port, and not the serial console, 9p or vsock:
- vsock does not work on this kind of host (no vhost-vsock), and would need a vhost device.
- The serial console is where the kernel log and boot milestones go; multiplexing commands
  over it would mix binary-unsafe output with kernel messages and slow both (16550 emulation
  moves one byte per trap).
- 9p is a file system, not a channel: requests would need polling of files, and a 9p share
  adds a device whose traffic would be counted in the workload's I/O.
- A virtio-serial port is a dedicated, reliable byte stream with flow control, named
  (`org.isotax.agent`, found by the guest in sysfs without udev), and on the host it is just
  a unix socket chardev. QEMU connects to a socket isotax listens on *before* QEMU starts, so
  the port is host-connected from the guest's first instant and no request is ever lost.

One request at a time (a lock serialises callers); every response carries the request's id,
and a late answer to an abandoned request is skipped, so the stream never gets out of step.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from isotax.protocols import Completed

# Added to a command's own timeout before the host gives up on the agent: the guest enforces
# the timeout itself (124), this only catches a hung or dead guest.
HOST_GRACE_S = 30.0


class AgentError(Exception):
    """The guest agent did not answer (the VM died, hung, or the channel closed)."""


class AgentClient:
    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._sock.setblocking(False)
        self._buf = b""
        self._next_id = 1
        self._lock = threading.Lock()
        self.closed = False

    def _send(self, msg: Mapping[str, Any]) -> None:
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        while view:
            select.select([], [self._sock], [], 1.0)
            try:
                n = self._sock.send(view)
            except BlockingIOError:
                continue
            except OSError as e:
                raise AgentError(f"agent channel closed while sending: {e}") from e
            view = view[n:]

    def _read_line(self, deadline: float) -> bytes:
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentError("no answer from the guest agent in time")
            r, _, _ = select.select([self._sock], [], [], min(left, 1.0))
            if not r:
                continue
            try:
                chunk = self._sock.recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError as e:
                raise AgentError(f"agent channel failed: {e}") from e
            if not chunk:
                raise AgentError("agent channel closed (the VM has stopped)")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def request(self, msg: Mapping[str, Any], wait_s: float) -> dict[str, Any]:
        """Send one request and return the response with the same id."""
        with self._lock:
            if self.closed:
                raise AgentError("agent channel is closed")
            rid = self._next_id
            self._next_id += 1
            self._send({**msg, "id": rid})
            deadline = time.monotonic() + wait_s
            while True:
                resp = json.loads(self._read_line(deadline))
                if resp.get("id") == rid:
                    return resp  # type: ignore[no-any-return]
                # else: the answer to an earlier request the host gave up on; skip it

    def ping(self, wait_s: float) -> dict[str, Any]:
        return self.request({"op": "ping"}, wait_s)

    def exec(self, argv: Sequence[str], timeout: float, env: Mapping[str, str],
             cwd: str = "/") -> Completed:
        t0 = time.monotonic()
        resp = self.request({"op": "exec", "argv": list(argv), "timeout": timeout,
                             "env": dict(env), "cwd": cwd}, timeout + HOST_GRACE_S)
        return Completed(tuple(argv), int(resp["rc"]), resp.get("stdout", ""),
                         resp.get("stderr", ""), time.monotonic() - t0)

    def stat_open(self, interval_s: float) -> str | None:
        """The guest's /proc/stat now, read by the agent itself, and its sampling thread
        started (interval_s > 0); None from an agent without the op (an image built before
        it), which answers rc 2."""
        resp = self.request({"op": "stat_open", "interval": interval_s}, HOST_GRACE_S)
        return str(resp["stat"]) if resp.get("rc") == 0 and "stat" in resp else None

    def stat_close(self) -> tuple[str, str] | None:
        """(the sampling thread's marked readings, the guest's /proc/stat now); None where
        the agent cannot."""
        resp = self.request({"op": "stat_close"}, HOST_GRACE_S)
        if resp.get("rc") != 0 or "stat" not in resp:
            return None
        return str(resp.get("ticks", "")), str(resp["stat"])

    def shutdown(self) -> None:
        """Ask the guest to power off; the answer comes before the power goes."""
        self.request({"op": "shutdown"}, 5.0)

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.close()


@contextlib.contextmanager
def short_socket_path(path: str) -> Iterator[str]:
    """A name for bind()/connect() that fits sun_path (108 bytes) even when the workdir is
    deep: the directory is reached through /proc/self/fd of a descriptor held meanwhile."""
    if len(path.encode()) < 100:
        yield path
        return
    d = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{d}/{os.path.basename(path)}"
    finally:
        os.close(d)
