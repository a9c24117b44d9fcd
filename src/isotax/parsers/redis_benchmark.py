"""redis-benchmark `--csv` output -> per-test requests/s and latency (ms). Pure.

redis-benchmark 7 prints one CSV row per test after a header:
  "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",...
Its errors go to the same streams as free text ("Could not connect to Redis at ...",
"Error: ..."); a run that printed no row for a test, a rate of 0 or "inf" (the run took
less than one tick of its millisecond clock), is a SanityError: no number without a run.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass

from isotax.model import SanityError

HEADER = ("test", "rps", "avg_latency_ms", "min_latency_ms", "p50_latency_ms",
          "p95_latency_ms", "p99_latency_ms", "max_latency_ms")

# Lines redis-benchmark prints when something went wrong (it may still exit 0, or hang).
_ERRORS = re.compile(r"^(Could not connect.*|Error.*|ERR.*|.*Connection refused.*|"
                     r".*Connection reset.*|Writing to socket.*|Server closed.*)$",
                     re.MULTILINE)


@dataclass(frozen=True)
class RedisTest:
    test: str  # "SET", "GET"
    rps: float
    avg_ms: float
    min_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


def parse_redis_benchmark(text: str) -> dict[str, RedisTest]:
    """Every test row, by test name; SanityError on an error line or no usable row."""
    err = _ERRORS.search(text)
    if err:
        raise SanityError(f"redis-benchmark: {err.group(0).strip()[:200]}")
    tests: dict[str, RedisTest] = {}
    header_seen = False
    for row in csv.reader(line for line in text.splitlines() if line.startswith('"')):
        if tuple(row) == HEADER:
            header_seen = True
            continue
        if not header_seen or len(row) != len(HEADER):
            raise SanityError(f"redis-benchmark: unexpected CSV row {','.join(row)[:120]!r} "
                              "(is it redis-benchmark 7 with --csv?)")
        try:
            nums = [float(v) for v in row[1:]]
        except ValueError:
            raise SanityError(f"redis-benchmark: not a number in {row!r}") from None
        name, rps = row[0], nums[0]
        if not math.isfinite(rps) or rps <= 0:
            raise SanityError(f"redis-benchmark: {name} rate is {row[1]}: the test ran for less "
                              "than its 1 ms clock tick or not at all; raise `requests`")
        if not all(math.isfinite(v) and v >= 0 for v in nums[1:]):
            raise SanityError(f"redis-benchmark: {name} latency is not a number: {row!r}")
        tests[name] = RedisTest(name, *nums)
    if not tests:
        raise SanityError("redis-benchmark printed no results (no --csv rows): "
                          f"{text.strip()[:200]!r}")
    return tests


def parse_redis_version(text: str) -> str:
    """'redis-benchmark 7.0.15' -> '7.0.15'."""
    m = re.search(r"redis-benchmark\s+(\S+)", text)
    if not m:
        raise ValueError(f"no redis-benchmark version in {text.strip()[:80]!r}")
    return m.group(1)
