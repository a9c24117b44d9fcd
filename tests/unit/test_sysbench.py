"""sysbench 1.0.20 oltp_read_write reports, captured here against MariaDB 10.11 (normal runs with
and without --histogram, heavy deadlock contention, and the failures: connection refused,
access denied, tables missing, server killed mid-run)."""

from __future__ import annotations

import re

import pytest
from support import DATA

from isotax.model import SanityError
from isotax.parsers.sysbench import (
    histogram_percentile,
    parse_mariadbd_version,
    parse_sysbench,
    parse_sysbench_version,
)


def text(name: str) -> str:
    return (DATA / "sysbench" / name).read_text()


@pytest.mark.parametrize("name", ["native-t1-hist.txt", "native-t8-hist.txt",
                                  "native-t2-p95.txt", "contention.txt"])
def test_parse_every_run(name: str) -> None:
    r = parse_sysbench(text(name))
    assert r.transactions > 0 and r.tps > 0
    assert r.queries == r.reads + r.writes + r.other
    # oltp_read_write: 18 statements and BEGIN/COMMIT per transaction, 20 queries in all
    # (a deadlocked transaction is restarted, so a contended run has a few more).
    assert r.queries >= 20 * r.transactions
    assert r.events == r.transactions
    assert r.lat_min_ms <= r.lat_avg_ms <= r.lat_max_ms
    assert r.lat_min_ms <= r.lat_percentile_ms <= r.lat_max_ms
    # Little's law: threads busy all the time, each transaction takes the mean latency.
    assert r.tps * r.lat_avg_ms / 1000 == pytest.approx(r.threads, rel=0.05)


def test_exact_values() -> None:
    r = parse_sysbench(text("native-t8-hist.txt"))
    assert (r.threads, r.transactions, r.tps, r.qps) == (8, 5178, 1721.57, 34431.42)
    assert (r.reads, r.writes, r.other) == (72492, 20712, 10356)
    assert (r.ignored_errors, r.errors_per_s, r.reconnects) == (0, 0.0, 0)
    assert (r.lat_min_ms, r.lat_avg_ms, r.lat_max_ms) == (0.91, 4.64, 16.53)
    assert (r.percentile, r.lat_percentile_ms, r.total_time_s) == (99.0, 9.73, 3.0067)


def test_percentiles_from_the_histogram() -> None:
    """sysbench computed p99; the histogram gives p95 (and p99 back) by its own rule."""
    r = parse_sysbench(text("native-t8-hist.txt"))
    assert len(r.histogram) == 137 and sum(c for _, c in r.histogram) == r.events
    p50, p95, p99 = (r.latency_percentile(p) for p in (50, 95, 99))
    assert p50 < p95 < p99
    assert p99 == pytest.approx(r.lat_percentile_ms, abs=0.006)
    assert p95 == 7.43
    assert r.latency_percentile(100) == r.histogram[-1][0]


def test_without_histogram_only_the_printed_percentile() -> None:
    r = parse_sysbench(text("native-t2-p95.txt"))
    assert r.histogram == () and r.percentile == 95
    assert r.latency_percentile(95) == 2.86
    with pytest.raises(ValueError, match="--histogram"):
        r.latency_percentile(99)


def test_histogram_rule() -> None:
    h = ((1.0, 50), (2.0, 45), (3.0, 4), (10.0, 1))
    assert histogram_percentile(h, 50) == 1.0
    assert histogram_percentile(h, 95) == 2.0
    assert histogram_percentile(h, 99) == 3.0
    assert histogram_percentile(h, 99.6) == 10.0  # floor(100 * 0.996 + 0.5) = 100
    with pytest.raises(ValueError):
        histogram_percentile(h, 0)
    with pytest.raises(ValueError):
        histogram_percentile((), 50)


def test_contention_counts_ignored_errors() -> None:
    """Deadlocks (1213) are ignored by sysbench and retried: counted, not fatal here."""
    r = parse_sysbench(text("contention.txt"))
    assert (r.threads, r.ignored_errors, r.errors_per_s) == (16, 2074, 686.34)
    assert r.latency_percentile(99) == pytest.approx(74.46, abs=0.006)


@pytest.mark.parametrize(("name", "words"), [
    ("refused.txt", r"error 2002: Can't connect to server on '127\.0\.0\.1'"),
    ("denied.txt", r"error 1045: Access denied for user 'sbtest'"),
    ("no-tables.txt", r"1146 \"Table 'empty\.sbtest1' doesn't exist\""),
    ("killed.txt", r"error 2013 \(Lost connection to server during query\)"),
])
def test_failures_are_sanity_errors(name: str, words: str) -> None:
    with pytest.raises(SanityError, match=words):
        parse_sysbench(text(name))


def test_truncated_or_inconsistent_output() -> None:
    good = text("native-t8-hist.txt")
    with pytest.raises(SanityError, match="no SQL statistics"):
        parse_sysbench(good.split("SQL statistics:")[0])
    with pytest.raises(SanityError, match="no transactions"):
        parse_sysbench(good.replace("    transactions:                        5178   (1721.57",
                                    "    transactions:                        0   (0.00"))
    with pytest.raises(SanityError, match="no reconnects"):
        parse_sysbench(good.replace("reconnects:", "reconnections:"))
    # A histogram line lost: its count no longer matches the events.
    first = next(ln for ln in good.splitlines() if re.match(r"\s+[0-9.]+ \|", ln))
    with pytest.raises(SanityError, match="histogram counts"):
        parse_sysbench(good.replace(first + "\n", "", 1))
    # A percentile that the histogram does not give back.
    with pytest.raises(SanityError, match="histogram gives"):
        parse_sysbench(good.replace("99th percentile:                        9.73",
                                    "99th percentile:                        8.73"))
    with pytest.raises(SanityError, match="no SQL statistics"):
        parse_sysbench("")


def test_versions() -> None:
    assert parse_sysbench_version(text("version.txt")) == "1.0.20"
    assert parse_sysbench_version(text("native-t1-hist.txt")) == "1.0.20"
    assert parse_mariadbd_version(text("mariadbd-version.txt")) == "10.11.19-MariaDB-0+deb12u1"
    with pytest.raises(ValueError):
        parse_sysbench_version("mariadbd  Ver 10.11.19")
    with pytest.raises(ValueError):
        parse_mariadbd_version("sysbench 1.0.20")
