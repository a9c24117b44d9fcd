"""Where a run's wall time goes, by phase: what run_meta["phases"] keeps (the report's
"Where the time went", isotax.analysis.phases).

Phases: workload (measured runs inside cells), warmup (warm-up cells), prepare (workload
preparation per instance), environments (start, stop, pause, resume, restart), telemetry (the
watching around measured runs and a cell's own bookkeeping), store (commits and run meta),
loadgen (opening and closing the load generator), setup (before the first environment starts)
and other (the rest of the wall time: scheduling and gaps).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from isotax.analysis.phases import STORED_PHASES

# The phases the runner times (isotax.analysis.phases names and describes every one): all
# that run_meta["phases"] stores but "other", which is the wall time they leave.
PHASES = tuple(name for name in STORED_PHASES if name != "other")


class PhaseClock:
    def __init__(self, earlier: Mapping[str, Any] | None = None) -> None:
        # A resumed run adds to what its earlier processes measured.
        self.earlier_wall = float((earlier or {}).get("wall_s") or 0.0)
        self.seconds: dict[str, float] = defaultdict(float)
        for k, v in dict((earlier or {}).get("seconds") or {}).items():
            if k in PHASES and isinstance(v, int | float):
                self.seconds[k] += float(v)
        self.started = time.monotonic()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] += time.monotonic() - t0

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += max(0.0, seconds)

    def meta(self) -> dict[str, Any]:
        wall = self.earlier_wall + time.monotonic() - self.started
        seconds = {k: round(self.seconds.get(k, 0.0), 3) for k in PHASES}
        seconds["other"] = round(max(0.0, wall - sum(seconds.values())), 3)
        return {"wall_s": round(wall, 3), "seconds": seconds}
