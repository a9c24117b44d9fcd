"""startup: how long an environment takes to start, in phases, over N fresh starts.

The studies' claim is "containers start in under a second, VMs in 11 s". Here every start is a
fresh instance of the plan's environment (from a Launcher: the same definition, network and
storage as the rest of the run), timed from the moment isotax asks for it:

  create             the runtime is asked (before it: isotax's own preparation);
  started            the runtime says the container's process or the VM runs;
  first_instruction  isotax's guest helper printed its ITX-READY marker;
  ready              the workload is ready, by the plan's `ready` probe:
                       instance - the environment takes commands (its own "ready");
                       exec     - a first command through the environment's exec path returns;
                       redis    - a redis-server started in it answers PING from the load
                                  generator (the issue's example of a workload's readiness).

Natively a start is a process: the holding helper that plays a container's PID 1, so the
baseline has the same four phases. Each cell reports per phase the median and the p95 over its
starts (the 95th percentile, linear interpolation; with few starts it is near the maximum), and
the time a stop takes. The redis probe is a shell loop in the load generator, PING every 5 ms:
its resolution (a redis-cli start, ~2 ms) is the same for every environment.
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from isotax.model import Sample, SanityError
from isotax.protocols import (
    PHASES,
    FigureHints,
    Instance,
    Launched,
    Launcher,
    LoadGen,
    Params,
    ParamSpec,
    Port,
)
from isotax.workloads import redis
from isotax.workloads.base import SERVER_SECRET, BaseWorkload, register, require_runnable
from isotax.workloads.servers import stop_server

READY_PROBES = ("instance", "exec", "redis")
REDIS_PORT = redis.REDIS_PORT  # the redis probe's server is the redis workload's
PING_LOOP = ('end=$(( $(date +%s) + $3 )); '
             'until REDISCLI_AUTH="$4" redis-cli -h "$1" -p "$2" PING 2>/dev/null | '
             'grep -q PONG; do '
             '  [ "$(date +%s)" -le "$end" ] || { echo "no PONG after $3 s" >&2; exit 1; }; '
             '  sleep 0.005; '
             'done')


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q))


def _spawn(inst: Instance, argv: Sequence[str]) -> int:
    """Start argv in the background inside inst; its PID there."""
    done = inst.exec(["sh", "-c", f"{shlex.join(argv)} >/dev/null 2>&1 </dev/null & echo $!"],
                     60)
    try:
        return int(done.check().stdout.split()[-1])
    except (ValueError, IndexError) as e:
        raise SanityError(f"could not start {argv[0]}: {done.stdout!r} {done.stderr!r}") from e


def _redis_ready(launched: Launched, lg: LoadGen, timeout: float) -> float:
    """Seconds from the request to PONG; the server is stopped before returning."""
    inst = launched.instance
    host, port = lg.target(inst, REDIS_PORT, "tcp")
    pid = _spawn(inst, redis.server_argv(lg.listen(inst)))
    try:
        done = lg.exec(["sh", "-c", PING_LOOP, "sh", host, str(port), str(int(timeout)),
                        SERVER_SECRET], timeout + 10)
        ready = launched.since()
        if done.returncode != 0:
            raise SanityError(f"redis-server in the new instance never answered PING: "
                              f"{(done.stderr or done.stdout).strip()[:200]}")
    finally:
        stop_server(inst, pid, "redis-server")
    return ready


def _phases(launched: Launched, probe: str, lg: LoadGen | None, timeout: float,
            ) -> dict[str, float]:
    m = launched.instance.milestones
    missing = [p for p in PHASES if p not in m]
    if missing:
        raise SanityError(f"the environment recorded no {', '.join(missing)} milestone")
    out = {k: float(v) for k, v in m.items()}
    out["instance_ready"] = out["ready"]
    if probe == "exec":
        launched.instance.exec(["true"], timeout).check()
        out["ready"] = launched.since()
    elif probe == "redis":
        assert lg is not None
        out["ready"] = _redis_ready(launched, lg, timeout)
    order = [out[p] for p in ("create", "started", "ready")]
    if not all(a <= b for a, b in itertools.pairwise(order)) \
            or not 0 <= out["first_instruction"] <= out["ready"]:
        raise SanityError("phases out of order: " + ", ".join(f"{p} {out[p]:.3f} s"
                                                              for p in PHASES))
    return out


@register
class Startup(BaseWorkload):
    name: ClassVar[str] = "startup"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ("N fresh starts of the environment: create, started, first "
                                  "instruction, ready (median and p95, ms), and stop time")
    params: ClassVar[Sequence[ParamSpec]] = (
        ParamSpec("starts", int, 5, "fresh starts per cell", minimum=1),
        ParamSpec("ready", str, "redis", "what ready means: instance, exec or redis (a "
                  "redis-server in it answers PING from the load generator)",
                  choices=READY_PROBES),
        ParamSpec("ready_timeout_s", float, 120.0, "longest wait for ready per start",
                  minimum=1),
    )
    tools: ClassVar[Mapping[str, Sequence[str]]] = {"redis-server": ("redis-server", "--version")}
    needs_loadgen: ClassVar[bool] = True
    client_packages: ClassVar[Sequence[str]] = ("redis-tools",)
    ports: ClassVar[Mapping[str, Port]] = {"redis": redis.PORT}  # the redis probe's
    packages: ClassVar[Sequence[str]] = ("redis-server",)
    # Each start's phases: the milestones, and the time the stop took.
    figures: ClassVar[FigureHints] = FigureHints(phases=(*PHASES, "stop"))
    # What a user asks of a start is how long until it serves, not its first phase (the
    # runtime's create, 0.1 ms natively, is hundreds of times longer in any container).
    headline: ClassVar[str] = "ready_ms"

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str]:
        """Fresh starts (each one also stopped)."""
        return float(params["starts"]), "start"

    def needs_network(self, params: Params) -> bool:
        """Only the redis probe reaches the instance over the network."""
        return params["ready"] == "redis"

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        if params["ready"] == "redis":
            require_runnable(inst, ["redis-server", "--version"])

    def launch_and_measure(self, launcher: Launcher, params: Params,
                           loadgen: LoadGen | None) -> list[Sample]:
        probe, n = str(params["ready"]), int(params["starts"])
        timeout = float(params["ready_timeout_s"])
        if probe == "redis" and loadgen is None:
            raise SanityError("the redis probe needs the load generator (the runner makes it)")
        runs: list[dict[str, float]] = []
        for _ in range(n):
            launched = launcher.launch()
            try:
                phases = _phases(launched, probe, loadgen, timeout)
            finally:
                took = launcher.stop(launched)
            phases["stop"] = took
            runs.append(phases)
        return self._samples(runs, probe)

    @staticmethod
    def _samples(runs: Sequence[Mapping[str, float]], probe: str) -> list[Sample]:
        names = [k for k in runs[0] if all(k in r for r in runs)]
        ms = {k: [r[k] * 1000 for r in runs] for k in names}
        labels = {"starts": len(runs), "ready_probe": probe,
                  "per_start_ms": {k: [round(v, 3) for v in vs] for k, vs in ms.items()},
                  "median_ms": {k: round(percentile(vs, 50), 3) for k, vs in ms.items()}}
        out = []
        for phase in (*PHASES, "stop"):
            out.append(Sample(f"{phase}_ms", percentile(ms[phase], 50), "ms", False,
                              {**labels, "statistic": "median over the cell's starts"}))
            out.append(Sample(f"{phase}_p95_ms", percentile(ms[phase], 95), "ms", False,
                              {**labels, "statistic": "p95 over the cell's starts"}))
        return out
