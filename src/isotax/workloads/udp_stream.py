"""udp_stream: UDP stream throughput with iperf3 (k8s-netperf's UDP_STREAM), as many streams as
asked, as fast as the sender can (-b 0), datagrams of `size` bytes.

Everything else is throughput's (the same server in the environment, client in the load
generator, directions, host CPU per GB). The receiver's count is the result, and with UDP the
sender's excess is lost, not slowed: the receiver's lost datagrams (%) and jitter come with it,
since a path that drops more moves less. `size` stays under the links' MTU (1400 here, less
the 28 bytes of IP and UDP headers) so that no datagram is fragmented.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import ClassVar

from isotax.model import Sample, SanityError
from isotax.parsers.iperf3 import Iperf3Result
from isotax.protocols import FigureHints, Params, ParamSpec, Port
from isotax.workloads.base import register
from isotax.workloads.throughput import Throughput


@register
class UdpStream(Throughput):
    name: ClassVar[str] = "udp_stream"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ("UDP stream throughput (iperf3 -u -b 0) from/to the load "
                                  "generator; received Gbit/s, lost %, host CPU-s/GB")
    params: ClassVar[Sequence[ParamSpec]] = (
        *(replace(p, help="parallel UDP streams (iperf3 -P; it takes 128 at most)")
          if p.name == "streams" else p for p in Throughput.params),
        ParamSpec("size", int, 1200, "datagram payload in bytes (under the MTU less 28)",
                  minimum=16, maximum=65507),
    )
    ports: ClassVar[Mapping[str, Port]] = {
        "iperf3": Port(45202, ("tcp", "udp"), server="iperf3")}
    figures: ClassVar[FigureHints] = FigureHints(bars=True, concurrency=("streams",))
    protocol: ClassVar[str] = "UDP"

    def client_args(self, params: Params) -> list[str]:
        return ["-u", "-b", "0", "-l", str(int(params["size"]))]

    def protocol_samples(self, r: Iperf3Result, labels: Mapping[str, object]) -> list[Sample]:
        if r.lost_percent is None or r.jitter_ms is None:
            raise SanityError("iperf3's UDP run reported no lost datagrams or jitter")
        return [Sample("lost_pct", r.lost_percent, "%", False, dict(labels)),
                Sample("jitter_ms", r.jitter_ms, "ms", False, dict(labels))]
