"""fio: the parser on real fio 3.33 output (tests/data/fio) and the command lines."""

from __future__ import annotations

import json

import pytest
from support import DATA

from isotax import protocols
from isotax.model import SanityError
from isotax.parsers.fio import clat_cdf, fio_samples, parse_fio_json
from isotax.workloads.fio import Fio, direct_refused, fio_argv, layout_argv

WORKLOADS = protocols.workloads()



def _text(name: str) -> str:
    return (DATA / "fio" / name).read_text()


def _by_metric(name: str) -> dict[str, float]:
    return {s.metric: s.value for s in fio_samples(_text(name))}


# -- the parser, on real output --------------------------------------------------------------

def test_seq_read_1m() -> None:
    m = _by_metric("seqread-1m.json")
    assert set(m) == {"read_bw", "read_iops", "read_clat_mean", "read_clat_p50",
                      "read_clat_p99", "read_clat_p999"}
    # bw is bytes/s / 1e6; 1 MiB blocks: MB/s = IOPS * 1.048576.
    assert m["read_bw"] == pytest.approx(1742.9, abs=0.1)
    assert m["read_bw"] == pytest.approx(m["read_iops"] * 1.048576, rel=0.01)
    assert m["read_clat_p50"] == pytest.approx(505.856)  # 505856 ns
    assert m["read_clat_p50"] <= m["read_clat_p99"] <= m["read_clat_p999"]


def test_randread_4k_qd16_units_directions_and_labels() -> None:
    samples = fio_samples(_text("randread-4k-qd16.json"), {"fs": "ext2/ext3"})
    m = {s.metric: s for s in samples}
    assert m["read_iops"].value == pytest.approx(83623.188406)
    assert m["read_iops"].unit == "IOPS" and m["read_iops"].higher_is_better
    assert m["read_clat_p99"].value == pytest.approx(301.056)
    assert m["read_clat_p999"].value == pytest.approx(2768.896)
    assert m["read_clat_mean"].unit == "µs" and not m["read_clat_mean"].higher_is_better
    assert not any(k.startswith("write") for k in m)  # no writes done: no write samples
    assert all(s.labels["fio"] == "3.33" and s.labels["fs"] == "ext2/ext3" for s in samples)


def test_cdf_from_json_plus_bins_is_compact_and_consistent() -> None:
    doc = parse_fio_json(_text("randread-4k-qd16.json"))
    clat = doc["jobs"][0]["read"]["clat_ns"]
    assert sum(clat["bins"].values()) == clat["N"]
    p50 = next(s for s in fio_samples(_text("randread-4k-qd16.json"))
               if s.metric == "read_clat_p50")
    cdf = p50.labels["clat_cdf_us"]
    assert 10 < len(cdf) <= 80 < len(clat["bins"])  # thinned, yet a real curve
    lat = [p[0] for p in cdf]
    frac = [p[1] for p in cdf]
    assert lat == sorted(lat) and frac == sorted(frac) and frac[-1] == 1.0
    # The CDF crosses 0.5 where fio says the median is (fio's percentile is a bin value).
    first_half = next(p[0] for p in cdf if p[1] >= 0.5)
    assert first_half == pytest.approx(p50.value, rel=0.05)
    json.dumps(cdf)  # stored as JSON in the sample's labels
    other = [s for s in fio_samples(_text("randread-4k-qd16.json")) if s.metric != "read_clat_p50"]
    assert all("clat_cdf_us" not in s.labels for s in other)


def test_clat_cdf_small_histogram() -> None:
    assert clat_cdf({"1000": 1, "2000": 2, "4000": 1}) == [[1.0, 0.25], [2.0, 0.75], [4.0, 1.0]]
    assert clat_cdf({"1000": 0}) == []


def test_randrw_70_30_has_both_directions() -> None:
    m = _by_metric("randrw-70-qd4-j2.json")
    assert {k.split("_")[0] for k in m} == {"read", "write"}
    share = m["read_iops"] / (m["read_iops"] + m["write_iops"])
    assert share == pytest.approx(0.70, abs=0.02)


def test_seq_write() -> None:
    m = _by_metric("seqwrite-1m.json")
    assert set(k.split("_")[0] for k in m) == {"write"} and m["write_bw"] > 0


def test_job_error_is_a_sanity_failure_with_fios_words() -> None:
    # Real: direct=1 with a 1000-byte block size; fio prints a line before its JSON.
    text = _text("einval.json")
    assert not text.startswith("{")
    with pytest.raises(SanityError, match=r"error 22 \(Invalid argument\)"):
        fio_samples(text)
    assert direct_refused(text + _text("einval.stderr"))


def test_no_json_at_all() -> None:
    # Real: a directory that does not exist; fio stops before any job.
    with pytest.raises(SanityError, match=r"printed no JSON: fio: file:options\.c"):
        fio_samples(_text("nodir.json"))
    with pytest.raises(SanityError, match="no JSON"):
        fio_samples("")


def test_no_io_is_a_sanity_failure() -> None:
    doc = parse_fio_json(_text("seqread-1m.json"))
    doc["jobs"][0]["read"]["io_bytes"] = 0
    with pytest.raises(SanityError, match="did no I/O"):
        fio_samples(json.dumps(doc, indent=1))
    doc = parse_fio_json(_text("seqread-1m.json"))
    doc["jobs"].append(doc["jobs"][0])
    with pytest.raises(SanityError, match="one group-reported"):
        fio_samples(json.dumps(doc, indent=1))


# -- the command lines --------------------------------------------------------------------------

def _resolved(**kw: object) -> dict[str, object]:
    return Fio()._resolved(kw)


def test_fio_argv_golden() -> None:
    p = _resolved(pattern="randrw", bs="4k", iodepth=16, numjobs=8, size_mib=32, runtime_s=5,
                  ramp_s=1)
    assert fio_argv("/mnt", p, "libaio", 1) == [
        "fio", "--output-format=json+", "--name=itx-fio-32m", "--directory=/mnt",
        "--ioengine=libaio", "--direct=1", "--rw=randrw", "--bs=4k", "--iodepth=16",
        "--numjobs=8", "--size=32m", "--time_based=1", "--runtime=5", "--ramp_time=1",
        "--group_reporting=1", "--randrepeat=1",
        "--percentile_list=1:5:10:20:30:40:50:60:70:75:80:90:95:99:99.5:99.9:99.95:99.99",
        "--rwmixread=70",
    ]
    assert "--rwmixread=70" not in fio_argv("/d", _resolved(pattern="read"), "psync", 0)
    # The layout writes the same files the job reads: same name, size, directory, jobs.
    assert layout_argv("/mnt", 32, 8) == [
        "fio", "--output-format=json", "--name=itx-fio-32m", "--directory=/mnt",
        "--size=32m", "--numjobs=8", "--create_only=1"]


def test_params_are_checked() -> None:
    assert "fio" in WORKLOADS
    specs = {s.name: s for s in Fio.params}
    assert specs["pattern"].problem("randrw") is None
    assert specs["pattern"].problem("rw") is not None
    assert specs["bs"].problem("3k") is not None and specs["bs"].problem("1m") is None
    assert specs["numjobs"].problem(0) is not None
    with pytest.raises(ValueError, match="rwmixread = 101"):
        _resolved(rwmixread=101)
    with pytest.raises(ValueError, match="bs"):
        _resolved(bs=4096)
