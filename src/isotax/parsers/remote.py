"""What a load generator reached over SSH tells about itself and its link, as pure parsers:
the probe script's key=value lines, the shell's `times` after a client (its CPU time), dpkg's
package versions, `ip route get` (which link leads there), ping's round-trip summary."""

from __future__ import annotations

import re
from dataclasses import dataclass

# `times` prints two lines, the shell's own and its children's user and system time, as
# "0m0.160000s 0m0.000000s" (dash) or "0m0.160s 0m0.000s" (bash).
_TIMES = re.compile(r"^(\d+)m([\d.]+)s\s+(\d+)m([\d.]+)s$")
_RTT = re.compile(r"(?:rtt|round-trip) min/avg/max(?:/(?:mdev|stddev))? = "
                  r"([\d.]+)/([\d.]+)/([\d.]+)(?:/([\d.]+))? ms")
_LOSS = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")


def parse_key_values(text: str) -> dict[str, str]:
    """`key=value` lines (the first `=` splits; later lines win); other lines ignored."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and " " not in key:
            out[key.strip()] = value.strip()
    return out


def parse_children_times(text: str) -> float:
    """The children's user + system CPU seconds from the shell builtin `times` (its second
    line). ValueError when the text is not `times` output."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) != 2:
        raise ValueError(f"`times` prints two lines, got {len(lines)}: {text[:80]!r}")
    m = _TIMES.match(lines[1])
    if not m:
        raise ValueError(f"not a `times` line: {lines[1][:80]!r}")
    um, us, sm, ss = m.groups()
    return int(um) * 60 + float(us) + int(sm) * 60 + float(ss)


def parse_dpkg_versions(text: str) -> dict[str, str]:
    """package -> version of the installed packages in `dpkg-query -W -f='${Package}
    ${Version} ${db:Status-Abbrev}\\n'` output (status "ii"; with two fields, every line with a
    version counts). A package dpkg does not know is on stderr, so it is simply absent."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 2 and (len(f) == 2 or f[2] == "ii"):
            out[f[0].split(":", 1)[0]] = f[1]  # "pkg:amd64" names the same package
    return out


@dataclass(frozen=True)
class Route:
    """`ip -o route get ADDRESS`: the link a packet to ADDRESS leaves by, and our address
    on it (the source the far end sees)."""

    destination: str
    dev: str
    source: str
    via: str | None


def parse_route_get(text: str) -> Route:
    """The first route of `ip -o -4 route get ADDRESS` output; ValueError without one."""
    words = text.split()
    if not words or "dev" not in words:
        raise ValueError(f"no route in {text.strip()[:100]!r}")
    if words[0] in ("local", "unicast", "broadcast", "multicast"):
        words = words[1:]

    def after(key: str) -> str | None:
        return words[words.index(key) + 1] if key in words[:-1] else None

    return Route(words[0], after("dev") or "", after("src") or "", after("via"))


@dataclass(frozen=True)
class PingSummary:
    transmitted: int
    received: int
    min_ms: float
    avg_ms: float
    max_ms: float
    mdev_ms: float | None


def parse_ping(text: str) -> PingSummary:
    """ping's closing statistics (iputils or busybox); ValueError when no reply came."""
    loss, rtt = _LOSS.search(text), _RTT.search(text)
    if loss is None:
        raise ValueError(f"no ping statistics in {text.strip()[-120:]!r}")
    if rtt is None or int(loss.group(2)) == 0:
        raise ValueError(f"no reply to ping: {loss.group(0)}")
    mn, avg, mx, mdev = rtt.groups()
    return PingSummary(int(loss.group(1)), int(loss.group(2)), float(mn), float(avg),
                       float(mx), float(mdev) if mdev is not None else None)


def parse_ssh_connection(value: str) -> tuple[str, str]:
    """(client address, server address) of $SSH_CONNECTION ("CLIENT CPORT SERVER SPORT"): the
    address the far end sees us by, and its own address on that path."""
    f = value.split()
    if len(f) != 4:
        raise ValueError(f"SSH_CONNECTION {value!r}: expected four fields")
    return f[0], f[2]

