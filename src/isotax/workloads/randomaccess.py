"""randomaccess: HPCC RandomAccess in GUP/s (10^9 random 64-bit table updates per second).

Variant "star" (default): every rank (one per CPU) updates its own table at once, and the
per-rank average times the ranks is the machine's random-update rate. It is chosen because it
keeps MPI out of the timed loop: what it measures is memory latency and address translation
(TLB misses, a VM's two-level page walk), which is where isolation layers can cost something.
"mpi" is hpcc's global G-RandomAccess (one table spread over all ranks, updates shipped as MPI
messages): on one host it mostly measures Open MPI's shared-memory messaging and is very
sensitive to a busy CPU (measured here: 0.001-0.07 GUP/s between runs). "single" is one rank.
Table size follows HPL's N (see workloads/hpcc.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from isotax.model import Sample
from isotax.parsers.hpcc import RA_VARIANTS, randomaccess_samples
from isotax.protocols import Params, ParamSpec
from isotax.workloads import hpcc
from isotax.workloads.base import register


@register
class RandomAccess(hpcc.HpccWorkload):
    name: ClassVar[str] = "randomaccess"
    description: ClassVar[str] = "RandomAccess from HPC Challenge, all ranks at once; GUP/s"
    params: ClassVar[Sequence[ParamSpec]] = (
        *hpcc.common_params(hpcc.QUICK_N, "HPL's N, which sizes the tables "
                            "(largest power of 2 words not above N^2/ranks per rank)"),
        ParamSpec("variant", str, "star",
                  "star (all ranks, summed), single (one rank) or mpi (global, via MPI)",
                  choices=RA_VARIANTS),
    )

    def samples(self, result: hpcc.HpccRun, params: Params) -> list[Sample]:
        variant = str(hpcc.param(params, self.params, "variant"))
        return randomaccess_samples(result.output, variant, result.labels())
