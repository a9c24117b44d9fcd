"""Run a host command with a timeout that kills its whole process group.

subprocess.run's timeout kills only the child it started: a shell's or a runtime's own children
(a `sh -c` pipeline, runc's init, QEMU's helpers) survive it and keep the pipes open, so the
caller hangs on reading them. Here the command starts in a new session and, on timeout, the
whole group is sent SIGKILL before the pipes are drained. Every host command isotax runs with a
time limit goes through `run`. A process outside the group can still hold the pipes (a process
`runsc exec` started inside gVisor's sandbox, whose stdio the sandbox keeps): `drain` then
gives up on them after a grace period instead of waiting for an end that never comes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from isotax.host.owners import ENV_VAR as OWNER_VAR
from isotax.protocols import Completed

TIMED_OUT = 124  # as coreutils' timeout reports it
NOT_FOUND = 127  # as a shell reports it


def owned_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    """A command's own environment still names its owner (host.owners): a server it leaves
    running after a crash is then known as the dead run's, and removed."""
    if env is None:
        return None
    owner = os.environ.get(OWNER_VAR)
    return {**env, OWNER_VAR: owner} if owner else dict(env)


def run(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
        cwd: str | None = None, input: str | None = None,
        preexec: Callable[[], None] | None = None) -> Completed:
    """Run argv on the host; never raises for a failing command: a timeout is exit status 124
    (its group killed), a missing program 127, with the reason in stderr. preexec runs in the
    child before it executes argv (crun's private mount namespace, for one)."""
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
            env=owned_env(env), start_new_session=True,
            preexec_fn=preexec)
    except (FileNotFoundError, PermissionError) as e:
        return Completed(tuple(argv), NOT_FOUND, "", str(e), time.monotonic() - t0)
    try:
        out, err = proc.communicate(input, timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = drain(proc)
        rc, err = TIMED_OUT, f"timed out after {timeout:.0f} s"
    except BaseException:
        kill_group(proc)  # Ctrl-C: leave nothing of it running
        proc.wait()
        raise
    return Completed(tuple(argv), rc, out or "", err or "", time.monotonic() - t0)


def kill_group(proc: subprocess.Popen[str] | subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group `proc` leads (started with start_new_session=True)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


# How long a killed command's pipes may take to close before drain gives up on them.
DRAIN_GRACE_S = 10.0


def drain(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """What a command whose group was killed still had to say, read until its pipes close or
    DRAIN_GRACE_S seconds pass; then the pipes are closed unread and ("", "") is
    what it said: a process outside its group holds them (gVisor's sandbox keeps the stdio
    of what `runsc exec` started in it), and without the limit the caller waited for ever."""
    try:
        out, err = proc.communicate(timeout=DRAIN_GRACE_S)
        return out or "", err or ""
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        proc.wait()
        return "", ""
