"""isotax.host.command.run: a host command with a timeout that kills its whole process group."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from isotax.host import command
from isotax.parsers import procfs


def _dead(pid: int) -> bool:
    """Gone, or a zombie (dead, its exit status not yet collected by its new parent)."""
    try:
        return procfs.parse_pid_stat(Path(f"/proc/{pid}/stat").read_text()).state == "Z"
    except OSError:
        return True


def test_a_timeout_kills_the_whole_group() -> None:
    # The shell's background child keeps the pipes open: subprocess.run's timeout would kill
    # only the shell and then wait for it for 30 s.
    t0 = time.monotonic()
    done = command.run(["sh", "-c", "sleep 30 & echo $!; sleep 30"], 1)
    assert time.monotonic() - t0 < 10
    assert done.returncode == command.TIMED_OUT == 124
    assert "timed out after 1 s" in done.stderr
    child = int(done.stdout.split()[0])  # what the command wrote before it was killed
    deadline = time.monotonic() + 5
    while not _dead(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _dead(child)


def test_pipes_held_outside_the_group_do_not_hang_the_caller(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               ) -> None:
    """A process in another session keeps the command's stdout (as gVisor's sandbox keeps what
    `runsc exec` started): killing the group cannot close it; the caller gives up on it after
    the grace period instead of waiting for ever (it had, 12 minutes, in an integration test)."""
    monkeypatch.setattr(command, "DRAIN_GRACE_S", 0.5)
    pidfile = tmp_path / "pid"
    t0 = time.monotonic()
    done = command.run(["sh", "-c", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 30' & "
                        "sleep 30"], 1)
    took = time.monotonic() - t0
    holder = int(pidfile.read_text())
    try:
        assert done.returncode == command.TIMED_OUT
        assert took < 5, took
        assert not _dead(holder)  # still holding the pipe: the case this is about
    finally:
        os.kill(holder, signal.SIGKILL)


def test_a_missing_program_is_127() -> None:
    done = command.run(["itx-no-such-program"], 5)
    assert done.returncode == command.NOT_FOUND == 127
    assert "itx-no-such-program" in done.stderr and done.stdout == ""
    assert done.argv == ("itx-no-such-program",)


def test_input_env_cwd_and_exit_status(tmp_path: Path) -> None:
    done = command.run(["sh", "-c", 'read -r line; echo "$line $X $(pwd)"; exit 3'], 5,
                       env={"X": "from-env", "PATH": "/usr/bin:/bin"}, cwd=str(tmp_path),
                       input="from-stdin\n")
    assert done.returncode == 3
    assert done.stdout == f"from-stdin from-env {tmp_path}\n"
    assert done.wall_s >= 0
    # without input, stdin is /dev/null: a reader gets end-of-file at once, never hangs
    assert command.run(["cat"], 5).stdout == ""
