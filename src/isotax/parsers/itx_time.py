"""Parse the one JSON line isotax's guest timer `itx-time` writes about the command it ran."""

from __future__ import annotations

import json
from dataclasses import dataclass

from isotax.model import SanityError


@dataclass(frozen=True)
class Timing:
    wall_s: float
    user_s: float
    system_s: float
    maxrss_kib: int
    exit: int
    signal: int

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.system_s


def parse_itx_time(text: str) -> Timing:
    """The last JSON object line of `text` (itx-time may follow the tool's own stderr)."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                d = json.loads(line)
                return Timing(
                    wall_s=d["wall_ns"] / 1e9,
                    user_s=d["utime_us"] / 1e6,
                    system_s=d["stime_us"] / 1e6,
                    maxrss_kib=int(d["maxrss_kb"]),
                    exit=int(d["exit"]),
                    signal=int(d["signal"]),
                )
            except (ValueError, KeyError, TypeError) as e:
                raise SanityError(f"itx-time output is malformed ({e}): {line[:200]}") from None
    raise SanityError("itx-time wrote no timing line; the command may not have run")
