"""fio's JSON (`--output-format=json+`) -> samples: bandwidth, IOPS and completion latency.

What fio prints: one document with a `jobs` list. isotax runs fio with `group_reporting=1`,
so `jobs` holds one entry that sums every job of the group (numjobs clients). Per direction
("read", "write") the entry carries io_bytes, bw_bytes (bytes/s), iops, runtime (ms) and
clat_ns: completion latency in ns with mean, `percentile` (the `--percentile_list` points) and,
with json+, `bins` (histogram: bucket value in ns -> count; fio's buckets are log-linear, 64 per
power of two, so a bucket is within ~1.6% of the true latency).

fio may print lines before the document on stdout (e.g. "fio: pid=..., err=22/..." when a job
fails), so the document is found by its first line that is exactly "{".

Samples, per direction that did I/O: {dir}_bw (MB/s, 10^6 bytes), {dir}_iops, and
{dir}_clat_mean / _p50 / _p99 / _p999 (µs, lower is better). The latency CDF from the json+
bins goes into the labels of the {dir}_clat_p50 sample as `clat_cdf_us`: a compact list of
[latency µs, cumulative fraction] points, thinned to at most ~80 (isotax.parsers.distributions), for
the report's CDF figure; a sample holds one number, so the distribution rides along as a label.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from isotax.model import Sample, SanityError
from isotax.parsers import distributions

DIRECTIONS = ("read", "write")
# The percentiles isotax asks for (fio allows at most 20): a CDF outline even without json+.
PERCENTILES = (1, 5, 10, 20, 30, 40, 50, 60, 70, 75, 80, 90, 95, 99, 99.5, 99.9, 99.95, 99.99)
PERCENTILE_LIST = ":".join(f"{p:g}" for p in PERCENTILES)
# Reported latency points: sample metric suffix -> fio's percentile key.
LATENCY_POINTS = {"p50": "50.000000", "p99": "99.000000", "p999": "99.900000"}


def parse_fio_json(text: str) -> dict[str, Any]:
    """The JSON document in fio's stdout; SanityError when there is none."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == "{"), None)
    if start is None:
        first = text.strip().splitlines()[:1] or ["no output"]
        raise SanityError(f"fio printed no JSON: {first[0][:200]}")
    try:
        doc = json.loads("".join(lines[start:]))
    except ValueError as e:
        raise SanityError(f"fio's JSON does not parse: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SanityError("fio's JSON has no jobs list")
    return doc


def fio_version(doc: Mapping[str, Any]) -> str:
    """'fio-3.33' -> '3.33'."""
    return str(doc.get("fio version", "")).removeprefix("fio-")


def job_error(doc: Mapping[str, Any]) -> str | None:
    """Why a job failed, in fio's words (errno and name), or None when every job is clean."""
    for job in doc["jobs"]:
        err = int(job.get("error", 0))
        if err:
            return f"fio job {job.get('jobname', '?')} failed: error {err} ({_strerror(err)})"
    return None


def _strerror(err: int) -> str:
    try:
        return os.strerror(err)
    except ValueError:
        return "unknown"


def clat_cdf(bins: Mapping[str, int]) -> list[list[float]]:
    """[[µs, cumulative fraction], ...] from fio's json+ histogram (bucket ns -> count),
    thinned as isotax.parsers.distributions does for every latency CDF."""
    return distributions.thin((int(k) / 1000, int(v)) for k, v in bins.items())


def fio_samples(text: str, labels: Mapping[str, Any] | None = None) -> list[Sample]:
    """Samples from fio's JSON output, after its sanity checks: a document with exactly one
    (group-reported) job, no job error, some I/O done over a positive runtime."""
    doc = parse_fio_json(text)
    if (err := job_error(doc)) is not None:
        raise SanityError(err)
    jobs = doc["jobs"]
    if len(jobs) != 1:
        raise SanityError(f"expected one group-reported fio job, got {len(jobs)} "
                          "(run fio with group_reporting=1)")
    job = jobs[0]
    base = {**(labels or {}), "fio": fio_version(doc)}
    out: list[Sample] = []
    for d in DIRECTIONS:
        st = job.get(d) or {}
        if int(st.get("io_bytes", 0)) <= 0:
            continue
        if int(st.get("runtime", 0)) <= 0:
            raise SanityError(f"fio {d}: {st['io_bytes']} bytes in a runtime of 0 ms")
        clat = st.get("clat_ns") or {}
        pct = clat.get("percentile") or {}
        missing = [k for k in LATENCY_POINTS.values() if k not in pct]
        if "mean" not in clat or missing:
            raise SanityError(f"fio {d}: no completion latency percentiles "
                              f"(missing {', '.join(missing) or 'mean'})")
        out.append(Sample(f"{d}_bw", st["bw_bytes"] / 1e6, "MB/s", True, base))
        out.append(Sample(f"{d}_iops", float(st["iops"]), "IOPS", True, base))
        out.append(Sample(f"{d}_clat_mean", clat["mean"] / 1000, "µs", False, base))
        for name, key in LATENCY_POINTS.items():
            lab = dict(base)
            if name == "p50":
                lab["clat_cdf_us"] = (clat_cdf(clat["bins"]) if clat.get("bins") else
                                      [[pct[k] / 1000, float(k) / 100] for k in sorted(
                                          pct, key=float)])
            out.append(Sample(f"{d}_clat_{name}", pct[key] / 1000, "µs", False, lab))
    if not out:
        raise SanityError("fio did no I/O (io_bytes 0 in every direction)")
    return out
