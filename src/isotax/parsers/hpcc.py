"""HPC Challenge (hpcc 1.5.0) output: `hpccoutf.txt` text -> summary dict -> checked Samples.

Pure functions only. hpcc writes a human-readable section per test ("Begin of X section." ...
"End of X section.") and, when every test has finished, a machine-readable "Summary section"
of key=value lines: the numbers come from there, the verdicts partly from the sections (the
summary has no STREAM or Star/Single RandomAccess error counts).

Sanity before performance: every `*_samples` function first checks that the run is complete
(summary present and closed) and that hpcc's own overall verdict is `Success=1` (it is 0 when
any test failed its numerical check), then checks its own test in detail, and raises
`SanityError(reason)` instead of returning a number from a failed run.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from isotax.model import Sample, SanityError
from isotax.parsers.cpuinfo import parse_cpuinfo_first

SUMMARY_BEGIN = "Begin of Summary section."
SUMMARY_END = "End of Summary section."

# hpcc's RandomAccess verification passes when at most 1% of the table is wrong (updates may
# race by design: "errors" are lost updates); hpcc itself sets Success=0 above this.
RA_ERROR_FRACTION_MAX = 0.01

STREAM_KERNELS = ("copy", "scale", "add", "triad")
STREAM_VARIANTS = ("star", "single")
RA_VARIANTS = ("star", "single", "mpi")


def parse_summary(text: str) -> dict[str, str]:
    """The key=value pairs of hpcc's summary section; SanityError if it is missing or cut off
    (a run killed or crashed before HPCC_Finalize never writes the end marker)."""
    begin = text.rfind(SUMMARY_BEGIN)  # hpcc appends: the last run in the file counts
    if begin < 0:
        raise SanityError("hpcc output has no summary section: the run did not finish")
    end = text.find(SUMMARY_END, begin)
    if end < 0:
        raise SanityError("hpcc summary section is not closed: the output is incomplete")
    out: dict[str, str] = {}
    for line in text[begin + len(SUMMARY_BEGIN):end].splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key:
            out[key] = value.strip()
    if not out:
        raise SanityError("hpcc summary section is empty")
    return out


def number(summary: Mapping[str, str], key: str) -> float:
    """A numeric summary value; a missing or non-numeric one is a sanity failure."""
    raw = summary.get(key)
    if raw is None:
        raise SanityError(f"hpcc summary lacks {key}")
    try:
        return float(raw)
    except ValueError:
        raise SanityError(f"hpcc summary {key}={raw!r} is not a number") from None


def section(text: str, name: str) -> str:
    """The text of one test's section (the last one, as hpcc appends), e.g. 'StarSTREAM'."""
    begin_marker, end_marker = f"Begin of {name} section.", f"End of {name} section."
    begin = text.rfind(begin_marker)
    if begin < 0:
        raise SanityError(f"hpcc output has no {name} section")
    end = text.find(end_marker, begin)
    if end < 0:
        raise SanityError(f"hpcc {name} section is not closed: the output is incomplete")
    return text[begin + len(begin_marker):end]


def check_run(text: str) -> dict[str, str]:
    """Complete output and hpcc's overall verdict; returns the summary."""
    summary = parse_summary(text)
    if number(summary, "Success") != 1:
        raise SanityError("hpcc reports Success=0: at least one test failed its own check")
    return summary


def _nodes_with_error(sec: str, name: str) -> None:
    m = re.search(r"Node\(s\) with error (\d+)", sec)
    if m is None:
        raise SanityError(f"hpcc {name} section has no error count")
    if int(m.group(1)) != 0:
        raise SanityError(f"hpcc {name}: {m.group(1)} process(es) reported an error")


# ---------------------------------------------------------------------------- HPL


def hpl_scaled_residual(summary: Mapping[str, str]) -> float:
    """HPL 2.0's check, ||Ax-b||_oo / (eps * (||A||_oo * ||x||_oo + ||b||_oo) * N), recomputed
    from the summary's norms (the summary has no residual line of its own)."""
    denom = (number(summary, "HPL_eps")
             * (number(summary, "HPL_AnormI") * number(summary, "HPL_XnormI")
                + number(summary, "HPL_BnormI"))
             * number(summary, "HPL_N"))
    if denom <= 0:
        raise SanityError("HPL norms in the summary are not positive: HPL did not run")
    return number(summary, "HPL_RnormI") / denom


def hpl_threshold(text: str) -> float:
    """The residual threshold HPL announced (hpccinf.txt line 13, printed with one decimal)."""
    m = re.search(r"scaled residuals are less than\s+([0-9.eE+-]+)", section(text, "HPL"))
    if m is None:
        raise SanityError("HPL section does not state its residual threshold")
    return float(m.group(1))


def check_hpl(text: str, summary: Mapping[str, str]) -> float:
    """HPL's own PASSED/FAILED counts, then the residual against the threshold; returns it."""
    sec = section(text, "HPL")
    passed = re.search(r"(\d+) tests completed and passed residual checks", sec)
    failed = re.search(r"(\d+) tests completed and failed residual checks", sec)
    skipped = re.search(r"(\d+) tests skipped because of illegal input values", sec)
    if passed is None or failed is None:
        raise SanityError("HPL section has no residual-check counts")
    if int(failed.group(1)) or re.search(r"\.\.\.\.\.\. FAILED", sec):
        raise SanityError(f"HPL: {failed.group(1)} test(s) failed the residual check")
    if skipped is not None and int(skipped.group(1)):
        raise SanityError(f"HPL: {skipped.group(1)} test(s) skipped for illegal input values")
    if int(passed.group(1)) < 1:
        raise SanityError("HPL: no test passed the residual check")
    residual, threshold = hpl_scaled_residual(summary), hpl_threshold(text)
    if not residual < threshold:
        raise SanityError(f"HPL scaled residual {residual:.4g} is not below {threshold:g}")
    return residual


def hpl_samples(text: str, labels: Mapping[str, Any] | None = None) -> list[Sample]:
    """metric "hpl" in GFLOPS (hpcc's summary gives Tflops: x 1000)."""
    summary = check_run(text)
    residual = check_hpl(text, summary)
    tflops = number(summary, "HPL_Tflops")
    if tflops <= 0:
        raise SanityError(f"HPL_Tflops={tflops:g}: HPL did not run")
    lab = {
        "n": int(number(summary, "HPL_N")),
        "nb": int(number(summary, "HPL_NB")),
        "processes": int(number(summary, "CommWorldProcs")),
        "grid": f"{int(number(summary, 'HPL_nprow'))}x{int(number(summary, 'HPL_npcol'))}",
        "hpl_time_s": number(summary, "HPL_time"),
        "scaled_residual": float(f"{residual:.6g}"),
        **dict(labels or {}),
    }
    return [Sample("hpl", tflops * 1e3, "GFLOPS", True, lab)]


# ---------------------------------------------------------------------------- STREAM


def check_stream(text: str, variant: str) -> None:
    """STREAM validates its arrays on every rank after the Star run ("Solution Validates");
    the Single run reports only whether its rank failed."""
    star = section(text, "StarSTREAM")
    if "Solution Validates" not in star:
        raise SanityError("StarSTREAM did not validate its arrays")
    _nodes_with_error(star, "StarSTREAM")
    if variant == "single":
        _nodes_with_error(section(text, "SingleSTREAM"), "SingleSTREAM")


def stream_samples(text: str, variant: str = "star",
                   labels: Mapping[str, Any] | None = None) -> list[Sample]:
    """metrics copy/scale/add/triad in GB/s (10^9 bytes/s, as STREAM counts).

    variant "star": every rank streams at once between barriers; hpcc reports the per-rank
    rate, so it is multiplied by the number of ranks: the bandwidth of the whole machine.
    variant "single": one rank streams while the others wait: one core's bandwidth.
    """
    if variant not in STREAM_VARIANTS:
        raise ValueError(f"STREAM variant must be one of {', '.join(STREAM_VARIANTS)}")
    summary = check_run(text)
    check_stream(text, variant)
    procs = int(number(summary, "CommWorldProcs"))
    scale = procs if variant == "star" else 1
    prefix = "StarSTREAM_" if variant == "star" else "SingleSTREAM_"
    lab = {
        "n": int(number(summary, "HPL_N")),
        "nb": int(number(summary, "HPL_NB")),
        "processes": procs,
        "variant": variant,
        "vector_size": int(number(summary, "STREAM_VectorSize")),
        **dict(labels or {}),
    }
    samples = []
    for kernel in STREAM_KERNELS:
        key = prefix + kernel.capitalize()
        value = number(summary, key)
        if value <= 0:
            raise SanityError(f"{key}={value:g}: STREAM did not run")
        samples.append(Sample(kernel, value * scale, "GB/s", True, lab))
    return samples


# ---------------------------------------------------------------------------- RandomAccess


def check_randomaccess(text: str, summary: Mapping[str, str], variant: str) -> None:
    if variant == "mpi":
        frac = number(summary, "MPIRandomAccess_ErrorsFraction")
        if not 0 <= frac <= RA_ERROR_FRACTION_MAX:
            raise SanityError(f"MPIRandomAccess error fraction {frac:g} is not in "
                              f"[0, {RA_ERROR_FRACTION_MAX}]")
        return
    star = section(text, "StarRandomAccess")
    m = re.search(r"Found (\d+) errors in (\d+) locations \((passed|failed)\)", star)
    if m is None:
        raise SanityError("StarRandomAccess section has no verification line")
    errors, locations = int(m.group(1)), int(m.group(2))
    if m.group(3) != "passed" or errors > RA_ERROR_FRACTION_MAX * locations:
        raise SanityError(f"StarRandomAccess: {errors} errors in {locations} locations")
    _nodes_with_error(star, "StarRandomAccess")
    if variant == "single":
        _nodes_with_error(section(text, "SingleRandomAccess"), "SingleRandomAccess")


def randomaccess_samples(text: str, variant: str = "star",
                         labels: Mapping[str, Any] | None = None) -> list[Sample]:
    """metric "gups" in GUP/s (10^9 table updates per second).

    variant "star": every rank updates its own table at once; hpcc reports the average per
    rank, multiplied here by the ranks: the machine's random-update rate, no MPI in the loop.
    variant "single": one rank alone. variant "mpi": hpcc's global G-RandomAccess, one table
    spread over all ranks, updates sent as MPI messages (measures the MPI path as much as RAM).
    """
    if variant not in RA_VARIANTS:
        raise ValueError(f"RandomAccess variant must be one of {', '.join(RA_VARIANTS)}")
    summary = check_run(text)
    check_randomaccess(text, summary, variant)
    procs = int(number(summary, "CommWorldProcs"))
    if variant == "mpi":
        key, scale, table = "MPIRandomAccess_GUPs", 1, "MPIRandomAccess_N"
    elif variant == "star":
        key, scale, table = "StarRandomAccess_GUPs", procs, "RandomAccess_N"
    else:
        key, scale, table = "SingleRandomAccess_GUPs", 1, "RandomAccess_N"
    value = number(summary, key)
    if value <= 0:
        raise SanityError(f"{key}={value:g}: RandomAccess did not run")
    lab = {
        "n": int(number(summary, "HPL_N")),
        "nb": int(number(summary, "HPL_NB")),
        "processes": procs,
        "variant": variant,
        "table_words": int(number(summary, table)),
        **dict(labels or {}),
    }
    return [Sample("gups", value * scale, "GUP/s", True, lab)]


# ---------------------------------------------------------------------------- libraries


def parse_ldd(text: str) -> dict[str, str]:
    """`ldd` output -> {soname: resolved path}; a library ldd could not find maps to ''."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(not found|\S+)", line)
        if m:
            out[m.group(1)] = "" if m.group(2) == "not found" else m.group(2)
    return out


def parse_openblas_core(stdout: str) -> str:
    """The kernel set OpenBLAS chose at load time (printed with OPENBLAS_VERBOSE=2, once per
    rank as "Core: SkylakeX"); '' if none was printed, 'mixed' if ranks disagree."""
    cores = set(re.findall(r"^Core: (\S+)", stdout, re.MULTILINE))
    if not cores:
        return ""
    return cores.pop() if len(cores) == 1 else "mixed"


# Why hpcc dies with SIGILL on QEMU's qemu64 model (see tests/data/hpcc-sigill): it claims to
# be an AMD family 15 with SSE3, so OpenBLAS (DYNAMIC_ARCH) picks its Opteron kernels, which use
# the 3DNow! instruction femms; qemu64 does not advertise 3DNow!, and no current CPU has it, so
# the same happens under hardware KVM.
OPTERON_3DNOW_REASON = (
    "the CPU model claims to be an AMD family {family} ({model}) without 3DNow!, so OpenBLAS "
    "picks its Opteron kernels (Core: {core}), which use the 3DNow! instruction femms: SIGILL, "
    "here and under KVM on any current CPU; give the VM an Intel-vendor or named model (e.g. "
    "options.cpu_model = \"kvm64\", \"qemu64,vendor=GenuineIntel\" or \"Nehalem\")")


def why_sigill(cpuinfo: str, blas_core: str) -> str | None:
    """Why hpcc got SIGILL when it is the known OpenBLAS dispatch trap (an AMD-looking CPU
    without 3DNow! given the Opteron kernels); None for any other SIGILL. Pure."""
    cpu = parse_cpuinfo_first(cpuinfo)
    flags = set(cpu.get("flags", "").split())
    if (blas_core.lower().startswith("opteron") and cpu.get("vendor_id") == "AuthenticAMD"
            and "3dnow" not in flags):
        return OPTERON_3DNOW_REASON.format(family=cpu.get("cpu family", "?"),
                                           model=cpu.get("model name", "?"), core=blas_core)
    return None


_OPEN_MPI_VERSION = re.compile(r"\(Open MPI\)\s+(\d+)\.(\d+)(?:\.(\d+))?")


def parse_mpirun_version(text: str) -> tuple[int, int, int]:
    """`mpirun --version` -> Open MPI's (major, minor, patch): "mpirun (Open MPI) 4.1.4" on
    Debian 12, "mpirun (Open MPI) 5.0.7" on Debian 13. SanityError for any other mpirun (MPICH's
    Hydra, say, where the mpirun alternative points elsewhere): the hpcc command is Open MPI's."""
    m = _OPEN_MPI_VERSION.search(text)
    if not m:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        raise SanityError(f"mpirun is not Open MPI (it says {first[:120]!r}); fix: install "
                          "openmpi-bin and point the mpirun alternative at mpirun.openmpi")
    return int(m[1]), int(m[2]), int(m[3] or 0)
