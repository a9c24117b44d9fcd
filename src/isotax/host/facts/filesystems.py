"""The host filesystem a directory is on, in words: what an environment's facts say of its
data directory or volume (every kind's storage lives on some host directory)."""

from __future__ import annotations

from pathlib import Path

from isotax.parsers import procfs


def filesystem_of(path: str, mountinfo: str) -> tuple[str, str]:
    """(fstype, source) of the mount holding `path` (absolute, resolved), from mountinfo text:
    the longest mount point that is a prefix; the last one listed wins (it is on top)."""
    best: tuple[int, str, str] = (-1, "unknown", "unknown")
    for m in procfs.parse_mountinfo(mountinfo):
        if not m.source:
            continue
        inside = path == m.point or path.startswith(m.point.rstrip("/") + "/")
        if inside and len(m.point) >= best[0]:
            best = (len(m.point), m.fstype, m.source)
    return best[1], best[2]


def host_storage(path: Path) -> str:
    """"ext4 on /dev/vda": the host filesystem a directory is on, for describe()."""
    try:
        fstype, source = filesystem_of(str(path.resolve()),
                                       Path("/proc/self/mountinfo").read_text())
    except OSError:
        return "unknown filesystem"
    return f"{fstype} on {source}"
