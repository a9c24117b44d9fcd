"""sockperf 3.x `ping-pong --full-rtt` output -> round-trip statistics. Pure.

sockperf prints colour escapes and a percentile table of the "valid duration" (its warm-up
excluded), in microseconds of round trip with --full-rtt (without it, half a round trip: the
parser refuses that). sockperf exits 0 even when the server was unreachable, so a run without
the summary, with an ERROR line, or with no observation is a SanityError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from isotax.model import SanityError

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PCT = re.compile(r"---> percentile\s+([0-9.]+)\s*=\s*([0-9.]+)")
_VALID = re.compile(r"\[Valid Duration\] RunTime=([0-9.]+) sec; SentMessages=(\d+); "
                    r"ReceivedMessages=(\d+)")


@dataclass(frozen=True)
class SockperfPingPong:
    mean_us: float  # round trip
    stddev_us: float
    observations: int
    seconds: float  # sockperf's valid duration (after its warm-up)
    percentiles_us: dict[float, float]  # 50.0 -> µs, 99.9 -> µs, ...
    min_us: float
    max_us: float
    dropped: int
    version: str

    def pct(self, p: float) -> float:
        if p not in self.percentiles_us:
            raise SanityError(f"sockperf printed no {p} percentile")
        return self.percentiles_us[p]


def parse_sockperf_pingpong(text: str) -> SockperfPingPong:
    clean = _ANSI.sub("", text)
    ver = re.search(r"== version #(\S+?)(?:-no\.git)? ==", clean)
    errors = [ln.split("ERROR:", 1)[1].strip() for ln in clean.splitlines() if "ERROR:" in ln]
    if errors:
        raise SanityError(f"sockperf: {errors[0]}")
    if "No messages were received" in clean:
        raise SanityError("sockperf: no messages came back from the server")
    if "Round trip is" not in clean:
        if "Summary: Latency is" in clean:
            raise SanityError("sockperf reported one-way latency: run it with --full-rtt")
        tail = " | ".join(clean.strip().splitlines()[-2:]) or "(no output)"
        raise SanityError(f"sockperf printed no summary: {tail[:300]}")
    avg = re.search(r"avg-rtt=([0-9.]+) \(std-dev=([0-9.]+)\)", clean)
    total = re.search(r"Total (\d+) observations", clean)
    valid = _VALID.search(clean)
    mx = re.search(r"<MAX> observation =\s*([0-9.]+)", clean)
    mn = re.search(r"<MIN> observation =\s*([0-9.]+)", clean)
    dropped = re.search(r"# dropped messages = (\d+)", clean)
    if not (avg and total and valid and mx and mn):
        raise SanityError("sockperf summary is incomplete (avg-rtt, observations, valid "
                          "duration, min/max)")
    pcts = {float(p): float(v) for p, v in _PCT.findall(clean)}
    r = SockperfPingPong(
        mean_us=float(avg.group(1)), stddev_us=float(avg.group(2)),
        observations=int(total.group(1)), seconds=float(valid.group(1)),
        percentiles_us=pcts, min_us=float(mn.group(1)), max_us=float(mx.group(1)),
        dropped=int(dropped.group(1)) if dropped else 0,
        version=ver.group(1) if ver else "")
    if r.observations <= 0:
        raise SanityError("sockperf made no observation")
    return r


_LOG_HEADER = "packet, txTime(sec), rxTime(sec), rtt(usec)"


def parse_sockperf_full_log(text: str) -> list[float]:
    """sockperf's `--full-log FILE` -> the round trip of every valid observation, µs. Pure.

    The file repeats the run's parameters and summary, then one CSV line per observation of
    the valid duration: packet, send and receive time (s), and rtt (µs). The rtt column is a
    round trip only with --full-rtt (else half of one): the parser refuses a log without it,
    and one whose line count disagrees with the summary's observation count (cut short)."""
    clean = _ANSI.sub("", text)
    if _LOG_HEADER not in clean:
        raise SanityError("sockperf's full log has no observation header "
                          f"({_LOG_HEADER!r}): not a --full-log file")
    params = re.search(r"parameters: (.*)", clean)
    if not params or "--full-rtt" not in params.group(1):
        raise SanityError("sockperf's full log holds one-way latencies: run it with --full-rtt")
    rtts: list[float] = []
    for ln in clean.split(_LOG_HEADER, 1)[1].splitlines():
        parts = ln.split(",")
        if len(parts) != 4:
            continue  # the closing rule
        try:
            rtt = float(parts[3])
        except ValueError as e:
            raise SanityError(f"sockperf's full log has a bad line: {ln.strip()[:80]}") from e
        if not rtt > 0 or rtt == float("inf"):
            raise SanityError(f"sockperf's full log has a round trip of {rtt} µs")
        rtts.append(rtt)
    total = re.search(r"Total (\d+) observations", clean)
    if total and int(total.group(1)) != len(rtts):
        raise SanityError(f"sockperf's full log holds {len(rtts)} observations, its summary "
                          f"says {total.group(1)}: the file was cut short")
    if not rtts:
        raise SanityError("sockperf's full log holds no observation")
    return rtts
