#!/usr/bin/env python3
"""itx-agent: runs the host's commands inside an isotax VM (PID 1, started by itx-init).

Protocol: one JSON object per line in each direction, over the virtio-serial port named
`org.isotax.agent` (or stdin/stdout with --stdio, which the unit tests use).

  request   {"id": 7, "op": "exec", "argv": ["xz", "-9"], "timeout": 60, "env": {...},
             "cwd": "/"}                                   (op defaults to "exec")
  response  {"id": 7, "rc": 0, "stdout": "...", "stderr": "...", "wall_ns": 123}
  request   {"id": 8, "op": "ping"}      -> {"id": 8, "rc": 0, "pid": 1, "uptime_ns": ...}
  request   {"id": 9, "op": "shutdown"}  -> {"id": 9, "rc": 0}, then power off (as PID 1)
  request   {"id": 10, "op": "stat_open", "interval": 0.5}
                                         -> {"id": 10, "rc": 0, "stat": "<the guest's /proc/stat>"}
  request   {"id": 11, "op": "stat_close"}
                                         -> {"id": 11, "rc": 0, "ticks": "...", "stat": "..."}

stat_open/stat_close watch a measured run without a command: the agent reads /proc/stat
itself (under TCG a fork and exec of `sh` and `cat` costs 0.1-0.3 s; a read costs
milliseconds) and, with an interval, a thread of its own appends a marked reading every
interval ("itx-tick <uptime s>" then /proc/stat, as isotax.telemetry.observe parses).
stat_close stops the thread and returns what it read; a second stat_open replaces the first.

Exit statuses match the host's run_host(): 124 on timeout (the whole process group is
killed), 127 when the program does not exist, 126 when it cannot be executed. Commands get
exactly the environment the request carries (the host sends GUEST_ENV), stdin /dev/null, and
their own session so that a timeout kills what they started too.

Standard library only (the image carries Debian's python3).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time

PORT_NAME = "org.isotax.agent"
READ_CHUNK = 1 << 16

def dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


loads = json.loads


# -- running commands ----------------------------------------------------------------------

def _kill_group(p: subprocess.Popen) -> None:
    with contextlib.suppress(OSError):
        os.killpg(p.pid, signal.SIGKILL)


def run(argv: list, timeout: float, env: dict | None, cwd: str) -> dict:
    """Run argv to completion or until timeout; return the response fields."""
    t0 = time.monotonic_ns()
    try:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, cwd=cwd,
                             start_new_session=True)
    except FileNotFoundError as e:
        return {"rc": 127, "stdout": "", "stderr": str(e), "wall_ns": time.monotonic_ns() - t0}
    except (PermissionError, OSError) as e:
        return {"rc": 126, "stdout": "", "stderr": str(e), "wall_ns": time.monotonic_ns() - t0}
    deadline = time.monotonic() + timeout
    assert p.stdout is not None and p.stderr is not None  # both are PIPEs
    out_fd, err_fd = p.stdout.fileno(), p.stderr.fileno()
    bufs: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    timed_out = False
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            if timed_out:
                break  # killed, and still no EOF after the grace period: stop reading
            timed_out = True
            _kill_group(p)
            deadline = time.monotonic() + 1.0  # drain what the killed processes wrote
            continue
        for key, _ in sel.select(left):
            try:
                chunk = os.read(key.fd, READ_CHUNK)
            except BlockingIOError:
                continue
            if chunk:
                bufs[key.fd].append(chunk)
            else:
                sel.unregister(key.fd)
    sel.close()
    # Both pipes are closed; the program itself may still run (it closed them early).
    if not timed_out:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        _kill_group(p)
    rc = p.wait()
    p.stdout.close()
    p.stderr.close()
    out = b"".join(bufs[out_fd]).decode("utf-8", "replace")
    err = b"".join(bufs[err_fd]).decode("utf-8", "replace")
    if timed_out:
        rc = 124
        err += f"timed out after {timeout:.0f} s"
    elif rc < 0:
        rc = 128 - rc  # killed by a signal: report it the way a shell does
    return {"rc": rc, "stdout": out, "stderr": err, "wall_ns": time.monotonic_ns() - t0}


# -- watching /proc/stat without a command --------------------------------------------------

def read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def marked_reading() -> str:
    """One reading as the sampling loop writes it: a mark with the guest's uptime, /proc/stat."""
    return f"itx-tick {read_text('/proc/uptime').split()[0]}\n{read_text('/proc/stat')}"


class StatSampler:
    """A reading now, then one every interval_s in a thread, until stop()."""

    def __init__(self, interval_s: float) -> None:
        self.readings: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(interval_s,), daemon=True)
        self._thread.start()

    def _loop(self, interval_s: float) -> None:
        while True:
            with contextlib.suppress(OSError):
                self.readings.append(marked_reading())
            if self._stop.wait(interval_s):
                return

    def stop(self) -> str:
        self._stop.set()
        self._thread.join()
        return "".join(self.readings)


_sampler: StatSampler | None = None


def stat_op(op: str, req: dict) -> dict:
    global _sampler
    old, _sampler = _sampler, None
    ticks = old.stop() if old is not None else ""
    if op == "stat_open":
        interval = float(req.get("interval", 0))
        if interval > 0:
            _sampler = StatSampler(interval)
        return {"rc": 0, "stat": read_text("/proc/stat")}
    return {"rc": 0, "ticks": ticks, "stat": read_text("/proc/stat")}


def reap_orphans() -> None:
    """As PID 1 the agent inherits every orphan; collect the dead ones between requests
    (never during one, where it would steal the exit status subprocess waits for)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def handle(req: dict) -> tuple[dict, bool]:
    """One request -> (response, whether to power off afterwards)."""
    rid = req.get("id")
    op = req.get("op", "exec")
    if op == "ping":
        return {"id": rid, "rc": 0, "pid": os.getpid(),
                "uptime_ns": time.clock_gettime_ns(time.CLOCK_BOOTTIME)}, False
    if op == "shutdown":
        return {"id": rid, "rc": 0}, True
    if op in ("stat_open", "stat_close"):
        try:
            return {"id": rid, **stat_op(op, req)}, False
        except (OSError, ValueError, TypeError) as e:
            return {"id": rid, "rc": 1, "stdout": "", "stderr": f"{op}: {e}",
                    "wall_ns": 0}, False
    if op != "exec":
        return {"id": rid, "rc": 2, "stdout": "", "stderr": f"unknown op {op!r}",
                "wall_ns": 0}, False
    argv = req.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return {"id": rid, "rc": 2, "stdout": "", "stderr": "argv must be a non-empty list "
                "of strings", "wall_ns": 0}, False
    env = req.get("env")
    resp = run(argv, float(req.get("timeout", 3600)), env if isinstance(env, dict) else None,
               str(req.get("cwd", "/")))
    resp["id"] = rid
    return resp, False


# -- transport -----------------------------------------------------------------------------

def find_port(wait_s: float = 30.0) -> str:
    """The /dev node of the virtio-serial port named PORT_NAME (no udev, so no
    /dev/virtio-ports/ symlinks: look the name up in sysfs)."""
    end = time.monotonic() + wait_s
    while True:
        base = "/sys/class/virtio-ports"
        for dev in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            try:
                with open(os.path.join(base, dev, "name")) as f:
                    if f.read().strip() == PORT_NAME:
                        return "/dev/" + dev
            except OSError:
                continue
        if time.monotonic() > end:
            raise SystemExit(f"itx-agent: no virtio-serial port named {PORT_NAME}")
        time.sleep(0.05)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def serve(rfd: int, wfd: int, eof_is_final: bool) -> None:
    buf = b""
    while True:
        chunk = os.read(rfd, READ_CHUNK)
        if not chunk:
            if eof_is_final:
                return
            # A virtio-serial port reads as EOF while the host end is not connected.
            time.sleep(0.05)
            continue
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            if not line.strip():
                continue
            try:
                req = loads(line.decode("utf-8", "replace"))
                if not isinstance(req, dict):
                    raise ValueError("a request must be a JSON object")
                resp, power_off = handle(req)
            except Exception as e:  # never let one bad request take PID 1 (and the VM) down
                resp, power_off = {"id": None, "rc": 2, "stdout": "",
                                   "stderr": f"bad request: {e}", "wall_ns": 0}, False
            write_all(wfd, (dumps(resp) + "\n").encode("utf-8", "replace"))
            if os.getpid() == 1:
                reap_orphans()
            if power_off:
                if os.getpid() == 1:
                    os.sync()
                    subprocess.call(["busybox", "poweroff", "-f"])
                return


def main(args: list) -> int:
    if args[:1] == ["--stdio"]:
        serve(sys.stdin.fileno(), sys.stdout.fileno(), eof_is_final=True)
        return 0
    port = args[0] if args else find_port()
    fd = os.open(port, os.O_RDWR)
    print(f"itx-agent: serving on {port} (pid {os.getpid()})", flush=True)
    serve(fd, fd, eof_is_final=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
