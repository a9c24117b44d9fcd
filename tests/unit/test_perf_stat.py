"""perf stat: the -x, parser on real captures (perf 6.1 on this PMU-less Firecracker guest)."""

from __future__ import annotations

import pytest
from support import DATA

from isotax.model import SanityError
from isotax.parsers.perf_stat import find_counter, parse_perf_stat


def capture(name: str) -> str:
    return (DATA / "perf-stat" / name).read_text()


def test_cycles_not_supported_and_task_clock_counted() -> None:
    cs = parse_perf_stat(capture("root-cycles-task-clock-sleep1.csv"))
    assert [c.event for c in cs] == ["cycles", "task-clock"]
    cyc = find_counter(cs, "cycles")
    assert cyc is not None and cyc.value is None and cyc.status == "not supported"
    tc = find_counter(cs, "task-clock")
    assert tc is not None and tc.status == "counted" and tc.unit == "msec"
    # sleep 1 on 2 CPUs, host-wide: about 2000 ms of CPU clock, and perf's run time agrees.
    assert tc.value is not None and 1900 < tc.value < 2200
    assert tc.run_time_ns is not None and tc.run_time_ns / 1e6 == pytest.approx(tc.value, 1e-3)
    assert tc.percent == 100.0


def test_sigint_stopped_and_control_enabled_runs() -> None:
    for name in ("root-cycles-task-clock-sigint.csv", "root-task-clock-control-enable.csv"):
        tc = find_counter(parse_perf_stat(capture(name)), "task-clock")
        assert tc is not None and tc.value is not None and 1900 < tc.value < 2200, name


def test_unprivileged_cycles_drop_to_user_only() -> None:
    c = find_counter(parse_perf_stat(capture("nobody-cycles.csv")), "cycles")
    assert c is not None and c.event == "cycles:u" and c.base_event == "cycles"
    assert c.value is None and c.status == "not supported"


def test_refused_run_has_no_counters() -> None:
    assert parse_perf_stat(capture("nobody-task-clock-denied.csv")) == []
    assert "perf_event_paranoid" in capture("nobody-task-clock-denied.stderr")


def test_not_csv_is_a_sanity_failure() -> None:
    # perf stat without -x, (the human table) is not what isotax asks for.
    with pytest.raises(SanityError, match="not a -x, counter line"):
        parse_perf_stat(" Performance counter stats for 'system wide':\n")
