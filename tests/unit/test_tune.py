"""`isotax system tune` / `reset`: on synthetic /proc + /sys trees shaped like the real files
(tests/data/host holds this host's captures), and the CLI's refusal when not root."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import DATA, ROOT, snapshot

from isotax.cli import main
from isotax.host.facts.numa import format_cpulist
from isotax.host.tune import (
    ABSENT,
    ALREADY,
    CHANGED,
    REFUSED,
    Knob,
    TuneError,
    display_rows,
    knobs_from_state,
    plan,
    profile,
    reset,
    tune,
)

CAPTURE = DATA / "host" / "this-host"
REAL_CPUINFO = (CAPTURE / "proc/cpuinfo").read_text()  # has the hypervisor flag
# The plain (non-selector) knob files of a bare-metal host, in the kernel's shapes ("%d\n").
BARE_PLAIN = {
    "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "powersave\n",
    "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor": "powersave\n",
    "sys/devices/system/cpu/cpu2/cpufreq/scaling_governor": "powersave\n",
    "sys/devices/system/cpu/cpu3/cpufreq/scaling_governor": "performance\n",
    "sys/devices/system/cpu/intel_pstate/no_turbo": "0\n",
    "proc/sys/kernel/randomize_va_space": "2\n",
    "proc/sys/kernel/perf_event_paranoid": "4\n",
    "proc/sys/kernel/nmi_watchdog": "1\n",
}
THP = "sys/kernel/mm/transparent_hugepage/"


def _put(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def bare_metal(root: Path) -> Path:
    """A 4-CPU host with intel_pstate, THP always, all the sysctls."""
    for rel, text in BARE_PLAIN.items():
        _put(root, rel, text)
    _put(root, "sys/devices/system/cpu/online", "0-3\n")
    _put(root, "proc/cpuinfo", REAL_CPUINFO.replace(" hypervisor", ""))
    _put(root, THP + "enabled", "[always] madvise never\n")
    _put(root, THP + "defrag", "always defer defer+madvise [madvise] never\n")
    return root


def test_cpulist_and_grouped_rows() -> None:
    assert format_cpulist([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    knobs = profile([0, 1, 2, 3], vm=False, turbo_file="no_turbo")
    from isotax.host.tune import Result
    gov = [k for k in knobs if k.group == "governor"]
    results = [Result(gov[0], "powersave", "performance", CHANGED),
               Result(gov[1], "powersave", "performance", CHANGED),
               Result(gov[2], "performance", "performance", ALREADY),
               Result(gov[3], "powersave", "performance", CHANGED)]
    assert display_rows(results) == [
        ("governor cpu0-1,3", "powersave", "performance", "changed"),
        ("governor cpu2", "performance", "performance", "already so")]


def test_plan_from_current_values() -> None:
    knobs = profile([0], vm=True, turbo_file=None)
    by = {k.group: k for k in knobs}
    current = {k.path: (None, "") for k in knobs}
    current[by["ASLR"].path] = ("2", "")
    current[by["perf_event_paranoid"].path] = ("-1", "")
    current[by["THP enabled"].path] = (None, "cannot read x: Permission denied (EACCES)")
    writes, known = plan(knobs, current)
    assert writes == [by["ASLR"]]
    outcome = {r.knob.group: (r.outcome, r.reason) for r in known}
    assert outcome["governor"] == (ABSENT, "no cpufreq driver in this VM (the hypervisor sets "
                                           "the frequency)")
    assert outcome["turbo"][0] == ABSENT and "in this VM" in outcome["turbo"][1]
    assert outcome["perf_event_paranoid"] == (ALREADY, "")
    assert outcome["THP enabled"] == (REFUSED, "cannot read x: Permission denied (EACCES)")


def test_state_file_entries_are_checked() -> None:
    with pytest.raises(ValueError, match="not an isotax tune state"):
        knobs_from_state({"knobs": []})
    bad = {"isotax_tune_state": 1, "knobs": [{"path": "/etc/passwd", "value": "x"}]}
    with pytest.raises(ValueError, match="bad knob entry"):
        knobs_from_state(bad)
    ok = {"isotax_tune_state": 1, "knobs": [{"group": "ASLR", "path": "proc/sys/kernel/"
                                             "randomize_va_space", "value": "2"}]}
    assert knobs_from_state(ok) == [Knob("ASLR", "proc/sys/kernel/randomize_va_space", "2")]


# --- synthetic trees --------------------------------------------------------------------------

def test_tune_writes_saves_first_and_reset_restores(tmp_path: Path) -> None:
    root = bare_metal(tmp_path / "root")
    state = tmp_path / "state" / "tune-state.json"
    before = snapshot(root, [*BARE_PLAIN, THP + "enabled", THP + "defrag"])

    report = tune(root, state)
    assert report.ok and not report.absent
    got = {r.knob.name: (r.before, r.after, r.outcome) for r in report.results}
    assert got["governor cpu0"] == ("powersave", "performance", CHANGED)
    assert got["governor cpu3"] == ("performance", "performance", ALREADY)
    assert got["turbo"] == ("0", "1", CHANGED)
    assert got["THP enabled"] == ("always", "madvise", CHANGED)
    assert got["THP defrag"] == ("madvise", "madvise", ALREADY)
    assert got["ASLR"] == ("2", "0", CHANGED)
    assert got["perf_event_paranoid"] == ("4", "-1", CHANGED)
    assert got["nmi_watchdog"] == ("1", "0", CHANGED)
    assert (root / "proc/sys/kernel/randomize_va_space").read_text() == "0\n"
    # The state holds the values from before, each existing knob's.
    saved = {k["path"]: k["value"] for k in json.loads(state.read_text())["knobs"]}
    assert saved["proc/sys/kernel/perf_event_paranoid"] == "4"
    assert saved[THP + "enabled"] == "always"
    assert len(saved) == len(BARE_PLAIN) + 2

    back = reset(root, state)
    assert back.ok and not state.exists() and not back.state_kept
    assert {r.knob.name: r.outcome for r in back.results}["turbo"] == CHANGED
    after = snapshot(root, list(before))
    # Plain files come back byte for byte. A THP selector is a plain file here, so it holds the
    # word written back, not the kernel's bracketed list (the real test below checks those
    # byte for byte on the kernel's own files).
    assert {r: after[r] for r in BARE_PLAIN} == {r: before[r] for r in BARE_PLAIN}
    assert after[THP + "enabled"] == b"always\n"
    assert after[THP + "defrag"] == before[THP + "defrag"]  # never written: it was madvise


def test_nothing_written_when_the_state_cannot_be_saved(tmp_path: Path) -> None:
    root = bare_metal(tmp_path / "root")
    before = snapshot(root, list(BARE_PLAIN))
    (tmp_path / "file").write_text("")
    with pytest.raises(TuneError, match="nothing was changed"):
        tune(root, tmp_path / "file" / "state.json")  # its directory is a file
    assert snapshot(root, list(BARE_PLAIN)) == before


def test_second_tune_refused_unless_forced(tmp_path: Path) -> None:
    root = bare_metal(tmp_path / "root")
    state = tmp_path / "state.json"
    tune(root, state)
    original = state.read_bytes()
    with pytest.raises(TuneError, match="isotax system reset"):
        tune(root, state)
    assert state.read_bytes() == original  # the original values survive
    forced = tune(root, state, force=True)
    assert all(r.outcome == ALREADY for r in forced.results)
    saved = {k["path"]: k["value"] for k in json.loads(state.read_text())["knobs"]}
    assert saved["proc/sys/kernel/randomize_va_space"] == "0"  # what --force means


def test_missing_knobs_on_a_vm_capture(tmp_path: Path) -> None:
    """This host's capture: no cpufreq, no turbo switch, no sysctl files in the capture."""
    root = tmp_path / "root"
    shutil.copytree(CAPTURE, root)
    report = tune(root, tmp_path / "state.json")
    assert report.ok
    res = {r.knob.name: r for r in report.results}
    for cpu in ("cpu0", "cpu1"):
        assert res[f"governor {cpu}"].outcome == ABSENT
        assert res[f"governor {cpu}"].text() == ("could not change: no cpufreq driver in this "
                                                  "VM (the hypervisor sets the frequency)")
    assert res["turbo"].outcome == ABSENT and "no intel_pstate/no_turbo" in res["turbo"].reason
    assert res["ASLR"].text() == "could not change: kernel without kernel.randomize_va_space"
    assert res["THP enabled"].outcome == ALREADY  # the capture's madvise
    assert not (root / "sys/devices/system/cpu/cpu0/cpufreq").exists()  # nothing created


def test_write_refused_by_the_kernel(tmp_path: Path) -> None:
    """A knob file the kernel offers read-only: the tree's nmi_watchdog is this host's real
    /proc/sys/kernel/osrelease (mode 0444; procfs refuses root too)."""
    root = bare_metal(tmp_path / "root")
    (root / "proc/sys/kernel/nmi_watchdog").unlink()
    (root / "proc/sys/kernel/nmi_watchdog").symlink_to("/proc/sys/kernel/osrelease")
    state = tmp_path / "state.json"
    report = tune(root, state)
    assert not report.ok
    (r,) = report.refused
    assert r.knob.group == "nmi_watchdog"
    assert r.reason == ("write refused: Permission denied (EACCES) (the kernel offers it "
                        "read-only)")
    assert r.text().startswith("could not change: write refused")
    assert reset(root, state).ok  # the refused knob still equals its saved value


def test_reset_without_or_with_a_broken_state(tmp_path: Path) -> None:
    with pytest.raises(TuneError, match=r"no saved state at .*isotax system tune"):
        reset(tmp_path, tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(TuneError, match=r"cannot read .*bad\.json"):
        reset(tmp_path, tmp_path / "bad.json")


def test_reset_keeps_the_state_when_a_value_cannot_go_back(tmp_path: Path) -> None:
    root = bare_metal(tmp_path / "root")
    state = tmp_path / "state.json"
    tune(root, state)
    (root / "sys/devices/system/cpu/cpu2/cpufreq/scaling_governor").unlink()  # CPU offlined
    back = reset(root, state)
    assert not back.ok and state.exists() and back.state_kept
    (r,) = back.refused
    assert r.knob.name == "governor cpu2" and "is gone since tune" in r.reason
    assert (root / "proc/sys/kernel/randomize_va_space").read_text() == "2\n"  # others back


# --- the command line -------------------------------------------------------------------------

def test_cli_tune_and_reset(tmp_path: Path) -> None:
    root = bare_metal(tmp_path / "root")
    state = str(tmp_path / "state.json")
    runner = CliRunner()
    out = runner.invoke(main, ["system", "tune", "--root", str(root), "--state", state])
    assert out.exit_code == 0, out.output
    assert re.search(r"governor cpu0-2 +│ powersave +│ performance +│ changed +│", out.output)
    assert "tuned: every knob this host has is set" in out.output
    again = runner.invoke(main, ["system", "tune", "--root", str(root), "--state", state])
    assert again.exit_code == 2 and "run `isotax system reset` first" in again.output
    back = runner.invoke(main, ["system", "reset", "--root", str(root), "--state", state])
    assert back.exit_code == 0 and "restored: every saved value is back" in back.output
    none = runner.invoke(main, ["system", "reset", "--root", str(root), "--state", state])
    assert none.exit_code == 2
    assert none.output.strip().splitlines() == [
        f"isotax: no saved state at {state}: nothing to reset (it is written by `isotax system "
        "tune`; pass --state FILE if it saved elsewhere)"]


def test_cli_says_what_the_host_lacks(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(CAPTURE, root)
    out = CliRunner().invoke(main, ["system", "tune", "--root", str(root), "--state",
                                    str(tmp_path / "s.json")])
    assert out.exit_code == 0, out.output
    assert ("not on this host (the table says why): ASLR, governor, nmi_watchdog, "
            "perf_event_paranoid, turbo") in out.output


def test_cli_refused_write_exits_1(tmp_path: Path) -> None:
    root = bare_metal(tmp_path / "root")
    (root / "proc/sys/kernel/nmi_watchdog").unlink()
    (root / "proc/sys/kernel/nmi_watchdog").symlink_to("/proc/sys/kernel/osrelease")
    out = CliRunner().invoke(main, ["system", "tune", "--root", str(root), "--state",
                                    str(tmp_path / "s.json")])
    assert out.exit_code == 1 and "tune: could not set nmi_watchdog" in out.output


def test_cli_not_root_is_one_line() -> None:
    """Run as an ordinary user; as root, as nobody (setpriv)."""
    drop: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root, and no setpriv to run the command as another user")
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    out = subprocess.run([*drop, sys.executable, "-c", "from isotax.cli import main; main()",
                          "system", "tune"],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == ("isotax: tune writes /proc/sys and /sys: run it as root "
                                  "(sudo isotax system tune)")
