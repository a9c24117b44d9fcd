"""`isotax system tune` / `reset` once for real on this host (root)."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest
from support import requires_root_and, snapshot

from isotax.host.tune import (
    ABSENT,
    host_profile,
    reset,
    tune,
)


@pytest.mark.integration
@requires_root_and(root_for="tuning the host")
def test_tune_and_reset_this_host(tmp_path: Path) -> None:
    """Tune this host and reset it: every knob file reads afterwards exactly as before. Runs
    one at a time across concurrent test sessions (another session's snapshot must not see
    this one's tuned values)."""
    root = Path("/")
    state = tmp_path / "tune-state.json"
    lock = Path("/run/isotax/itx-tune-test.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        knobs = host_profile(root)
        before = snapshot(root, [k.path for k in knobs])
        try:
            report = tune(root, state)
            during = snapshot(root, [k.path for k in knobs])
        finally:
            if state.exists():  # tune saved the values: put them back whatever happened
                back = reset(root, state)
        after = snapshot(root, [k.path for k in knobs])
    assert after == before
    assert back.ok and not state.exists()
    assert report.ok, [r.text() for r in report.refused]
    res = {r.knob.name: r for r in report.results}
    aslr = res["ASLR"]
    assert aslr.after == "0" and during["proc/sys/kernel/randomize_va_space"] == b"0\n"
    assert during["proc/sys/kernel/perf_event_paranoid"] == b"-1\n"
    gov = [r for r in report.results if r.knob.group == "governor"]
    if all(before[r.knob.path] is None for r in gov):  # this Firecracker VM: no cpufreq
        assert all(r.outcome == ABSENT and "no cpufreq driver" in r.reason for r in gov)
    else:
        assert all(r.after == "performance" for r in gov if before[r.knob.path] is not None)
