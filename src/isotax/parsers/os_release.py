"""os-release(5): the file that names a host's distribution (/etc/os-release, else
/usr/lib/os-release). Pure."""

from __future__ import annotations

import re
import shlex

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_os_release(text: str) -> dict[str, str]:
    """{KEY: value} of an os-release text. Values are shell-quoted (double or single quotes,
    backslash escapes) as os-release(5) says; comments, blank lines and lines that are no
    assignment are skipped. A value that shlex cannot read (an unbalanced quote) is kept as
    written, less its outer quotes."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, raw = line.partition("=")
        if not sep or not _KEY.match(key):
            continue
        try:
            words = shlex.split(raw, posix=True)
            value = words[0] if len(words) == 1 else " ".join(words)
        except ValueError:
            value = raw.strip("\"'")
        out[key] = value
    return out
