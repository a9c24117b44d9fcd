"""linpack: HPL (inside hpcc 1.5.0, OpenBLAS) in GFLOPS: the studies' Linpack run.

Driven by workloads/hpcc.py, which explains why the whole HPCC suite runs (hpcc cannot select
tests) and how N sizes it. Only HPL's result is kept, after HPL's residual check passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from isotax.model import Sample
from isotax.parsers.hpcc import hpl_samples
from isotax.protocols import Params, ParamSpec
from isotax.workloads import hpcc
from isotax.workloads.base import register


@register
class Linpack(hpcc.HpccWorkload):
    name: ClassVar[str] = "linpack"
    description: ClassVar[str] = "HPL from HPC Challenge (hpcc + OpenBLAS, MPI); GFLOPS"
    params: ClassVar[Sequence[ParamSpec]] = hpcc.common_params(
        hpcc.QUICK_N, "HPL matrix order N (memory N^2*8 bytes; HPL work 2/3 N^3 flops)")

    def samples(self, result: hpcc.HpccRun, params: Params) -> list[Sample]:
        return hpl_samples(result.output, result.labels())
