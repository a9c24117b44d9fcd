"""throughput: bulk TCP throughput with iperf3, and what it costs the whole host per GB.

The studies' nuttcp/iperf test: one TCP stream (a `streams` sweep runs several) at the
standard 1500-byte MTU of the load generator's veth pair, for `seconds`, in one direction at a
time: `to_env` (the load generator sends, the environment receives) or `from_env` (iperf3 -R,
the environment sends). The iperf3 server runs inside the environment in one-shot mode
(`-s -1`), the client in the load generator.

Gbit/s is the receiver's count. The CPU cost is host-wide, as IBM's `perf stat -a`: /proc/stat
before and after the client, divided by the bytes received, split into user, system (+hardirq)
and softirq; where the host can count cycles, also `perf stat -a -e cycles` around the
client, as cycles per received byte (telemetry.py; the cpu_method label says which method and,
without cycles, why not). Host-wide includes both ends (the client's share is the same for
every environment) and everything in between: for a VM, QEMU's virtio-net emulation and,
under TCG, the emulated guest itself -- the hidden cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from isotax.model import Sample, SanityError
from isotax.parsers.iperf3 import Iperf3Result, parse_iperf3
from isotax.protocols import FigureHints, Instance, LoadGen, Params, ParamSpec, Port
from isotax.telemetry.counters import cost_per_gb, perf_cycles, read_cpu_times
from isotax.workloads.base import BaseWorkload, need_loadgen, register, require_runnable
from isotax.workloads.servers import PLACEMENTS, pinning, serving
from isotax.workloads.work import first


@register
class Throughput(BaseWorkload):
    name: ClassVar[str] = "throughput"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ("bulk TCP throughput (iperf3) from/to the load generator; "
                                  "Gbit/s and host CPU-s/GB")
    params: ClassVar[Sequence[ParamSpec]] = (
        ParamSpec("direction", str, "to_env", "to_env: the environment receives; from_env: "
                  "it sends (iperf3 -R)", choices=("to_env", "from_env")),
        ParamSpec("seconds", int, 10, "length of the transfer", minimum=1),
        ParamSpec("streams", int, 1, "parallel TCP streams (iperf3 -P; it takes 128 at most)",
                  minimum=1, maximum=128),
        ParamSpec("placement", str, "free", "CPU placement of client and server: free, "
                  "same-cpu, split (see isotax.workloads.servers)", choices=PLACEMENTS),
    )
    tools: ClassVar[Mapping[str, Sequence[str]]] = {
        "iperf3": ("dpkg-query", "-W", "-f=${Version}", "iperf3"),
    }
    needs_loadgen: ClassVar[bool] = True
    client_packages: ClassVar[Sequence[str]] = ("iperf3",)
    # An unusual number, so it does not clash with a service of the host's when the
    # environment shares the host's network.
    ports: ClassVar[Mapping[str, Port]] = {"iperf3": Port(45201, server="iperf3")}
    # nuttcp: the studies' other bulk-throughput tool, in the image beside iperf3.
    packages: ClassVar[Sequence[str]] = ("iperf3", "nuttcp")
    figures: ClassVar[FigureHints] = FigureHints(bars=True, concurrency=("streams",))

    def in_flight(self, params: Params) -> int:
        """Streams; each keeps a window of data in flight, so this bounds nothing by itself."""
        return int(params["streams"])

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str] | None:
        """The bytes the receiver counted, in GB."""
        s = first(samples, "throughput")
        return (float(s.labels["bytes"]) / 1e9, "GB") if s and "bytes" in s.labels else None

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        need_loadgen(loadgen)
        require_runnable(inst, ["iperf3", "--version"])

    # What the client sends: TCP streams here; udp_stream's datagrams (its subclass).
    protocol: ClassVar[str] = "TCP"

    def client_args(self, params: Params) -> list[str]:
        """iperf3's arguments for the protocol beyond -c, -p, -t, -P, -J and -R."""
        return []

    def protocol_samples(self, r: Iperf3Result, labels: Mapping[str, object]) -> list[Sample]:
        """The protocol's own numbers beyond throughput and its CPU cost."""
        return []

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        lg = need_loadgen(loadgen)
        seconds, streams = int(params["seconds"]), int(params["streams"])
        reverse = params["direction"] == "from_env"
        served = self.ports["iperf3"]
        port = served.number
        # iperf3's control connection is TCP on the port; its UDP datagrams go to the same
        # address and port, which a NAT in between must map as well.
        host, mapped = lg.target(inst, port, "tcp")
        for proto in served.protocols:
            if lg.target(inst, port, proto) != (host, mapped):
                raise SanityError(f"the load generator reaches port {port} by {proto} "
                                  "elsewhere than by tcp: iperf3 needs both on one")
        client_pin, server_pin = pinning(inst, params["placement"])
        server = [*server_pin, "iperf3", "-s", "-1", "-B", lg.listen(inst), "-p", str(port)]
        client = [*client_pin, "iperf3", "-c", host, "-p", str(mapped), "-t", str(seconds),
                  "-P", str(streams), "-J", *self.client_args(params),
                  *(["-R"] if reverse else [])]
        # perf_cycles runs nothing where cycles are not supported.
        with serving(inst, server, port, "tcp", program="iperf3"), perf_cycles() as cycles:
            before = read_cpu_times()
            done = lg.exec(client, seconds + 60)
            delta = read_cpu_times() - before
        if done.returncode == 124:
            raise SanityError(f"iperf3 client timed out after {seconds + 60} s")
        r = parse_iperf3(done.stdout)  # iperf3's own error, or no data: SanityError
        if r.reverse != reverse or r.streams != streams or r.protocol != self.protocol:
            raise SanityError(f"iperf3 ran {r.protocol} reverse={r.reverse} streams={r.streams}"
                              f", asked {self.protocol} reverse={reverse} streams={streams}")
        cost = cost_per_gb(delta, r.bytes_received)
        labels = {
            "tool": f"{r.version} (client: {lg.where})", "protocol": r.protocol,
            "direction": params["direction"], "streams": streams,
            "path": lg.path(inst), "congestion": r.congestion,
            "retransmits": r.retransmits if r.retransmits is not None else "n/a",
            "bytes": r.bytes_received,
            # Without cycles, the same words as telemetry.cpu_method(): /proc/stat and why.
            "cpu_method": "/proc/stat" if cycles.value is not None
            else f"/proc/stat (perf: {cycles.reason})",
            "host_cpu_window_s": round(delta.busy + delta.idle, 3),
            "host_cpu_busy_s": round(delta.busy, 3), "steal_s": round(delta.steal, 3),
        }
        samples = [
            Sample("throughput", r.bits_per_second / 1e9, "Gbit/s", True, labels),
            Sample("cpu_per_gb", cost["total"], "CPU-s/GB", False, labels),
            Sample("cpu_user_per_gb", cost["user"], "CPU-s/GB", False, labels),
            Sample("cpu_system_per_gb", cost["system"], "CPU-s/GB", False, labels),
            Sample("cpu_softirq_per_gb", cost["softirq"], "CPU-s/GB", False, labels),
        ]
        if cycles.value is not None:
            samples.append(Sample("cycles_per_byte", cycles.value / r.bytes_received,
                                  "cycles/B", False, {**labels, "cpu_method": "perf cycles"}))
        return [*samples, *self.protocol_samples(r, labels)]
