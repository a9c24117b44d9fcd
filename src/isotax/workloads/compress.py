"""compress: parallel xz on an in-memory corpus, output discarded: the studies' PXZ run.

IBM ran PXZ at level 2 with 32 threads on enwik9 cached in RAM, output to /dev/null, and
reported MB/s of input. Here xz's own multithreaded mode (`xz -T`, the successor of PXZ) runs
on a deterministic text-like corpus made by isotax's `itx-corpus` in the environment's tmpfs
scratch, so the bytes are identical in every environment (checked by sha256) and no network
download is needed. The timer (`itx-time`) runs inside the environment, so a container's or
VM's exec path is not counted, only the compression.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import ClassVar

from isotax.model import Sample, SanityError
from isotax.parsers.itx_time import parse_itx_time
from isotax.protocols import (
    FigureHints,
    Instance,
    LoadGen,
    Need,
    Needs,
    Params,
    ParamSpec,
    Port,
)
from isotax.workloads.base import MIB, BaseWorkload, register


@register
class Compress(BaseWorkload):
    name: ClassVar[str] = "compress"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "parallel xz (PXZ-style) on an in-memory text corpus; MB/s"
    params: ClassVar[Sequence[ParamSpec]] = (
        ParamSpec("level", int, 2, "xz preset level (the study used 2)", minimum=0),
        ParamSpec("threads", int, 0, "xz threads; 0 = every CPU the environment has", minimum=0),
        ParamSpec("corpus_mib", int, 64, "corpus size in MiB (the study used 1000)", minimum=1),
        ParamSpec("seed", int, 1, "corpus generator seed", minimum=0),
    )
    tools: ClassVar[Mapping[str, Sequence[str]]] = {
        "xz-utils": ("dpkg-query", "-W", "-f=${Version}", "xz-utils"),
    }
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[Mapping[str, Port]] = {}
    packages: ClassVar[Sequence[str]] = ("xz-utils",)
    figures: ClassVar[FigureHints] = FigureHints(bars=True)

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str]:
        """The corpus read, in GB."""
        return params["corpus_mib"] * MIB / 1e9, "GB"

    def host_needs(self, params: Params) -> Needs:
        """The corpus lives in the environment's tmpfs scratch: in its memory."""
        return Needs(memory=Need(params["corpus_mib"] * MIB, ("corpus_mib",),
                                 "the corpus, kept in a tmpfs"))

    # Same bits everywhere: the corpus digest and the compressed size (xz output is
    # deterministic for a given level, thread count and block size) must agree across
    # environments within one isotax process; a mismatch is a sanity failure.
    _digests: ClassVar[dict[tuple[int, int], str]] = {}
    _sizes: ClassVar[dict[tuple[int, int, int, int], int]] = {}

    def _corpus(self, inst: Instance, params: Params) -> str:
        return f"{inst.scratch}/corpus-{params['corpus_mib']}m-s{params['seed']}"

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        path = self._corpus(inst, params)
        n = params["corpus_mib"] * MIB
        script = (
            f"itx-corpus --bytes {n} --seed {params['seed']} > {shlex.quote(path)}"
            f" && sha256sum {shlex.quote(path)}"
        )
        done = inst.exec(["sh", "-c", script], timeout=600).check()
        digest = done.stdout.split()[0] if done.stdout.split() else ""
        key = (n, params["seed"])
        want = self._digests.setdefault(key, digest)
        if digest != want or len(digest) != 64:
            raise SanityError(f"corpus digest {digest[:12]} differs from {want[:12]} elsewhere")

    def _threads(self, inst: Instance, params: Params) -> int:
        if params["threads"]:
            return int(params["threads"])
        return int(inst.exec(["nproc"], timeout=30).check().stdout.strip())

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        corpus = self._corpus(inst, params)
        threads = self._threads(inst, params)
        timing_file = f"{inst.scratch}/compress-time.json"
        # xz's output goes through a pipe to `wc -c`: cheap, and gives a size to check.
        script = (
            f"itx-time -o {timing_file} -- xz -{params['level']} -T{threads} -c "
            f"{shlex.quote(corpus)} | wc -c; cat {timing_file}"
        )
        done = inst.exec(["sh", "-c", script], timeout=3600)
        if done.returncode != 0:
            raise SanityError(f"xz pipeline exited {done.returncode}: {done.stderr.strip()[:300]}")
        lines = done.stdout.strip().splitlines()
        if len(lines) < 2 or not lines[0].strip().isdigit():
            raise SanityError(f"unexpected output from the xz pipeline: {done.stdout[:200]!r}")
        compressed = int(lines[0])
        timing = parse_itx_time("\n".join(lines[1:]))
        if timing.exit != 0 or timing.signal:
            raise SanityError(f"xz exited {timing.exit} (signal {timing.signal})")
        n = params["corpus_mib"] * MIB
        if not 0 < compressed < n:
            raise SanityError(f"xz produced {compressed} bytes from {n}: not a compression")
        key = (n, params["seed"], params["level"], threads)
        want = self._sizes.setdefault(key, compressed)
        if compressed != want:
            raise SanityError(f"xz output size {compressed} differs from {want} elsewhere")
        labels = {"threads": threads, "compressed_bytes": compressed,
                  "ratio": round(n / compressed, 3)}
        return [
            Sample("throughput", n / timing.wall_s / 1e6, "MB/s", True, labels),
            Sample("cpu_per_mb", timing.cpu_s / (n / 1e6) * 1e3, "CPU-ms/MB", False, labels),
        ]
