"""memcached: a key-value cache in the environment, GET and SET from the load generator.

The key-value tier of the studies' web stacks, and docs/extending.md's example of a workload
added as one module and its parser (isotax.parsers.memaslap). Here:

- the server: a fresh memcached per run inside the environment (`-m memory_mib` of item
  memory, `-t server_threads` worker threads, UDP off), listening on PORT only at the address
  its load generator reaches (LoadGen.listen). A fresh process makes the cache fresh: nothing
  a previous run stored or allocated carries over. memcached runs as `nobody` where it is
  started as root (it refuses to run as root otherwise).
- the client: memaslap (Debian ships it as `memcaslap`, in libmemcached-tools) in the load
  generator, for `duration_s` seconds: `connections` concurrent connections (-c), each with
  one request in flight, on one thread (-T 1: one core drives ~80k requests/s here, more than
  a 2-core host's server answers), its default mix of 90% GET and
  10% SET on 64-byte keys, with `value_bytes` values (-X). It SETs each key before it GETs it,
  so a GET miss means the server lost an item (evicted: memory_mib too small).
- the numbers: operations per second over the measured time (memaslap's TPS), and the mean
  and geometric-mean latency in µs of GET, SET and both (memaslap's own clock per request;
  its mean is printed in whole µs). Its histogram has power-of-two buckets, so the p99 is
  only known to a factor of 2: its bucket's upper bound is a label, never a metric.

Sanity: a server that does not answer before or after, a client error or timeout, no result,
or no item stored afterwards fails the point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from isotax.model import Sample, SanityError
from isotax.parsers.memaslap import LatencyBlock, parse_memaslap
from isotax.protocols import (
    FigureHints,
    Instance,
    LatencyPanel,
    LoadGen,
    Need,
    Needs,
    Params,
    ParamSpec,
    Port,
)
from isotax.workloads.base import (
    BaseWorkload,
    client_result,
    client_tool_version,
    need_loadgen,
    register,
    require_runnable,
)
from isotax.workloads.servers import serving

# An unusual port (the Debian service uses 11211), in the range of isotax's other servers.
PORT = Port(41211, server="memcached")
# memcached's default connection limit (-c), which isotax keeps; it holds a few for itself.
MAX_CONNECTIONS = 1024
RESERVED_FDS = 10
KEY_BYTES = 64  # memaslap's default key size


def server_argv(listen: str, memory_mib: int, threads: int) -> list[str]:
    """memcached on PORT at `listen` only, TCP alone. Pure."""
    return ["memcached", "-l", listen, "-p", str(PORT.number), "-U", "0",
            "-m", str(memory_mib), "-t", str(threads), "-c", str(MAX_CONNECTIONS),
            "-u", "nobody"]


def client_argv(host: str, port: int, params: Params) -> list[str]:
    """memaslap for duration_s, with one statistics period as long as the run (its latency
    blocks are printed only with --stat_freq). Pure."""
    duration = f"{int(params['duration_s'])}s"
    return ["memcaslap", f"--servers={host}:{port}", "--threads=1",
            f"--concurrency={int(params['connections'])}", f"--time={duration}",
            f"--stat_freq={duration}", f"--fixed_size={int(params['value_bytes'])}"]


def _tools_version(text: str) -> str:
    if not text.strip():
        raise ValueError("libmemcached-tools is not installed")
    return text.strip()


def _items(lg: LoadGen, host: str, port: int, when: str) -> int:
    """The server's curr_items, as memcstat reads them; SanityError when it does not answer."""
    done = lg.exec(["memcstat", f"--servers={host}:{port}"], 30)
    for line in done.stdout.splitlines():
        key, _, value = line.strip().partition(":")
        if key == "curr_items":
            return int(value)
    raise SanityError(f"memcached does not answer {when}: "
                      f"{(done.stdout + done.stderr).strip()[:200]}")


@register
class Memcached(BaseWorkload):
    name: ClassVar[str] = "memcached"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ("memcached in the environment, memaslap GET/SET (90/10) from "
                                  "the load generator; requests/s and µs")
    params: ClassVar[Sequence[ParamSpec]] = (
        ParamSpec("connections", int, 16, "concurrent connections (memaslap -c), one request "
                  "in flight each; sweep it", minimum=1,
                  maximum=MAX_CONNECTIONS - RESERVED_FDS),
        ParamSpec("duration_s", int, 5, "seconds memaslap runs (-t)", minimum=1),
        ParamSpec("value_bytes", int, 1024, "value size of SET (-X)", minimum=1,
                  maximum=1024 * 1024),
        ParamSpec("memory_mib", int, 64, "memcached's item memory (-m)", minimum=8),
        ParamSpec("server_threads", int, 1, "memcached's worker threads (-t)", minimum=1),
    )
    tools: ClassVar[Mapping[str, Sequence[str]]] = {
        "memcached": ("memcached", "-V"),
        "memaslap": ("dpkg-query", "-W", "-f=libmemcached-tools ${Version}",
                     "libmemcached-tools"),
    }
    needs_loadgen: ClassVar[bool] = True
    client_packages: ClassVar[Sequence[str]] = ("libmemcached-tools",)
    ports: ClassVar[Mapping[str, Port]] = {"memcached": PORT}
    packages: ClassVar[Sequence[str]] = ("memcached", "libmemcached-tools")
    figures: ClassVar[FigureHints] = FigureHints(concurrency=("connections",), latency_panels=(
        LatencyPanel("GET and SET", "requests_per_s", ("latency_geo_us", "latency_mean_us")),))

    def in_flight(self, params: Params) -> int:
        return int(params["connections"])

    def host_needs(self, params: Params) -> Needs:
        """The item memory memcached may fill; a descriptor per connection in memaslap and in
        memcached (which keeps a few for itself)."""
        return Needs(
            memory=Need(int(params["memory_mib"]) << 20, ("memory_mib",),
                        "memcached's item memory"),
            open_files=Need(int(params["connections"]) + RESERVED_FDS, ("connections",),
                            "a socket per connection, and memcached's own"))

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str] | None:
        """memaslap's operations (GET and SET)."""
        ops = next((s.labels.get("ops") for s in samples if s.metric == "requests_per_s"), None)
        return (float(ops), "request") if isinstance(ops, int | float) else None

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        need_loadgen(loadgen)
        require_runnable(inst, ["memcached", "-V"])

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        lg = need_loadgen(loadgen)
        host, port = lg.target(inst, PORT.number, "tcp")
        server = server_argv(lg.listen(inst), int(params["memory_mib"]),
                             int(params["server_threads"]))
        # memaslap can hang when its server goes away mid-run: the timeout is the backstop.
        timeout = 60 + 2 * int(params["duration_s"])
        with serving(inst, server, PORT.number, "tcp", program="memcached"):
            _items(lg, host, port, "before the run")
            done = lg.exec(client_argv(host, port, params), timeout)
            result = client_result(done, "memaslap", timeout, parse_memaslap)
            items = _items(lg, host, port, "after the run (did it die?)")
        if items <= 0:
            raise SanityError(f"after memaslap's SETs memcached holds {items} items")
        if result.get_misses:
            raise SanityError(f"{result.get_misses} GETs of {result.cmd_get} missed keys "
                              "memaslap had SET: memcached evicted them; raise memory_mib")
        tools = client_tool_version(lg, ("dpkg-query", "-W", "-f=${Version}",
                                         "libmemcached-tools"), _tools_version)
        labels = {"tool": f"memaslap (libmemcached-tools {tools}; client: {lg.where})",
                  "path": lg.path(inst), "connections": int(params["connections"]),
                  "in_flight": int(params["connections"]), "ops": result.ops,
                  "cmd_get": result.cmd_get, "cmd_set": result.cmd_set,
                  "value_bytes": int(params["value_bytes"]), "key_bytes": KEY_BYTES,
                  "items_after": items, "run_time_s": result.run_time_s,
                  "net_mib_per_s": result.net_mib_s}
        total = result.latency["Total"]
        samples = [Sample("requests_per_s", result.tps, "req/s", True,
                          {**labels, "mix": "memaslap's 90% GET / 10% SET"}),
                   *self._latency("", total, labels)]
        for op in ("Get", "Set"):
            if op in result.latency:
                samples += self._latency(f"{op.lower()}_", result.latency[op], labels)
        return samples

    @staticmethod
    def _latency(prefix: str, b: LatencyBlock, labels: Mapping[str, object]) -> list[Sample]:
        own = {**labels, "op": b.op, "events": b.events, "min_us": b.min_us, "max_us": b.max_us,
               "std_us": b.std_us, "p99_at_most_us": b.percentile_bound_us(0.99)}
        return [Sample(f"{prefix}latency_mean_us", b.avg_us, "us", False, own),
                Sample(f"{prefix}latency_geo_us", b.geo_us, "us", False, own)]

