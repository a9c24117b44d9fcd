"""What the benchmark commands that start `isotax run` share: ending the child the way
Ctrl-C would, whatever ends the parent."""

from __future__ import annotations

import signal
import subprocess


def stop_child(child: subprocess.Popen[bytes]) -> None:
    """The parent is ending (Ctrl-C, SIGTERM, an error): a Ctrl-C at the terminal reaches the
    child too, a SIGTERM here does not, so the child gets SIGTERM unless it ends by itself
    within 10 s; its teardown (up to 300 s) is waited for, then it is killed."""
    for sig, grace in ((None, 10), (signal.SIGTERM, 300)):
        if sig is not None and child.poll() is None:
            child.send_signal(sig)
        try:
            child.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            pass
    if child.poll() is None:
        child.kill()
        child.wait()
