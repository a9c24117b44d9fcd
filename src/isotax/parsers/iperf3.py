"""iperf3 `--json` output -> the numbers of one bulk-throughput test. Pure.

The receiver's count is the honest one (bytes the other side really got), so throughput comes
from `end.sum_received`, whichever direction ran (with -R the client is the receiver). A run
iperf3 itself calls failed carries a top-level "error" and is a SanityError, as is a run that
moved nothing. A UDP run (-u) adds the receiver's lost datagrams and jitter.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from isotax.model import SanityError


@dataclass(frozen=True)
class Iperf3Result:
    bytes_received: int
    bits_per_second: float  # receiver side
    seconds: float  # the receiver's measured interval
    bytes_sent: int
    retransmits: int | None  # sender's TCP retransmissions (None when iperf3 gives none)
    streams: int
    reverse: bool  # -R: the server sent
    protocol: str
    congestion: str  # the sender's TCP congestion control
    version: str  # "iperf 3.12"
    # UDP only (None for TCP): the datagrams the receiver counted lost, in %, and its jitter.
    lost_percent: float | None = None
    jitter_ms: float | None = None


def _num(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            raise SanityError(f"iperf3 JSON lacks {'.'.join(keys)}")
        d = d[k]
    return d


def parse_iperf3(text: str) -> Iperf3Result:
    try:
        doc = json.loads(text)
    except ValueError as e:
        head = text.strip()[:120] or "(no output)"
        raise SanityError(f"iperf3 output is not JSON ({e}): {head!r}") from e
    if not isinstance(doc, dict):
        raise SanityError("iperf3 JSON is not an object")
    if doc.get("error"):
        raise SanityError(f"iperf3: {doc['error']}")
    test = _num(doc, "start", "test_start")
    received = _num(doc, "end", "sum_received")
    sent = _num(doc, "end", "sum_sent")
    nbytes = int(_num(received, "bytes"))
    seconds = float(_num(received, "seconds"))
    if nbytes <= 0 or seconds <= 0:
        raise SanityError(f"iperf3 moved {nbytes} bytes in {seconds} s: no data went through")
    end = doc["end"]
    return Iperf3Result(
        bytes_received=nbytes,
        bits_per_second=float(_num(received, "bits_per_second")),
        seconds=seconds,
        bytes_sent=int(_num(sent, "bytes")),
        retransmits=int(sent["retransmits"]) if "retransmits" in sent else None,
        streams=int(_num(test, "num_streams")),
        reverse=bool(test.get("reverse", 0)),
        protocol=str(test.get("protocol", "?")),
        congestion=str(end.get("sender_tcp_congestion", "")),
        version=str(doc.get("start", {}).get("version", "")),
        lost_percent=float(received["lost_percent"]) if "lost_percent" in received else None,
        jitter_ms=float(received["jitter_ms"]) if "jitter_ms" in received else None,
    )
