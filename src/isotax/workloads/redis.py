"""redis: a key-value server in the environment, GET and SET from the load generator.

The studies' (IBM) Redis test: 50% GET / 50% SET, small keys, ~50-byte values, 10 requests
in flight per connection, throughput and latency swept over connection counts. Here:

- the server: a fresh redis-server per run inside the environment (no persistence:
  `--save '' --appendonly no`), listening on REDIS_PORT only at the address its load
  generator reaches (LoadGen.listen), with the run's password (base.SERVER_SECRET) and
  protected mode on. A fresh process, not
  FLUSHALL, makes the dataset fresh: nothing a previous run allocated (jemalloc arenas,
  rehashed dicts) carries over, and a server that died in the last run cannot leak into this
  one. It starts in well under a second, even in the emulated VM.
- the client: redis-benchmark in the load generator, `-t set,get`: SET then GET, each
  `requests` requests, over `connections` connections with `-P pipeline` (10 in flight per
  connection), `-d value_bytes` values, `-r keyspace` random keys. The keys are
  redis-benchmark's own `key:` + 12 digits (16 characters): __rand_int__ always expands to 12
  digits, so 10-character keys are not possible without dropping the built-in SET/GET tests
  (6 bytes more per request, next to ~90 bytes of RESP framing and value).
- the numbers: per test (set, get) its requests/s and mean, p50, p99 latency in ms (the
  tool's histogram, µs resolution), and their 50/50 combination: both tests run the same
  number of requests back to back, so the mix's rate is total requests over total time, the
  harmonic mean of the two rates.

With keepalive = false every request opens its own connection (redis-benchmark -k 0): the
rate then includes a TCP handshake and close per request, what a Service (kube-proxy's DNAT
and its conntrack entry per connection) costs. Behind a Service with several endpoints each
connection lands on any of them, so a server runs in each (workloads.servers.
serving_everywhere) and the keys each holds afterwards are reported.

Sanity: a server that does not answer PING before or after, a client error or timeout, a
test with no rate, or an empty dataset afterwards fails the point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from isotax.model import Sample, SanityError
from isotax.parsers.redis_benchmark import RedisTest, parse_redis_benchmark, parse_redis_version
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
    SERVER_SECRET,
    BaseWorkload,
    client_result,
    client_tool_version,
    need_loadgen,
    register,
    require_runnable,
)
from isotax.workloads.servers import serving_everywhere

# An unusual port (the Debian service uses 6379), in the range of isotax's other servers.
PORT = Port(46379, server="redis-server")
REDIS_PORT = PORT.number
KEY_BYTES = len("key:") + 12  # redis-benchmark's key:__rand_int__
# redis-server's default maxclients (isotax does not raise it): a connection more is refused
# ("max number of clients reached"). It also keeps 32 descriptors for itself beyond them.
MAXCLIENTS = 10000
RESERVED_FDS = 32
# keepalive = false: each request's connection holds a local port in TIME_WAIT for 60 s, of
# Linux's 28,232 by default; SET and GET each run `requests` of them.
CRR_REQUESTS = 10000


def server_argv(listen: str) -> list[str]:
    """redis-server on REDIS_PORT at `listen` only, with the run's password. Pure."""
    return ["redis-server", "--port", str(REDIS_PORT), "--bind", listen,
            "--protected-mode", "yes", "--requirepass", SERVER_SECRET, "--save", "",
            "--appendonly", "no", "--dir", "/tmp", "--logfile", ""]


def cli_argv(host: str, port: int, *command: str) -> list[str]:
    """redis-cli with the run's password (from the environment, not the command line)."""
    return ["env", f"REDISCLI_AUTH={SERVER_SECRET}", "redis-cli", "-h", host, "-p",
            str(port), *command]


def _ping(lg: LoadGen, host: str, port: int, when: str) -> None:
    done = lg.exec(cli_argv(host, port, "PING"), 30)
    if done.returncode != 0 or done.stdout.strip() != "PONG":
        raise SanityError(f"redis-server does not answer PING {when}: "
                          f"{(done.stdout + done.stderr).strip()[:200]}")


def _keys(lg: LoadGen, servers: Sequence[Instance], host: str, port: int) -> list[int]:
    """The keys each server holds after the run: the one server's through the load
    generator's path (it still answers there); several endpoints' each from inside its own
    (the Service would answer from any one of them). A server that does not say fails the
    point, in its own words."""
    if len(servers) == 1:
        done = [lg.exec(cli_argv(host, port, "DBSIZE"), 30)]
    else:
        done = [one.exec(cli_argv(lg.listen(one), REDIS_PORT, "DBSIZE"), 30) for one in servers]
    out = []
    for d in done:
        try:
            out.append(int(d.stdout.strip()))
        except ValueError:
            raise SanityError(f"after SET redis-server does not say how many keys it holds: "
                              f"{(d.stdout + d.stderr).strip()[:200] or '?'}") from None
    return out


@register
class Redis(BaseWorkload):
    name: ClassVar[str] = "redis"
    version: ClassVar[str] = "2"
    description: ClassVar[str] = ("redis-server in the environment, redis-benchmark SET and GET "
                                  "from the load generator, pipelined; requests/s and ms")
    params: ClassVar[Sequence[ParamSpec]] = (
        ParamSpec("connections", int, 10, "client connections (redis-benchmark -c); sweep it; "
                  f"at most redis-server's maxclients, {MAXCLIENTS}", minimum=1,
                  maximum=MAXCLIENTS),
        ParamSpec("requests", int, 100000, "requests per test (SET, then GET)", minimum=1000),
        ParamSpec("pipeline", int, 10, "requests in flight per connection (-P)", minimum=1),
        ParamSpec("value_bytes", int, 50, "value size of SET (-d)", minimum=1),
        ParamSpec("keyspace", int, 100000, "distinct random keys (-r)", minimum=1),
        ParamSpec("keepalive", bool, True, "false: a new connection for every request "
                  "(redis-benchmark -k 0), what a Service's per-connection cost shows in; "
                  f"each then holds a local port for 60 s: at most {CRR_REQUESTS} requests"),
    )
    tools: ClassVar[Mapping[str, Sequence[str]]] = {
        "redis-server": ("redis-server", "--version"),
        "redis-benchmark": ("redis-benchmark", "--version"),
    }
    needs_loadgen: ClassVar[bool] = True
    client_packages: ClassVar[Sequence[str]] = ("redis-tools",)
    ports: ClassVar[Mapping[str, Port]] = {"redis": PORT}
    packages: ClassVar[Sequence[str]] = ("redis-server", "redis-tools")
    # Every connection stands alone (SET and GET of random keys on whichever server it
    # reaches): behind a Service with several endpoints, each runs a server.
    spreads_over_endpoints: ClassVar[bool] = True
    figures: ClassVar[FigureHints] = FigureHints(concurrency=("connections",), latency_panels=(
        LatencyPanel("SET", "set_requests_per_s", ("set_latency_p50_ms", "set_latency_p99_ms")),
        LatencyPanel("GET", "get_requests_per_s", ("get_latency_p50_ms", "get_latency_p99_ms")),
    ))

    def in_flight(self, params: Params) -> int:
        return int(params["connections"]) * int(params["pipeline"])

    def host_needs(self, params: Params) -> Needs:
        """A descriptor per connection in redis-benchmark and in redis-server (which keeps 32
        more for itself); the keys SET, each its key and value at least, in the server."""
        keys = min(int(params["requests"]), int(params["keyspace"]))
        return Needs(
            memory=Need(keys * (KEY_BYTES + int(params["value_bytes"])),
                        ("requests", "keyspace", "value_bytes"), "the keys SET, in redis-server"),
            open_files=Need(int(params["connections"]) + RESERVED_FDS, ("connections",),
                            "a socket per connection, and redis-server's 32 of its own"))

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str]:
        """redis-benchmark's requests: `requests` SETs, then as many GETs."""
        return 2.0 * params["requests"], "request"

    def not_applicable(self, inst: Instance, params: Params) -> str | None:
        if not params["keepalive"] and int(params["requests"]) > CRR_REQUESTS:
            return (f"keepalive = false with requests = {params['requests']}: every request "
                    "a new connection, each holding a local port for 60 s after it closes "
                    f"(TIME_WAIT), so SET and GET would run out of ports; give requests <= "
                    f"{CRR_REQUESTS}")
        return None

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        need_loadgen(loadgen)
        require_runnable(inst, ["redis-server", "--version"])

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        lg = need_loadgen(loadgen)
        conns, requests = int(params["connections"]), int(params["requests"])
        pipeline, value = int(params["pipeline"]), int(params["value_bytes"])
        keyspace, keepalive = int(params["keyspace"]), bool(params["keepalive"])
        host, port = lg.target(inst, REDIS_PORT, "tcp")
        client = ["redis-benchmark", "-h", host, "-p", str(port), "-a", SERVER_SECRET,
                  "-t", "set,get", "-k", "1" if keepalive else "0",
                  "-n", str(requests), "-c", str(conns), "-P", str(pipeline),
                  "-d", str(value), "-r", str(keyspace), "--csv"]
        # redis-benchmark hangs (it does not exit) when it cannot connect: the timeout is
        # the backstop, generous enough for the emulated VM (~1k requests/s at worst).
        timeout = 60 + 2 * requests / 1000
        # Behind a Service with several endpoints a server runs in each (every connection
        # lands where the Service sends it); else in the instance alone.
        with serving_everywhere(inst, lambda one: server_argv(lg.listen(one)), REDIS_PORT,
                                "tcp", program="redis-server") as servers:
            _ping(lg, host, port, "before the run")
            done = lg.exec(client, timeout)
            tests = client_result(done, "redis-benchmark", timeout, parse_redis_benchmark)
            _ping(lg, host, port, "after the run (did it die?)")
            keys = _keys(lg, servers, host, port)
        missing = {"SET", "GET"} - tests.keys()
        if missing:
            raise SanityError(f"redis-benchmark gave no {' or '.join(sorted(missing))} result")
        if sum(keys) <= 0:
            raise SanityError(f"after SET the server{'s hold' if len(keys) > 1 else ' holds'} "
                              f"{sum(keys)} keys")
        version = client_tool_version(lg, ("redis-benchmark", "--version"), parse_redis_version)
        labels = {"tool": f"redis-benchmark {version} (client: {lg.where})",
                  "path": lg.path(inst), "connections": conns, "pipeline": pipeline,
                  "in_flight": conns * pipeline, "value_bytes": value, "key_bytes": KEY_BYTES,
                  "keyspace": keyspace, "requests_per_test": requests, "keys_after": sum(keys),
                  "keepalive": keepalive,
                  **({"keys_by_endpoint": keys} if len(servers) > 1 else {})}
        samples: list[Sample] = []
        for t in (tests["SET"], tests["GET"]):
            samples += self._samples(t, labels)
        s, g = tests["SET"].rps, tests["GET"].rps
        samples.append(Sample("requests_per_s", 2 / (1 / s + 1 / g), "req/s", True,
                              {**labels, "mix": "50% SET / 50% GET, run back to back: total "
                               "requests over total time"}))
        return samples

    @staticmethod
    def _samples(t: RedisTest, labels: Mapping[str, object]) -> list[Sample]:
        op = t.test.lower()
        own = {**labels, "test": t.test, "min_ms": t.min_ms, "p95_ms": t.p95_ms,
               "max_ms": t.max_ms}
        return [
            Sample(f"{op}_requests_per_s", t.rps, "req/s", True, own),
            Sample(f"{op}_latency_mean_ms", t.avg_ms, "ms", False, own),
            Sample(f"{op}_latency_p50_ms", t.p50_ms, "ms", False, own),
            Sample(f"{op}_latency_p99_ms", t.p99_ms, "ms", False, own),
        ]
