"""What every OCI runtime's command line shares, whoever drives it (the oci plugin directly, the
engines through their shims): its version line, and its words for "no such program". Below the
plugins, so that none imports another's (the import contract in pyproject.toml)."""

from __future__ import annotations

import re

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
