"""stream: STREAM copy/scale/add/triad (inside hpcc 1.5.0) in GB/s: memory bandwidth.

Variant "star" (default) is what this workload calls the machine's memory bandwidth: every
MPI rank (one per CPU by default) streams at the same time between barriers, and hpcc's
per-rank rate times the number of ranks is the bandwidth all cores draw together - the number
a container or VM could lower. "single" (one rank streams, the others wait) measures one
core's bandwidth, which on a small machine is often nearly the same number and hides
contention. Array size follows HPL's N (see workloads/hpcc.py): each of the 3 vectors holds
N^2/(3*ranks) doubles per rank; the quick N measures cache-resident bandwidth.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from isotax.model import Sample
from isotax.parsers.hpcc import STREAM_VARIANTS, stream_samples
from isotax.protocols import Params, ParamSpec
from isotax.workloads import hpcc
from isotax.workloads.base import register


@register
class Stream(hpcc.HpccWorkload):
    name: ClassVar[str] = "stream"
    description: ClassVar[str] = "STREAM from HPC Challenge, all ranks at once; GB/s"
    params: ClassVar[Sequence[ParamSpec]] = (
        *hpcc.common_params(hpcc.QUICK_N, "HPL's N, which sizes STREAM's arrays "
                            "(3 vectors of N^2/(3*ranks) doubles per rank)"),
        ParamSpec("variant", str, "star", "star (all ranks at once, summed) or single (one rank)",
                  choices=STREAM_VARIANTS),
    )

    def samples(self, result: hpcc.HpccRun, params: Params) -> list[Sample]:
        variant = str(hpcc.param(params, self.params, "variant"))
        return stream_samples(result.output, variant, result.labels())
