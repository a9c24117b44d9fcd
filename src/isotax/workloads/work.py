"""How much work one run did, in the unit its cost is quoted in: per GB, per request, per
transaction, per I/O (isotax.analysis.cost divides CPU seconds by it).

A workload says it with an optional `work(params, samples) -> (amount, unit)` method, from
the tool's own counts (bytes xz read, bytes iperf3 received, fio's I/Os, sysbench's
transactions); one without says nothing and is costed per run, which is still a fixed amount
of work when its parameters are fixed (HPCC's suite at one size)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from isotax.model import Sample
from isotax.protocols import Params


def done(workload: Any, params: Params, samples: Sequence[Sample]) -> dict[str, Any]:
    """{"amount": ..., "unit": ...} for one run; per run when the workload cannot tell."""
    how = getattr(workload, "work", None)
    got = how(params, samples) if how is not None else None
    if got is None or got[0] <= 0:
        out: dict[str, Any] = {"amount": 1.0, "unit": "run"}
    else:
        out = {"amount": float(got[0]), "unit": str(got[1])}
    flight = in_flight(workload, params)
    if flight is not None:
        out["in_flight"] = flight
    return out


def in_flight(workload: Any, params: Params) -> int | None:
    """How many requests the workload keeps outstanding at once, where it limits itself so
    (rr: 1 transaction; fio: iodepth; redis: connections x pipeline; mysql: threads); None
    for workloads that run flat out (xz, HPCC). The limiter's latency-bound rule needs it."""
    how = getattr(workload, "in_flight", None)
    return int(how(params)) if how is not None else None


def first(samples: Sequence[Sample], metric: str) -> Sample | None:
    return next((s for s in samples if s.metric == metric), None)
