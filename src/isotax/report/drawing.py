"""Drawing a report's figures in several processes at once.

Drawing is most of a report's time (matplotlib lays out and renders every figure twice for a
tight bounding box), it is CPU-bound and single-threaded, and the report is written after the
run, when nothing is measured any more: the CPUs are free. `drawn_in_parallel(render)` forks
workers that run the same `render()` on the same data (the fork shares it, nothing is
pickled): the figures meet in the same order in every process, each process draws only its
share (figure n goes to process n % workers) and leaves a token in place of the others; the
workers send their SVG back through a pipe and the parent puts them in its tokens' places.
The result is the text a serial render() gives, byte for byte (every figure is drawn by the
same code from the same data; SVG ids come from the content and a fixed salt). Where anything
goes wrong (no fork, a worker that fails or takes too long) the whole render runs again
serially.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from collections.abc import Callable

WORKER_WAIT_S = 300.0  # a worker that has not answered by then is killed; render() runs serially
MAX_WORKERS = 4

_share: tuple[int, int] | None = None  # (this process's share, workers) while split
_seen = 0  # figures met so far in this render
_drawn: dict[int, str] = {}  # a worker's share, sent to the parent


def _token(n: int) -> str:
    return f"<!--itx-figure-{n}-->"


def claim() -> tuple[int, bool]:
    """The next figure's number, and whether this process draws it."""
    global _seen
    n = _seen
    _seen += 1
    return n, _share is None or n % _share[1] == _share[0]


def placeholder(n: int) -> str:
    """What a figure this process does not draw leaves in the text."""
    return _token(n)


def drawn(n: int, svg: str) -> str:
    """A figure this process drew: kept for the parent when it is a worker."""
    if _share is not None and _share[0] != 0:
        _drawn[n] = svg
    return svg


def _start(share: tuple[int, int] | None) -> None:
    global _share, _seen
    _share, _seen = share, 0
    _drawn.clear()


def drawn_in_parallel(render: Callable[[], str], workers: int | None = None) -> str:
    """render(), its figures drawn by `workers` processes (default: the CPUs, at most
    MAX_WORKERS); see the module docstring."""
    n = workers or min(os.cpu_count() or 1, MAX_WORKERS)
    if n < 2 or not hasattr(os, "fork"):
        _start(None)
        return render()
    children: list[tuple[int, int]] = []  # (pid, read end)
    reaped: set[int] = set()
    try:
        for share in range(1, n):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # a worker: its share of the figures, then gone without cleanup
                os.close(r)
                code = 1
                try:
                    _start((share, n))
                    render()
                    data = json.dumps(_drawn).encode()
                    view = memoryview(data)
                    while view:
                        view = view[os.write(w, view):]
                    code = 0
                finally:
                    os._exit(code)
            os.close(w)
            children.append((pid, r))
        _start((0, n))
        text = render()
        figures: dict[str, str] = {}
        deadline = time.monotonic() + WORKER_WAIT_S
        for pid, r in children:
            got = _read_all(r, deadline)
            if got is None:
                raise RuntimeError("a figure worker took too long")
            _, status = os.waitpid(pid, 0)
            reaped.add(pid)
            if status != 0:
                raise RuntimeError("a figure worker failed")
            figures.update(json.loads(got))
        for k, svg in figures.items():
            text = text.replace(_token(int(k)), svg, 1)
        if "<!--itx-figure-" in text:
            raise RuntimeError("a figure is missing")
        return text
    except (OSError, RuntimeError, ValueError):
        _end(children, reaped)
        _start(None)
        return render()
    finally:
        _end(children, reaped)
        _start(None)


def _end(children: list[tuple[int, int]], reaped: set[int]) -> None:
    """Close the pipes; kill and reap every worker not reaped yet (idempotent)."""
    for pid, r in children:
        with contextlib.suppress(OSError):
            os.close(r)
        if pid not in reaped:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
            reaped.add(pid)


def _read_all(fd: int, deadline: float) -> bytes | None:
    """Everything a worker writes until it closes its end; None past the deadline."""
    parts: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
