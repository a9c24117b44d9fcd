"""rr: request/response latency, one transaction in flight (netperf TCP_RR / UDP_RR / TCP_CRR).

The semantics are netperf's: the load generator sends a 100-byte request, the server in the
environment answers with 200 bytes, the next request leaves when the answer is in; TCP on one
connection, or UDP, or (proto = "tcp_crr") TCP with a new connection for every transaction:
connect, request, response, close, so what a path costs per connection (a NAT's conntrack
entry, a Service's DNAT) shows, as k8s-netperf measures it. netperf (Debian non-free, the
same package in the image and on the host) gives transactions/s, the mean and p50/p90/p99
latency (its `-j` statistics, whole µs).

netperf has no p99.9. sockperf's ping-pong has the same one-in-flight semantics and prints
p99.9 of every round trip (--full-rtt), but its answer is as long as its request: it runs
right after netperf, for as long, with 200 bytes each way (the larger of netperf's two sizes,
so its tail is not flattered), and gives the p99.9 sample; its own mean/p50/p99 ride along in
that sample's labels as a cross-check, with the CDF of every round trip of the run
(`rtt_cdf_us`, from its --full-log, thinned by parsers.distributions) for the report's latency
CDF. Each sample names its tool, version and sizes. Where sockperf cannot run (gVisor's TCP:
its server is refused there), netperf's metrics are measured all the same and the p99.9 alone
is n/a, with the reason (the samples' model.NOT_MEASURED label), so gVisor's request/response
latency, one of the studies' headline contrasts, is measured by default.

Where client and server run matters more than any layer on a shared 2-CPU host (see
workloads.servers.PLACEMENTS): the default `same-cpu` measures the path without a cross-CPU wake-up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import ClassVar

from isotax.model import NOT_MEASURED, Sample, SanityError
from isotax.parsers import distributions
from isotax.parsers.netperf import SELECTORS, parse_netperf_rr, parse_netperf_version
from isotax.parsers.sockperf import parse_sockperf_full_log, parse_sockperf_pingpong
from isotax.protocols import (
    FigureHints,
    Instance,
    LoadGen,
    Params,
    ParamSpec,
    Port,
    SocketStack,
)
from isotax.workloads.base import (
    SERVER_SECRET,
    BaseWorkload,
    client_result,
    client_tool_version,
    need_loadgen,
    register,
)
from isotax.workloads.servers import PLACEMENTS, pinning, serving
from isotax.workloads.work import first

SOCKPERF_BYTES = 200
# sockperf's TCP server needs what only Linux's own stack does (Instance.socket_stack).
SOCKPERF_TCP_REASON = (
    "sockperf's TCP server does not run in gVisor (hostinet refuses its recvfrom(MSG_NOSIGNAL) "
    "with EINVAL; the netstack refuses its sendto on a connected socket with EAFNOSUPPORT; "
    "Linux ignores both): netperf's TCP_RR is measured there all the same, and only the "
    "p99.9 is n/a; proto = \"udp\" measures sockperf's tail there")
# TCP_CRR opens and closes a connection per transaction: what a NAT or a Service costs per
# connection shows there (conntrack entries, DNAT lookups) and not in TCP_RR's one long
# connection. sockperf has no such test.
SOCKPERF_CRR_REASON = ("sockperf has no connection-per-transaction test: TCP_CRR's p99.9 is "
                       "not measured (netperf's p99 is)")
# One transaction in flight: the round trips fill the run (0.999 measured on loopback). Below
# this share the run stood still somewhere (a UDP_RR datagram lost: tests/data/netperf).
BUSY_SHARE_MIN = 0.9
LOST_DATAGRAM_RUNS = 3
NETPERF_TESTS = {"tcp": "TCP_RR", "udp": "UDP_RR", "tcp_crr": "TCP_CRR"}


@register
class RequestResponse(BaseWorkload):
    name: ClassVar[str] = "rr"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ("request/response latency, 100-byte request, 200-byte "
                                  "response, one in flight (netperf TCP_RR/UDP_RR + sockperf "
                                  "p99.9); transactions/s and µs")
    params: ClassVar[Sequence[ParamSpec]] = (
        ParamSpec("proto", str, "tcp", "tcp (TCP_RR), udp (UDP_RR), or tcp_crr (TCP_CRR: a "
                  "new connection per transaction, where a NAT's or a Service's "
                  "per-connection cost shows)", choices=tuple(NETPERF_TESTS)),
        ParamSpec("seconds", int, 10, "length of each tool's run (netperf, then sockperf)",
                  minimum=1),
        ParamSpec("placement", str, "same-cpu", "CPU placement of client and server: free, "
                  "same-cpu, split (see isotax.workloads.servers)", choices=PLACEMENTS),
        ParamSpec("tail", bool, True, "also run sockperf for p99.9 (doubles the run time); "
                  "where sockperf cannot run (gVisor, TCP) the p99.9 alone is n/a"),
    )
    tools: ClassVar[Mapping[str, Sequence[str]]] = {
        "netperf": ("dpkg-query", "-W", "-f=${Version}", "netperf"),
        "sockperf": ("dpkg-query", "-W", "-f=${Version}", "sockperf"),
    }
    needs_loadgen: ClassVar[bool] = True
    client_packages: ClassVar[Sequence[str]] = ("netperf", "sockperf")
    # Unusual numbers, so they do not clash with a service of the host's when the
    # environment shares the host's network. netserver's control connection, the test's
    # data connection (netperf -P; udp for UDP_RR), and sockperf's (tcp or udp).
    ports: ClassVar[Mapping[str, Port]] = {
        "netperf": Port(42865, server="netserver"),
        "netperf-data": Port(42866, ("tcp", "udp"), server="netserver"),
        "sockperf": Port(41111, ("tcp", "udp"), server="sockperf"),
    }
    packages: ClassVar[Sequence[str]] = ("netperf", "sockperf")  # netperf is in non-free
    figures: ClassVar[FigureHints] = FigureHints(bars=True)

    def in_flight(self, params: Params) -> int:
        """One request-response transaction at a time: a latency test by design."""
        return 1

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str] | None:
        """netperf's transactions (sockperf's tail run, when on, is inside the same cost)."""
        s = first(samples, "transactions_per_s")
        return (float(s.labels["transactions"]), "transaction") \
            if s and "transactions" in s.labels else None

    def _no_tail(self, inst: Instance, params: Params) -> str | None:
        """Why sockperf's tail run cannot run in this instance (None: it can, or tail is
        off): then netperf's metrics are measured all the same, and only the p99.9 is n/a."""
        if params["tail"] and params["proto"] == "tcp_crr":
            return SOCKPERF_CRR_REASON
        if params["tail"] and params["proto"] == "tcp" and \
                inst.socket_stack is not SocketStack.LINUX:
            return SOCKPERF_TCP_REASON
        return None

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        need_loadgen(loadgen)
        tail = params["tail"] and not self._no_tail(inst, params)
        tools = ["netserver"] + (["sockperf"] if tail else [])
        done = inst.exec(["sh", "-c", 'for t; do command -v "$t" >/dev/null || '
                          '{ echo "$t missing"; exit 1; }; done', "sh", *tools], 60)
        if done.returncode != 0:
            raise SanityError(f"not runnable in the environment: {done.stdout.strip()} "
                              "(rebuild the image: isotax image build)")

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        loadgen = need_loadgen(loadgen)
        proto, seconds = str(params["proto"]), int(params["seconds"])
        client_pin, server_pin = pinning(inst, params["placement"])
        path = loadgen.path(inst)
        samples = self._netperf(inst, loadgen, proto, seconds, client_pin, server_pin, path)
        no_tail = self._no_tail(inst, params)
        if no_tail:
            return [replace(s, labels={**s.labels, NOT_MEASURED: {"latency_p99_9_us": no_tail}})
                    for s in samples]
        if params["tail"]:
            samples += self._sockperf(inst, loadgen, proto, seconds, client_pin, server_pin,
                                      path)
        return samples

    def _netperf(self, inst: Instance, lg: LoadGen, proto: str, seconds: int,
                 client_pin: list[str], server_pin: list[str], path: str) -> list[Sample]:
        ctrl, data = self.ports["netperf"].number, self.ports["netperf-data"].number
        host, mctrl = lg.target(inst, ctrl, "tcp")
        transport = "udp" if proto == "udp" else "tcp"
        dhost, mdata = lg.target(inst, data, transport)
        # netserver tells the client nothing about mappings: the client connects to the data
        # port it asked for (-P) on the control connection's host, so both must map 1:1.
        if (dhost, mdata) != (host, data):
            raise SanityError(f"netperf needs its data port mapped 1:1 on the control host; "
                              f"got {dhost}:{mdata} for {host}:{data}")
        test = NETPERF_TESTS[proto]
        # -L: only where the load generator arrives; -Z: only a client with the run's secret.
        listen = lg.listen(inst)
        server = [*server_pin, "netserver", "-D", "-f", "-4", "-L", f"{listen},inet",
                  "-p", str(ctrl), "-Z", SERVER_SECRET]
        # netserver binds its data socket to the address netperf names with the test's -H,
        # and netperf connects there: named where the client reaches the server without a
        # DNAT in between (the host's network: the address it listens on), so that socket is
        # not on every interface of the host. Behind a DNAT it cannot be named (netperf would
        # connect past the mapping) and binds the wildcard of the environment's own network
        # namespace, whose one outside address the load generator's rule guards.
        direct = ["-H", f"{host},inet"] if host == listen else []
        client = [*client_pin, "netperf", "-4", "-H", host, "-p", str(mctrl), "-Z",
                  SERVER_SECRET, "-t", test,
                  "-l", str(seconds), "-j", "--", "-r", "100,200", "-P", f",{data}",
                  *direct, "-k", ",".join(SELECTORS)]
        stalled: list[str] = []
        with serving(inst, server, ctrl, "tcp", program="netserver"):
            # A UDP_RR run that lost a datagram stood still until its timer ended it, so its
            # rate is not its latency's: it is run again, at most LOST_DATAGRAM_RUNS times
            # in all, and the runs that stalled are named in the labels.
            while True:
                done = lg.exec(client, seconds + 60)
                r = client_result(done, "netperf", seconds + 60, parse_netperf_rr)
                if transport != "udp" or r.busy_share >= BUSY_SHARE_MIN:
                    break
                stalled.append(f"{r.busy_share:.0%} busy, {r.transactions} transactions")
                if len(stalled) == LOST_DATAGRAM_RUNS:
                    raise SanityError(f"netperf {test} stood still in each of {len(stalled)} "
                                      f"runs ({'; '.join(stalled)}): datagrams are lost on "
                                      "this path, and UDP_RR never sends one again")
        if r.protocol != transport.upper() or (r.request_bytes, r.response_bytes) != (100, 200):
            raise SanityError(f"netperf ran {r.protocol} {r.request_bytes}/{r.response_bytes}"
                              f" bytes, asked {transport.upper()} 100/200")
        version = client_tool_version(lg, ("netperf", "-V"), parse_netperf_version)
        labels = {"tool": f"netperf {version} {test}", "protocol": proto,
                  "request_bytes": 100, "response_bytes": 200, "path": path,
                  "transactions": r.transactions, "min_us": r.min_us, "max_us": r.max_us,
                  "busy_share": round(r.busy_share, 4), "stalled_runs": stalled}
        return [
            Sample("transactions_per_s", r.transactions_per_s, "trans/s", True, labels),
            Sample("latency_mean_us", r.mean_us, "µs", False, labels),
            Sample("latency_p50_us", r.p50_us, "µs", False, labels),
            Sample("latency_p90_us", r.p90_us, "µs", False, labels),
            Sample("latency_p99_us", r.p99_us, "µs", False, labels),
        ]

    def _sockperf(self, inst: Instance, lg: LoadGen, proto: str, seconds: int,
                  client_pin: list[str], server_pin: list[str], path: str) -> list[Sample]:
        port = self.ports["sockperf"].number
        host, mapped = lg.target(inst, port, proto)
        tcp = ["--tcp"] if proto == "tcp" else []
        server = [*server_pin, "sockperf", "server", "-i", lg.listen(inst), "-p", str(port),
                  *tcp]
        # Every round trip goes to a log on the load generator, read back for the latency
        # CDF: 1-2 MB per 10 s run here, removed at once.
        with lg.scratch_file("itx-sockperf-", ".csv") as log:
            client = [*client_pin, "sockperf", "ping-pong", "-i", host, "-p", str(mapped),
                      *tcp, "-t", str(seconds), "-m", str(SOCKPERF_BYTES), "--full-rtt",
                      "--full-log", log]
            with serving(inst, server, port, proto, program="sockperf"):
                done = lg.exec(client, seconds + 60)
            r = client_result(done, "sockperf", seconds + 60, parse_sockperf_pingpong)
            rtts = parse_sockperf_full_log(lg.read_text(log))
        if len(rtts) != r.observations:
            raise SanityError(f"sockperf logged {len(rtts)} round trips, counted "
                              f"{r.observations}")
        labels = {"tool": f"sockperf {r.version} ping-pong", "protocol": proto,
                  "request_bytes": SOCKPERF_BYTES, "response_bytes": SOCKPERF_BYTES,
                  "path": path, "observations": r.observations, "dropped": r.dropped,
                  "sockperf_mean_us": r.mean_us, "sockperf_p50_us": r.pct(50.0),
                  "sockperf_p99_us": r.pct(99.0), "rtt_cdf_us": distributions.from_values(rtts)}
        return [Sample("latency_p99_9_us", r.pct(99.9), "µs", False, labels)]
