"""perf stat for real: the cycles detection and background counting."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from isotax.telemetry.counters import cpu_method, perf_counting, perf_cycles, perf_cycles_supported

needs_perf = pytest.mark.skipif(shutil.which("perf") is None,
                                reason="perf is not installed (apt-get install linux-perf)")


@needs_perf
def test_cycles_detection_says_not_supported_here() -> None:
    ok, reason = perf_cycles_supported()
    assert not ok and "not supported" in reason
    assert cpu_method() == f"/proc/stat (perf: {reason})"
    with perf_cycles() as r:
        pass
    assert r.value is None and r.reason == reason


@needs_perf
def test_background_counting_covers_the_body() -> None:
    # task-clock is a software event this host counts: the same background path cycles use.
    with perf_counting("task-clock") as r:
        t0 = time.monotonic()
        time.sleep(1.0)
        window = time.monotonic() - t0
    assert r.reason == "counted" and r.value is not None
    # Host-wide CPU clock of all CPUs over the body only (not perf's start and stop).
    assert r.value == pytest.approx(1000 * (os.cpu_count() or 1) * window, rel=0.05)


@needs_perf
def test_background_counting_failure_is_a_reason() -> None:
    with perf_counting("itx-no-such-event") as r:
        pass
    assert r.value is None and "event syntax error" in r.reason
