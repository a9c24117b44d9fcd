"""/proc/cpuinfo -> the fields of its first processor block. Pure.

The host fingerprint (isotax.host.facts.fingerprint) and the explanation of hpcc's SIGILL in a VM
(isotax.parsers.hpcc) both read the CPU's model, vendor, family and flags from it.
"""

from __future__ import annotations


def parse_cpuinfo_first(text: str) -> dict[str, str]:
    """The fields of the first processor block of /proc/cpuinfo ("vendor_id", "cpu family",
    "flags", ...). Pure."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return out
