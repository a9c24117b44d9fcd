"""What every OCI runtime's command line shares, whoever drives it (the oci plugin directly, the
engines through their shims): its version line, and its words for "no such program". Below the
plugins, so that none imports another's (the import contract in pyproject.toml)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from isotax.host import command


def runtime_version(binary: str) -> str:
    """`<binary> --version`'s version: '1.1.5+ds1' for runc 1.1.5+ds1; 'unknown' where it
    prints nothing."""
    p = command.run([binary, "--version"], 10)
    return parse_version((p.stdout.splitlines() or ["unknown"])[0])


def parse_version(first_line: str) -> str:
    """'runc version 1.1.5+ds1' / 'crun version 1.8.1' -> '1.1.5+ds1' / '1.8.1'."""
    m = re.match(r"^\S+ version (\S+)", first_line.strip())
    return m.group(1) if m else first_line.strip()



def under_timeout(argv: Sequence[str], timeout: float) -> list[str]:
    """argv under coreutils' `timeout` inside a container: killing the client that exec'd it
    (an engine's, kubectl) does not stop the program there, so the limit is enforced inside.
    Its 124 is the same "timed out" as a host command's. Pure."""
    return ["/usr/bin/timeout", "--kill-after=3", str(max(1, int(timeout + 0.999))), *argv]


def timed_exit_status(returncode: int, stderr: str) -> int:
    """The exit status of a program run under_timeout through a client: 127 where the client
    says in its own words that the program is missing (the exec failed before `timeout`
    ran), 124 for `timeout`'s KILL after its grace period (137). Pure."""
    if returncode not in (0, 124, 127, 137) and exec_not_found(stderr):
        return 127
    return 124 if returncode == 137 else returncode


def exec_not_found(stderr: str) -> bool:
    """The runtime's words for 'no such program' (runc, crun and runsc say it differently)."""
    # runc: 'exec: "x": executable file not found in $PATH' (or 'exec: "/x": stat /x: no such
    # file or directory'); crun: 'executable file `x` not found in $PATH'; runsc: 'error
    # finding executable "x" in PATH [...]: no such file or directory' (or 'failed to load
    # /x: no such file or directory').
    return bool(re.search(r'executable file (not found|`[^`]*` not found)'
                          r'|exec: \\?"[^"]*": stat [^:]*: no such file'
                          r'|error finding executable "[^"]*" in PATH'
                          r'|in sandbox: failed to load [^:]*: no such file', stderr))
