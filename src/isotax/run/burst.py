"""The launcher's own Burst (protocols.starts) for a kind that has none: each instance is one
start() of the environment, from a thread of its own at the rate asked (or one after another),
and its phases are the milestones that start() records (create, started, first_instruction,
ready: protocols.PHASES). Threads, not processes: a start waits on its runtime, so they overlap
as a burst of requests to the runtime would."""

from __future__ import annotations

import threading
import time

from isotax.model import SanityError
from isotax.protocols import Launched, Launcher, StartRecord


def record(launched: Launched, name: str, requested_at: float) -> StartRecord:
    """A started instance's record: its milestones, from its own request."""
    return StartRecord(name, {k: float(v) for k, v in launched.instance.milestones.items()},
                       requested_at)


class LaunchBurst:
    source = "the environment's own start(), one a thread: its runtime's milestones"

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.mine: list[Launched] = []
        self._count = 0

    @property
    def running(self) -> int:
        return len(self.mine)

    def _one(self, out: list[StartRecord | BaseException | None], i: int) -> None:
        requested = time.time()
        try:
            launched = self.launcher.launch()
        except BaseException as e:
            out[i] = e
            return
        self.mine.append(launched)
        out[i] = record(launched, f"start-{self._count + i + 1}", requested)

    def start(self, count: int, rate_per_s: float, timeout: float) -> list[StartRecord]:
        out: list[StartRecord | BaseException | None] = [None] * count  # None: not asked
        deadline = time.monotonic() + timeout
        if rate_per_s <= 0:
            for i in range(count):
                self._one(out, i)
                if isinstance(out[i], BaseException) or time.monotonic() > deadline:
                    break
        else:
            t0 = time.monotonic()
            threads = []
            for i in range(count):
                time.sleep(max(0.0, t0 + i / rate_per_s - time.monotonic()))
                t = threading.Thread(target=self._one, args=(out, i), daemon=True)
                t.start()
                threads.append(t)
            for t in threads:
                t.join()  # each start() has its runtime's own time limits
        self._count += count
        for i, got in enumerate(out):
            if isinstance(got, BaseException):
                raise SanityError(f"start {i + 1} of {count} failed: {got}") from got
        late = [r.name for r in out if isinstance(r, StartRecord)
                and r.phases.get("started", 0.0) > timeout]
        if late or None in out or time.monotonic() > deadline + 60:
            raise SanityError(f"{', '.join(late) or 'the burst'} did not start within "
                              f"{timeout:.0f} s")
        return [r for r in out if isinstance(r, StartRecord)]

    def close(self) -> None:
        while self.mine:
            self.launcher.stop(self.mine.pop())
