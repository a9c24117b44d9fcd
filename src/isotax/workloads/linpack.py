"""linpack: HPL (inside hpcc 1.5.0, OpenBLAS) in GFLOPS: the studies' Linpack run.

Driven by workloads/hpcc.py, which explains why the whole HPCC suite runs (hpcc cannot select
tests) and how N sizes it. Only HPL's result is kept, after HPL's residual check passed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from isotax.environments.base import Instance
from isotax.model import Sample
from isotax.parsers.hpcc import hpl_samples
from isotax.workloads import hpcc
from isotax.workloads.base import LoadGen, Params, ParamSpec, register


@register
class Linpack:
    name: ClassVar[str] = "linpack"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "HPL from HPC Challenge (hpcc + OpenBLAS, MPI); GFLOPS"
    params: ClassVar[Sequence[ParamSpec]] = hpcc.common_params(
        hpcc.QUICK_N, "HPL matrix order N (memory N^2*8 bytes; HPL work 2/3 N^3 flops)")
    tools: ClassVar[Mapping[str, Sequence[str]]] = hpcc.TOOLS
    needs_loadgen: ClassVar[bool] = False

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        hpcc.check_tools(inst)

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        result = hpcc.run_hpcc(inst, hpcc.config_from(inst, params, self.params))
        return hpl_samples(result.output, result.labels())
