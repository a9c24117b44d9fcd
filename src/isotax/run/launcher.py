"""Fresh instances of one environment, for the workloads that measure starting (startup,
density): each is started from the plan's own definition of the environment, in its own
workdir, and whatever a workload leaves running is stopped by close()."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

from isotax.model import SanityError
from isotax.protocols import Burst, Environment, EnvSpec, Launched
from isotax.run.burst import LaunchBurst


class EnvLauncher:
    def __init__(self, env: Environment, spec: EnvSpec, deadline: float) -> None:
        self.env = env
        self.spec = spec  # the plan's environment; each launch gets its own workdir below it
        self.deadline = deadline  # time.monotonic() by which the cell must be done
        self._count = 0
        self._live: dict[int, tuple[Launched, Path]] = {}
        self._bursts: list[Burst] = []
        self._lock = threading.Lock()  # a burst launches from threads

    def launch(self) -> Launched:
        if time.monotonic() >= self.deadline:
            raise SanityError("the plan's timeout_s ran out before the next start")
        with self._lock:
            self._count += 1
            workdir = self.spec.workdir / f"launch-{self._count}"
        workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        spec = replace(self.spec, workdir=workdir, requested_at=t0)
        try:
            inst = self.env.start(spec)  # removes what it made before raising
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        launched = Launched(inst, t0)
        with self._lock:
            self._live[id(launched)] = (launched, workdir)
        return launched

    def burst(self) -> Burst:
        """The kind's own Burst where it has one (Environment.bursts), else one start() a
        thread (run.burst); closed with the rest by close()."""
        with self._lock:
            self._count += 1
            workdir = self.spec.workdir / f"burst-{self._count}"
        workdir.mkdir(parents=True, exist_ok=True)
        own = self.env.bursts(replace(self.spec, workdir=workdir))
        b: Burst = own if own is not None else LaunchBurst(self)
        self._bursts.append(b)
        return b

    def stop(self, launched: Launched) -> float:
        with self._lock:
            entry = self._live.pop(id(launched), None)
        t0 = time.monotonic()
        with contextlib.suppress(Exception):
            launched.instance.resume()  # a paused one must thaw to die
        launched.instance.stop()
        took = time.monotonic() - t0
        if entry is not None:
            shutil.rmtree(entry[1], ignore_errors=True)
        return took

    @property
    def live(self) -> int:
        return len(self._live)

    def close(self) -> None:
        """Stop every instance still running, newest first; never raises."""
        while self._bursts:
            with contextlib.suppress(Exception):
                self._bursts.pop().close()
        for launched, _ in reversed(list(self._live.values())):
            with contextlib.suppress(Exception):
                self.stop(launched)
