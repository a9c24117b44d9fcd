"""`perf stat -x,` (CSV) output -> one counter per event. Pure.

Each counter line is `value,unit,event,run time (ns),percentage,metric value,metric unit`;
lines starting with `#` (the "started on" header) and blank lines carry nothing. A counter the
machine cannot count has the value `<not supported>` (no PMU: a VM such as this Firecracker
guest) or `<not counted>` (multiplexed out, or the run ended before it was enabled); those are
kept with value None and the reason in `status`, so callers can say why there is no number.
"""

from __future__ import annotations

from dataclasses import dataclass

from isotax.model import SanityError

_NO_VALUE = {"<not supported>": "not supported", "<not counted>": "not counted"}


@dataclass(frozen=True)
class PerfCounter:
    event: str  # as perf prints it: "cycles", or "cycles:u" when perf dropped kernel counting
    value: float | None  # None when status is not "counted"
    unit: str  # "msec" for task-clock, "" for plain counts
    status: str  # "counted", "not supported" or "not counted"
    run_time_ns: int | None  # how long the counter ran
    percent: float | None  # share of the run it was scheduled (multiplexing), 100.00 if always

    @property
    def base_event(self) -> str:
        """The event without perf's modifiers: "cycles:u" -> "cycles"."""
        return self.event.split(":", 1)[0]


def _opt_float(s: str) -> float | None:
    try:
        return float(s) if s.strip() else None
    except ValueError:
        return None


def parse_perf_stat(text: str) -> list[PerfCounter]:
    """The counters of one `perf stat -x,` output file, in order. Raises SanityError on a line
    that is not a counter line (e.g. output written without -x,)."""
    counters: list[PerfCounter] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = line.split(",")
        if len(f) < 3 or not f[2]:
            raise SanityError(f"perf stat output: not a -x, counter line: {line[:120]!r}")
        raw, unit, event = f[0].strip(), f[1], f[2]
        run_ns = f[3] if len(f) > 3 else ""
        pct = f[4] if len(f) > 4 else ""
        if raw in _NO_VALUE:
            value, status = None, _NO_VALUE[raw]
        else:
            value, status = _opt_float(raw), "counted"
            if value is None:
                raise SanityError(f"perf stat output: {event} has no number: {raw!r}")
        counters.append(PerfCounter(
            event=event, value=value, unit=unit, status=status,
            run_time_ns=int(run_ns) if run_ns.strip().isdigit() else None,
            percent=_opt_float(pct)))
    return counters


def find_counter(counters: list[PerfCounter], event: str) -> PerfCounter | None:
    """The counter of `event` (modifiers ignored: "cycles" finds "cycles:u"), or None."""
    for c in counters:
        if c.event == event or c.base_event == event:
            return c
    return None
