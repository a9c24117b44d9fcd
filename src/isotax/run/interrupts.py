"""Signals during a run: Ctrl-C and SIGTERM end it through its teardown, in the process that
started it only, and nothing interrupts the teardown itself."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator


@contextlib.contextmanager
def interrupts_for_this_process_only() -> Iterator[None]:
    """Ctrl-C and SIGTERM stop a run through its teardown, in this process only.

    Libraries fork helpers that run on in a copy of this process (pyroute2 forks to create a
    network namespace). Python's default SIGINT handler, or a SIGTERM turned into an
    exception, would make such a child unwind through the runner's teardown and remove the
    parent's namespaces, links and containers while the parent still uses them. A child just
    exits; the process that started the run raises KeyboardInterrupt.
    """
    owner = os.getpid()

    def handler(signum: int, frame: object) -> None:
        if os.getpid() != owner:
            os._exit(128 + signum)
        raise KeyboardInterrupt

    old_int = signal.signal(signal.SIGINT, handler)
    old_term = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


@contextlib.contextmanager
def no_interrupts() -> Iterator[None]:
    """Teardown must finish: a second Ctrl-C must not leave a VM or a netns behind."""
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)
