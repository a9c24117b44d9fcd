"""redis: the redis-benchmark CSV parser on real output captured here (errors included), the
version and the parameters."""

from __future__ import annotations

import pytest
from support import DATA

from isotax import protocols
from isotax.model import SanityError
from isotax.parsers.redis_benchmark import parse_redis_benchmark, parse_redis_version
from isotax.workloads.redis import Redis


def text(name: str) -> str:
    return (DATA / "redis" / name).read_text()


@pytest.mark.parametrize("name", ["native-c1.txt", "native-c10.txt"])
def test_parse_both_tests(name: str) -> None:
    tests = parse_redis_benchmark(text(name))
    assert set(tests) == {"SET", "GET"}
    for t in tests.values():
        assert t.rps > 1000
        assert t.min_ms <= t.p50_ms <= t.p95_ms <= t.p99_ms <= t.max_ms
        assert t.min_ms <= t.avg_ms <= t.max_ms


def test_parse_exact_values() -> None:
    s = parse_redis_benchmark(text("native-c10.txt"))["SET"]
    assert (s.rps, s.avg_ms, s.p50_ms, s.p99_ms, s.max_ms) == (666666.69, 0.134, 0.127, 0.343,
                                                               0.423)


def test_refused_is_a_sanity_failure() -> None:
    with pytest.raises(SanityError, match=r"Could not connect to Redis at 127\.0\.0\.1:46380"):
        parse_redis_benchmark(text("refused.txt"))


def test_a_run_shorter_than_the_clock_tick_has_no_rate() -> None:
    with pytest.raises(SanityError, match=r"rate is inf.*raise `requests`"):
        parse_redis_benchmark(text("too-short.txt"))


def test_zero_rate_empty_and_foreign_output() -> None:
    good = text("native-c1.txt")
    with pytest.raises(SanityError, match="rate is 0"):
        parse_redis_benchmark(good.replace('"SET","250000.00"', '"SET","0"'))
    with pytest.raises(SanityError, match="no results"):
        parse_redis_benchmark("")
    with pytest.raises(SanityError, match="unexpected CSV row"):
        parse_redis_benchmark(good.split("\n", 1)[1])  # rows without the header
    with pytest.raises(SanityError, match="not a number"):
        parse_redis_benchmark(good.replace('"0.036"', '"x"'))


def test_version() -> None:
    assert parse_redis_version(text("version.txt")) == "7.0.15"
    with pytest.raises(ValueError):
        parse_redis_version("redis-cli 7.0.15")


def test_params() -> None:
    specs = {p.name: p for p in Redis.params}
    assert specs["connections"].problem(0) is not None
    assert specs["connections"].problem(50) is None
    assert specs["requests"].problem(10) is not None
    assert (specs["pipeline"].default, specs["value_bytes"].default) == (10, 50)
    assert Redis.needs_loadgen and "redis" in protocols.workloads()


def test_a_connection_per_request_keeps_within_the_local_ports() -> None:
    w = Redis()
    base = {p.name: p.default for p in Redis.params}
    assert base["keepalive"] is True and w.not_applicable(None, base) is None  # type: ignore[arg-type]
    crr = {**base, "keepalive": False, "requests": 5000}
    assert w.not_applicable(None, crr) is None  # type: ignore[arg-type]
    why = w.not_applicable(None, {**crr, "requests": 20000})  # type: ignore[arg-type]
    assert why is not None and "TIME_WAIT" in why and "requests <= 10000" in why
