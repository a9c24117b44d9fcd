"""memcached: memaslap's output parsed from real runs captured here (a refused one included),
and the workload's pure parts: its command lines, parameters and declared facts."""

from __future__ import annotations

import pytest
from support import DATA

from isotax import protocols
from isotax.model import SanityError
from isotax.parsers.memaslap import parse_memaslap
from isotax.workloads.memcached import PORT, Memcached, client_argv, server_argv


def text(name: str) -> str:
    return (DATA / "memaslap" / name).read_text()


@pytest.mark.parametrize("name", ["native-c16.txt", "native-c1-x64.txt"])
def test_parse_every_block(name: str) -> None:
    r = parse_memaslap(text(name))
    assert set(r.latency) == {"Get", "Set", "Total"}
    assert r.cmd_get + r.cmd_set == r.ops and r.get_misses == 0
    for b in r.latency.values():
        assert b.min_us <= b.geo_us <= b.max_us and b.min_us <= b.avg_us <= b.max_us
        # Every event is in the histogram, and bucket i is [2^(i-1), 2^i) µs: Min and Max
        # fall in the lowest and the highest non-empty bucket.
        counted = [(i, c) for i, c in b.log2_counts if c]
        assert sum(c for _, c in counted) == b.events
        assert 2 ** (counted[0][0] - 1) <= b.min_us < 2 ** counted[0][0]
        assert 2 ** (counted[-1][0] - 1) <= b.max_us < 2 ** counted[-1][0]
    assert r.latency["Get"].events + r.latency["Set"].events == r.latency["Total"].events


def test_parse_exact_values() -> None:
    r = parse_memaslap(text("native-c1-x64.txt"))
    assert (r.ops, r.tps, r.run_time_s, r.net_mib_s) == (93240, 46615.0, 2.0, 9.4)
    g = r.latency["Get"]
    assert (g.events, g.min_us, g.max_us, g.avg_us, g.geo_us, g.std_us) == (
        83915, 13, 4573, 21, 16.84, 93.74)
    assert g.log2_counts[:4] == ((4, 74578), (5, 753), (6, 8058), (7, 358))
    assert g.log2_counts[-1] == (13, 8)
    # 99% of 83915 is reached in bucket 6 ([32, 64) µs): the bound, not an interpolation.
    assert g.percentile_bound_us(0.99) == 64.0
    assert g.percentile_bound_us(0.9999) == 4096.0  # 83907 of 83915 are below 4096 µs
    assert g.percentile_bound_us(0.99995) == 8192.0


def test_refused_is_a_sanity_failure() -> None:
    with pytest.raises(SanityError, match="no 'Run time' line: could it reach the server"):
        parse_memaslap(text("refused.txt"))


def test_zero_rate_missing_counters_and_blocks() -> None:
    good = text("native-c16.txt")
    with pytest.raises(SanityError, match="nothing was measured"):
        parse_memaslap(good.replace("TPS: 82507", "TPS: 0"))
    with pytest.raises(SanityError, match="no get_misses"):
        parse_memaslap(good.replace("get_misses: 0\n", ""))
    without_blocks = good[:good.index("Get Statistics (")] + good[good.index("cmd_get:"):]
    with pytest.raises(SanityError, match="no latency statistics"):
        parse_memaslap(without_blocks)
    with pytest.raises(SanityError, match="no result"):
        parse_memaslap("")


def test_command_lines() -> None:
    s = server_argv("10.0.0.2", 64, 2)
    assert s[:5] == ["memcached", "-l", "10.0.0.2", "-p", str(PORT.number)]
    assert "0.0.0.0" not in s and s[s.index("-U") + 1] == "0"  # no UDP listener
    assert s[s.index("-m") + 1] == "64" and s[s.index("-t") + 1] == "2"
    c = client_argv("10.0.0.2", 41211, {"connections": 8, "duration_s": 3, "value_bytes": 100,
                                        "memory_mib": 64, "server_threads": 1})
    assert c[0] == "memcaslap" and "--servers=10.0.0.2:41211" in c
    # One statistics period as long as the run: memaslap prints latency blocks only then.
    assert "--time=3s" in c and "--stat_freq=3s" in c
    assert "--concurrency=8" in c and "--fixed_size=100" in c


def test_params_and_facts() -> None:
    specs = {p.name: p for p in Memcached.params}
    assert specs["connections"].problem(0) is not None
    assert specs["connections"].problem(2000) is not None  # beyond memcached's -c 1024
    assert specs["memory_mib"].problem(4) is not None
    w = Memcached()
    params = {p.name: p.default for p in Memcached.params}
    assert w.in_flight(params) == 16
    needs = w.host_needs(params)
    assert needs.memory is not None and needs.memory.amount == 64 << 20
    assert "memcached" in protocols.workloads() and Memcached.needs_loadgen
    assert "memcached" in protocols.workload_packages()
    assert PORT in protocols.workload_ports()
