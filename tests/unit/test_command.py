"""isotax.host.command.run: a host command with a timeout that kills its whole process group."""

from __future__ import annotations

import time
from pathlib import Path

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
