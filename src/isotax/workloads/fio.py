"""fio: block I/O on the environment's storage path (bandwidth, IOPS, completion latency).

The tool is Debian bookworm's fio 3.33 (the image's, and the host's for native runs), run in
`Instance.data_dir`: a directory on the plan's storage path ("volume" or "rootfs", see each
environment's describe()["storage"]), always on the host's disk, never tmpfs. The command
line is the same in every environment; only the directory differs.

I/O mode: libaio with direct=1 (O_DIRECT, the page cache bypassed: what the studies measure)
where the filesystem allows it. prepare() probes that with a tiny direct job; a filesystem that
refuses O_DIRECT (EINVAL) gets psync + buffered I/O instead, and every sample says so in its
labels (`direct`, `ioengine`, `io_note`) so the report cannot mix the two silently. Any other
probe failure (say io_uring forbidden) fails the cell with fio's own words.

Files: prepare() lays out numjobs files of size_mib each with `--create_only=1`, so that reads
read written blocks rather than holes (which ext4 answers without touching the disk). They are
named after their size (`itx-fio-<size>m.<job>.0`) and reused by every parameter set of that
size and by every repetition; they live under the instance's workdir (a host directory, an
overlay upper directory or a VM disk file), so stopping the instance removes them.

fio runs with group_reporting=1 (one result for all numjobs jobs), time_based (runtime_s after
ramp_s, whatever the file size), randrepeat=1 (the same random offsets everywhere) and
`--output-format=json+`, whose latency histogram gives the CDF kept with the p50 sample.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from isotax.model import Sample, SanityError
from isotax.parsers.fio import PERCENTILE_LIST, fio_samples, job_error, parse_fio_json
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
from isotax.workloads.base import BaseWorkload, register

PATTERNS = ("read", "write", "randread", "randwrite", "randrw")
BLOCK_SIZES = ("512", "1k", "2k", "4k", "8k", "16k", "32k", "64k", "128k", "256k", "512k",
               "1m", "2m", "4m")
IOENGINES = ("libaio", "io_uring", "psync", "sync", "posixaio")
FALLBACK_ENGINE = "psync"
# Filesystems that live in memory: a disk workload there would measure memcpy.
MEMORY_FS = ("tmpfs", "ramfs")


def _param(params: Params, specs: Sequence[ParamSpec], name: str) -> Any:
    spec = next(s for s in specs if s.name == name)
    value = params.get(name, spec.default)
    if (problem := spec.problem(value)) is not None:
        raise ValueError(f"fio parameter {name} = {problem}")
    return spec.type(value)


def job_name(size_mib: int) -> str:
    """fio's job name, which names the files: one set of files per size."""
    return f"itx-fio-{size_mib}m"


def fio_argv(directory: str, p: Mapping[str, Any], ioengine: str, direct: int) -> list[str]:
    """The measuring fio command line (golden-tested); p holds every parameter resolved."""
    argv = [
        "fio", "--output-format=json+", f"--name={job_name(p['size_mib'])}",
        f"--directory={directory}", f"--ioengine={ioengine}", f"--direct={direct}",
        f"--rw={p['pattern']}", f"--bs={p['bs']}", f"--iodepth={p['iodepth']}",
        f"--numjobs={p['numjobs']}", f"--size={p['size_mib']}m",
        "--time_based=1", f"--runtime={p['runtime_s']}", f"--ramp_time={p['ramp_s']}",
        "--group_reporting=1", "--randrepeat=1", f"--percentile_list={PERCENTILE_LIST}",
    ]
    if p["pattern"] == "randrw":
        argv.append(f"--rwmixread={p['rwmixread']}")
    return argv


def layout_argv(directory: str, size_mib: int, numjobs: int) -> list[str]:
    """Writes the job files (and does nothing else) so reads find real blocks."""
    return ["fio", "--output-format=json", f"--name={job_name(size_mib)}",
            f"--directory={directory}", f"--size={size_mib}m", f"--numjobs={numjobs}",
            "--create_only=1"]


def probe_argv(directory: str, ioengine: str) -> list[str]:
    """A 64 KiB direct write: does this filesystem take O_DIRECT with this engine?"""
    return ["fio", "--output-format=json", "--name=itx-fio-probe", f"--directory={directory}",
            f"--ioengine={ioengine}", "--direct=1", "--rw=write", "--bs=4k", "--size=1m",
            "--io_size=64k"]


def direct_refused(output: str) -> bool:
    """fio's words when a filesystem refuses O_DIRECT (open or the first I/O: EINVAL)."""
    return "Invalid argument" in output or "does not support direct" in output


@register
class Fio(BaseWorkload):
    name: ClassVar[str] = "fio"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ("fio block I/O on the environment's storage path (volume or "
                                  "rootfs): MB/s, IOPS, completion latency mean/p50/p99/p99.9")
    params: ClassVar[Sequence[ParamSpec]] = (
        ParamSpec("pattern", str, "randread", "fio rw=: read, write, randread, randwrite, "
                  "randrw", choices=PATTERNS),
        ParamSpec("bs", str, "4k", "block size", choices=BLOCK_SIZES),
        ParamSpec("iodepth", int, 16, "I/Os in flight per job (async engines)", minimum=1),
        ParamSpec("numjobs", int, 1, "parallel jobs, each on its own file (the studies' "
                  "clients: 1, 8, 64)", minimum=1),
        ParamSpec("rwmixread", int, 70, "percent reads for randrw", minimum=0),
        ParamSpec("size_mib", int, 64, "file size per job, MiB", minimum=1),
        ParamSpec("runtime_s", int, 10, "measured seconds (after the ramp)", minimum=1),
        ParamSpec("ramp_s", int, 2, "seconds run before measuring", minimum=0),
        ParamSpec("ioengine", str, "libaio", "fio ioengine", choices=IOENGINES),
        ParamSpec("direct", int, 1, "1: O_DIRECT where the filesystem allows it (else "
                  "psync, buffered, labelled); 0: buffered", choices=(0, 1)),
    )
    tools: ClassVar[Mapping[str, Sequence[str]]] = {
        "fio": ("dpkg-query", "-W", "-f=${Version}", "fio"),
    }
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[Mapping[str, Port]] = {}
    packages: ClassVar[Sequence[str]] = ("fio",)
    # A CDF per direction: its title says read or write (the metric's first word).
    figures: ClassVar[FigureHints] = FigureHints(bars=True, concurrency=("numjobs", "iodepth"),
                                                 cdf_direction=True)

    def in_flight(self, params: Params) -> int:
        return int(params["iodepth"])

    def host_needs(self, params: Params) -> Needs:
        """numjobs files of size_mib each, on the host's disk (whatever the storage path)."""
        return Needs(disk=Need(int(params["numjobs"]) * int(params["size_mib"]) * 2**20,
                               ("numjobs", "size_mib"), "fio's files"))

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str] | None:
        """fio's I/Os in the measured window: IOPS x runtime, reads and writes."""
        ios = sum(s.value for s in samples if s.metric.endswith("_iops"))
        return (ios * params["runtime_s"], "I/O") if ios > 0 else None

    def _resolved(self, params: Params) -> dict[str, Any]:
        p = {s.name: _param(params, self.params, s.name) for s in self.params}
        if p["rwmixread"] > 100:
            raise ValueError(f"fio parameter rwmixread = {p['rwmixread']} is above 100")
        return p

    @staticmethod
    def _mode_file(inst: Instance, p: Mapping[str, Any]) -> str:
        return f"{inst.data_dir}/itx-fio-{p['ioengine']}-d{p['direct']}.mode"

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        p = self._resolved(params)
        d = inst.data_dir
        if inst.exec(["fio", "--version"], 60).returncode == 127:
            raise SanityError("fio is not installed in the environment (native: apt-get "
                              "install fio; otherwise rebuild the image)")
        inst.exec(["mkdir", "-p", d], 60).check()
        fs = inst.exec(["stat", "-f", "-c", "%T", d], 60).check().stdout.strip()
        if fs in MEMORY_FS:
            raise SanityError(f"data directory {d} is on {fs}: a disk workload needs a disk "
                              "(the environment's data_dir must not be in memory)")
        mode = {"ioengine": p["ioengine"], "direct": p["direct"], "fs": fs, "io_note": ""}
        if p["direct"]:
            probe = inst.exec(probe_argv(d, p["ioengine"]), 300)
            out = probe.stdout + probe.stderr
            err = None
            if probe.returncode == 0:
                try:
                    err = job_error(parse_fio_json(probe.stdout))
                except SanityError as e:
                    err = str(e)
            if probe.returncode != 0 or err:
                if not direct_refused(out):
                    tail = " | ".join(out.strip().splitlines()[-3:])
                    raise SanityError(f"fio probe ({p['ioengine']}, direct=1) failed in {d}: "
                                      f"{err or tail}")
                mode.update(ioengine=FALLBACK_ENGINE, direct=0,
                            io_note=f"{fs} in {d} refuses O_DIRECT: psync, buffered")
            inst.exec(["rm", "-f", f"{d}/itx-fio-probe.0.0"], 60)
        inst.exec(layout_argv(d, p["size_mib"], p["numjobs"]), 120 + p["size_mib"]
                  * p["numjobs"] / 10).check()
        inst.exec(["sh", "-c", 'printf %s "$1" > "$2"', "sh", json.dumps(mode),
                   self._mode_file(inst, p)], 60).check()

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        p = self._resolved(params)
        try:
            mode = json.loads(inst.exec(["cat", self._mode_file(inst, p)], 60).check().stdout)
        except ValueError as e:
            raise SanityError(f"fio: the mode prepare() wrote is unreadable: {e}") from e
        argv = fio_argv(inst.data_dir, p, mode["ioengine"], mode["direct"])
        # fio stops itself after ramp + runtime; the margin covers its start (slow under TCG).
        r = inst.exec(argv, p["ramp_s"] + p["runtime_s"] + 120)
        if r.returncode != 0:
            try:  # a failed job explains itself in the JSON better than the exit status
                err = job_error(parse_fio_json(r.stdout))
            except SanityError:
                err = None
            tail = " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:])
            raise SanityError(f"fio exited {r.returncode}: {err or tail} ({shlex.join(argv)})")
        labels = {"ioengine": mode["ioengine"], "direct": mode["direct"], "fs": mode["fs"],
                  "data_dir": inst.data_dir}
        if mode["io_note"]:
            labels["io_note"] = mode["io_note"]
        return fio_samples(r.stdout, labels)
