"""rr: the netperf and sockperf parsers on real output captured on this kind of machine, error
cases included. The workload itself runs for real in tests/integration/test_loadgen.py."""

from __future__ import annotations

import pytest
from support import DATA

from isotax.model import SanityError
from isotax.parsers import distributions
from isotax.parsers.netperf import parse_netperf_rr, parse_netperf_version
from isotax.parsers.sockperf import _PCT, parse_sockperf_full_log, parse_sockperf_pingpong
from isotax.workloads.rr import BUSY_SHARE_MIN, RequestResponse


def text(tool: str, name: str) -> str:
    return (DATA / tool / name).read_text()


@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_netperf_rr(proto: str) -> None:
    r = parse_netperf_rr(text("netperf", f"native-{proto}_rr.txt"))
    assert r.protocol == proto.upper()
    assert (r.request_bytes, r.response_bytes) == (100, 200)
    assert r.seconds == 2.0 and r.transactions > 1000
    # One transaction in flight: the rate is the count over the time.
    assert r.transactions_per_s == pytest.approx(r.transactions / r.seconds, rel=0.01)
    assert r.min_us is not None and r.max_us is not None
    assert r.min_us <= r.p50_us <= r.p90_us <= r.p99_us <= r.max_us


def test_netperf_exact_values() -> None:
    r = parse_netperf_rr(text("netperf", "native-tcp_rr.txt"))
    assert (r.transactions_per_s, r.mean_us, r.p50_us, r.p99_us) == (15144.24, 65.96, 79, 151)
    assert r.transactions == 30294


def test_netperf_refused_is_a_sanity_failure() -> None:
    with pytest.raises(SanityError, match="netserver listening"):
        parse_netperf_rr(text("netperf", "refused.txt"))


def test_netperf_without_latency_stats_or_transactions() -> None:
    good = text("netperf", "native-tcp_rr.txt")
    with pytest.raises(SanityError, match="P99_LATENCY"):
        parse_netperf_rr(good.replace("P99_LATENCY=151\n", ""))
    with pytest.raises(SanityError, match="nothing went through"):
        parse_netperf_rr(good.replace("LOCAL_SEND_CALLS=30294", "LOCAL_SEND_CALLS=0"))
    with pytest.raises(SanityError, match="not an RR test"):
        parse_netperf_rr(good.replace("Trans/s", "10^6bits/s"))


def test_netperf_tcp_crr_is_read_like_tcp_rr() -> None:
    """netperf 2.7's TCP_CRR on loopback (a new connection per transaction): the same
    selectors, one send a transaction, so the same parser and the same sanity checks."""
    r = parse_netperf_rr(text("netperf", "native-tcp_crr.txt"))
    assert r.protocol == "TCP" and (r.request_bytes, r.response_bytes) == (100, 200)
    assert (r.transactions_per_s, r.transactions, r.p50_us, r.p99_us) == (16379.36, 49139, 58,
                                                                           110)
    assert r.transactions_per_s == pytest.approx(r.transactions / r.seconds, rel=0.01)


def test_a_udp_rr_that_lost_a_datagram_is_told_by_its_busy_share() -> None:
    """Captured on loopback with an iptables rule dropping one UDP datagram in 50,000: the
    run waited for a lost answer until its timer ended it, so the rate (4,658 trans/s) is not
    the latency's (43.5 µs a round trip: 22,980/s). Healthy runs of all three tests fill their
    time with round trips."""
    lost = parse_netperf_rr(text("netperf", "loopback-udp_rr-lost-datagram.txt"))
    assert lost.busy_share == pytest.approx(0.2027, abs=1e-4)
    assert lost.busy_share < BUSY_SHARE_MIN
    for name in ("native-tcp_rr.txt", "native-udp_rr.txt", "native-tcp_crr.txt"):
        assert parse_netperf_rr(text("netperf", name)).busy_share > 0.99


def test_netperf_version() -> None:
    assert parse_netperf_version(text("netperf", "version.txt")) == "2.7.0"


@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_sockperf_pingpong(proto: str) -> None:
    r = parse_sockperf_pingpong(text("sockperf", f"native-{proto}.txt"))
    assert r.version == "3.7" and r.observations > 1000 and r.dropped == 0
    assert 0 < r.seconds < 2
    assert r.min_us <= r.pct(50.0) <= r.pct(99.0) <= r.pct(99.9) <= r.max_us
    with pytest.raises(SanityError, match=r"no 12\.5 percentile"):
        r.pct(12.5)


def test_sockperf_exact_values() -> None:
    r = parse_sockperf_pingpong(text("sockperf", "native-tcp.txt"))
    assert (r.mean_us, r.pct(99.9), r.observations) == (82.429, 208.390, 18795)


def test_sockperf_errors_exit_zero_but_fail_sanity() -> None:
    with pytest.raises(SanityError, match="Connection refused"):
        parse_sockperf_pingpong(text("sockperf", "refused-tcp.txt"))
    with pytest.raises(SanityError, match="no messages came back"):
        parse_sockperf_pingpong(text("sockperf", "refused-udp.txt"))
    with pytest.raises(SanityError, match="no summary"):
        parse_sockperf_pingpong("")


def test_sockperf_one_way_latency_is_refused() -> None:
    with pytest.raises(SanityError, match="--full-rtt"):
        parse_sockperf_pingpong(text("sockperf", "loopback-udp-one-way.txt"))


def test_params() -> None:
    specs = {p.name: p for p in RequestResponse.params}
    assert specs["proto"].problem("sctp") is not None
    assert specs["proto"].problem("tcp_crr") is None
    assert specs["placement"].problem("same-cpu") is None
    assert specs["tail"].problem(1) is not None
    assert RequestResponse.needs_loadgen


@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_sockperf_full_log(proto: str) -> None:
    """Every observation of the valid duration, as the summary counted them; its CDF's
    quantiles land within 2% of sockperf's own percentiles (whose index rounds differently)."""
    log = text("sockperf", f"full-log-{proto}.csv")
    rtts = parse_sockperf_full_log(log)
    assert len(rtts) in (2197, 2200) and min(rtts) > 0
    cdf = distributions.from_values(rtts)
    assert distributions.valid(cdf) and len(cdf) <= 80
    assert cdf[0][0] == pytest.approx(min(rtts), rel=1e-3) and cdf[-1] == [
        pytest.approx(max(rtts), rel=1e-3), 1.0]
    printed = {float(q): float(v) for q, v in _PCT.findall(log)}
    assert set(printed) >= {25.0, 50.0, 90.0, 99.0, 99.9}
    for q, v in printed.items():
        assert distributions.quantile(cdf, q / 100) == pytest.approx(v, rel=0.02), q


def test_sockperf_full_log_refusals() -> None:
    log = text("sockperf", "full-log-udp.csv")
    with pytest.raises(SanityError, match="--full-rtt"):
        parse_sockperf_full_log(log.replace(" --full-rtt", ""))
    with pytest.raises(SanityError, match="cut short"):
        parse_sockperf_full_log(log[: len(log) // 2])
    with pytest.raises(SanityError, match="not a --full-log file"):
        parse_sockperf_full_log(text("sockperf", "native-udp.txt"))
    with pytest.raises(SanityError, match="bad line"):
        parse_sockperf_full_log(log.replace(", 69.", ", x69.", 1))
