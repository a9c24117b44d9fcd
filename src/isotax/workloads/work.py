"""How much work one run did, in the unit its cost is quoted in: per GB, per request, per
transaction, per I/O (isotax.analysis.cost divides CPU seconds by it).

A workload says it with its `work(params, samples) -> (amount, unit)` hook, from the tool's
own counts (bytes xz read, bytes iperf3 received, fio's I/Os, sysbench's transactions); the
default (isotax.workloads.base.BaseWorkload) says None, and the run is costed per run, which
is still a fixed amount of work when its parameters are fixed (HPCC's suite at one size).
Its `in_flight(params)` hook says how many requests it keeps outstanding at once, where it
limits itself so (rr: 1 transaction; fio: iodepth; redis: connections x pipeline; mysql:
threads); None (the default) for workloads that run flat out (xz, HPCC). The limiter's
latency-bound rule needs it."""

from __future__ import annotations

from collections.abc import Sequence

from isotax.model import Sample
from isotax.protocols import AnyWorkload, Params
from isotax.telemetry.summary import Work


def done(workload: AnyWorkload, params: Params, samples: Sequence[Sample]) -> Work:
    """The work of one run; 1 "run" when the workload cannot tell, in_flight None when it runs
    flat out."""
    got = workload.work(params, samples)
    flight = workload.in_flight(params)
    in_flight = int(flight) if flight is not None else None
    if got is None or got[0] <= 0:
        return Work(1.0, "run", in_flight)
    return Work(float(got[0]), str(got[1]), in_flight)


def first(samples: Sequence[Sample], metric: str) -> Sample | None:
    return next((s for s in samples if s.metric == metric), None)
