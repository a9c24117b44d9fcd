"""The host's look at its run (isotax fleet probe): live while the run's shell lives (a PID
reused by another process is not it), done once complete in the store, resume or start
otherwise, error when the store cannot be read; the reason from the run's own last words."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from isotax.fleet import probe
from isotax.fleet.probe import look, why_ended

RUN = "20261124-101010-p-h1-abcd"


def _store(status: str = "", cells: int = 0):  # type: ignore[no-untyped-def]
    return lambda run_id: (status, cells)


def test_a_live_run(tmp_path: Path) -> None:
    # a process whose command line names the run, as the run's shell script does
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", RUN])
    try:
        # (as the run's script does, the PID is written once the process runs as itself)
        while RUN.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
            time.sleep(0.01)
        pid, _, log = probe.files(tmp_path, RUN)
        pid.write_text(f"{proc.pid}\n")
        log.write_text("run ...\nwaiting for run r0 (PID 9) to end: one run measures ...\n")
        x = look(RUN, tmp_path, _store())
        assert (x.live, x.next, x.reason) == (True, "wait", "")
        assert x.waiting.startswith("waiting for run r0 (PID 9)")
        log.write_text("progress: cells 2/8\n")
        x = look(RUN, tmp_path, _store("running", 2))
        assert (x.live, x.cells, x.waiting, x.next) == (True, 2, "", "wait")
        # a store that cannot be read now does not stop a live run being followed
        def down(run_id: str) -> tuple[str, int]:
            raise RuntimeError("cannot reach the PostgreSQL store db (timeout)")
        x = look(RUN, tmp_path, down)
        assert (x.next, x.error) == ("wait", "cannot reach the PostgreSQL store db (timeout)")
        # another run's id: the PID is not this run's
        assert look("20261124-101010-p-h1-ffff", tmp_path, _store()).live is False
    finally:
        proc.kill()
        proc.wait()
    assert look(RUN, tmp_path, _store("running", 2)).live is False


def test_what_next_when_not_live(tmp_path: Path) -> None:
    assert look(RUN, tmp_path, _store()).next == "start"
    assert look(RUN, tmp_path, _store("interrupted", 3)).next == "resume"
    assert look(RUN, tmp_path, _store("running", 3)).next == "resume"  # its process died
    done = look(RUN, tmp_path, _store("complete", 8))
    assert (done.next, done.reason) == ("done", "")
    pid, _, _ = probe.files(tmp_path, RUN)
    pid.write_text(f"{os.getpid()}\n")  # this process: its command line names no run
    assert look(RUN, tmp_path, _store()).next == "start"

    def down(run_id: str) -> tuple[str, int]:
        raise RuntimeError("cannot reach the PostgreSQL store db")
    x = look(RUN, tmp_path, down)
    assert x.next == "error" and "the store could not be read: cannot reach" in x.reason
    doc = json.loads(x.to_json())
    assert doc["next"] == "error" and doc["live"] is False


def test_reasons(tmp_path: Path) -> None:
    _, rc, log = probe.files(tmp_path, RUN)
    rc.write_text("2\n")
    log.write_text("run r\nisotax: plan p.toml: memory_mib 99999 is more than the host's\n")
    assert look(RUN, tmp_path, _store()).reason == \
        "isotax run exited 2: isotax: plan p.toml: memory_mib 99999 is more than the host's"
    rc.write_text("130\n")
    log.write_text("interrupted: resume with `isotax run --resume r`\nprogress: cells 2/8\n")
    assert look(RUN, tmp_path, _store("interrupted", 2)).reason == \
        "its isotax run was interrupted (exit 130), run interrupted"
    rc.unlink()
    assert look(RUN, tmp_path, _store("running", 2)).reason == (
        "its isotax run ended without an exit status (killed, or the host rebooted): "
        "interrupted: resume with `isotax run --resume r`")
    assert why_ended(1, ["Traceback ...", "KeyError: 'x'", "progress: cells 1/2"],
                     "failed") == "isotax run exited 1, run failed: KeyError: 'x'"
    assert why_ended(1, [], "") == "isotax run exited 1"
