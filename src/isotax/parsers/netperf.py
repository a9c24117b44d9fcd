"""netperf 2.7 omni request/response output (`-k SELECTORS`, KEY=VALUE lines) -> numbers. Pure.

The latency statistics (MEAN/P50/P90/P99_LATENCY) exist only with netperf's `-j`; netperf
prints percentiles as whole microseconds. netperf has no TRANSACTIONS selector: with one
transaction in flight every transaction is one send call, so LOCAL_SEND_CALLS counts them.
A run that could not reach its netserver prints no selectors (and exits non-zero): that, or a
run with no transaction, is a SanityError.
"""

from __future__ import annotations

from dataclasses import dataclass

from isotax.model import SanityError

# What the workload asks netperf for; the parser needs the first eleven.
SELECTORS = (
    "THROUGHPUT", "THROUGHPUT_UNITS", "ELAPSED_TIME", "PROTOCOL", "REQUEST_SIZE",
    "RESPONSE_SIZE", "MEAN_LATENCY", "P50_LATENCY", "P90_LATENCY", "P99_LATENCY",
    "LOCAL_SEND_CALLS", "MIN_LATENCY", "MAX_LATENCY", "STDDEV_LATENCY", "RT_LATENCY",
    "REMOTE_RECV_CALLS",
)


@dataclass(frozen=True)
class NetperfRR:
    transactions_per_s: float
    transactions: int
    seconds: float
    protocol: str  # "TCP" / "UDP"
    request_bytes: int
    response_bytes: int
    mean_us: float
    p50_us: float
    p90_us: float
    p99_us: float
    min_us: float | None
    max_us: float | None
    stddev_us: float | None

    @property
    def busy_share(self) -> float:
        """The share of the run spent inside transactions: one in flight, so the sum of the
        round trips is the elapsed time (0.999 on loopback). UDP_RR does not retransmit: a
        lost datagram leaves netperf waiting until the test's timer ends it, and that wait is
        in the rate (elapsed time) but in no latency (loopback, one datagram in 50,000 lost:
        0.20)."""
        return self.transactions * self.mean_us / (self.seconds * 1e6)


def parse_keyval(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.isupper() and " " not in key:
            out[key] = value.strip()
    return out


def parse_netperf_rr(text: str) -> NetperfRR:
    kv = parse_keyval(text)
    if "THROUGHPUT" not in kv:
        tail = " | ".join(text.strip().splitlines()[-2:]) or "(no output)"
        raise SanityError(f"netperf printed no results: {tail[:300]}")

    def num(key: str) -> float:
        try:
            return float(kv[key])
        except KeyError:
            raise SanityError(f"netperf output lacks {key} (was it run with -j -k ...?)") \
                from None
        except ValueError:
            raise SanityError(f"netperf {key}={kv[key]!r} is not a number") from None

    def opt(key: str) -> float | None:
        try:
            return float(kv[key])
        except (KeyError, ValueError):
            return None

    units = kv.get("THROUGHPUT_UNITS", "")
    if units != "Trans/s":
        raise SanityError(f"netperf throughput is in {units!r}, not Trans/s: not an RR test")
    r = NetperfRR(
        transactions_per_s=num("THROUGHPUT"), transactions=int(num("LOCAL_SEND_CALLS")),
        seconds=num("ELAPSED_TIME"), protocol=kv.get("PROTOCOL", "?"),
        request_bytes=int(num("REQUEST_SIZE")), response_bytes=int(num("RESPONSE_SIZE")),
        mean_us=num("MEAN_LATENCY"), p50_us=num("P50_LATENCY"), p90_us=num("P90_LATENCY"),
        p99_us=num("P99_LATENCY"), min_us=opt("MIN_LATENCY"), max_us=opt("MAX_LATENCY"),
        stddev_us=opt("STDDEV_LATENCY"))
    if r.transactions <= 0 or r.transactions_per_s <= 0:
        raise SanityError(f"netperf completed {r.transactions} transactions: nothing went "
                          "through")
    if r.mean_us <= 0:
        raise SanityError(f"netperf mean latency {r.mean_us} µs is not positive")
    return r


def parse_netperf_version(text: str) -> str:
    """`netperf -V` -> "2.7.0"."""
    for word in text.split():
        if word[:1].isdigit() and "." in word:
            return word
    raise ValueError(f"no version in {text.strip()[:80]!r}")
