"""Telemetry during a run: the /proc parsers on real captures, the summary of a real recorded
run, and a real run through the runner that stores telemetry with every measured cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import ran, requires_root_and, started

from isotax.analysis.report_data import analyze
from isotax.image.artifacts import ImageArtifacts
from isotax.report import json_report, markdown
from isotax.telemetry import cpuacct
from isotax.telemetry.observe import Settings, guest_series, observed
from isotax.telemetry.sampler import (
    GROUPS,
    parse_diskstats,
    parse_net_dev,
    parse_stat,
    parse_task_stat,
    recording_from_json,
    summarize,
)

DATA = Path(__file__).parent / "data"
TEL = DATA / "telemetry"


def test_parse_stat_per_cpu_ctxt_intr() -> None:
    r = parse_stat((TEL / "proc-stat.txt").read_text(), 100.0)
    assert sorted(r.cpus) == ["cpu0", "cpu1"]
    assert all(len(v) == 8 and all(x >= 0 for x in v) for v in r.cpus.values())
    assert r.ctxt > 0 and r.intr > 0
    with pytest.raises(ValueError):
        parse_stat("intr 5\nctxt 3\n")


def test_parse_diskstats_keeps_whole_disks_only() -> None:
    d = parse_diskstats((TEL / "diskstats.txt").read_text())
    assert "vda" in d
    assert not any(n.startswith("loop") for n in d)
    reads, sectors, *_ = d["vda"]
    assert reads > 0 and sectors > 0


def test_parse_net_dev() -> None:
    links = parse_net_dev((TEL / "net-dev.txt").read_text())
    assert "lo" in links and "eth0" in links
    assert all(len(v) == 4 for v in links.values())


def test_parse_task_stat_names_with_spaces_and_parens() -> None:
    first = (TEL / "task-stat.txt").read_text().split("\n\n")[0]
    assert parse_task_stat(first)[0] == "process_api"
    name, ppid, ticks = parse_task_stat((DATA / "proc/stat-paren-comm.txt").read_text())
    assert name == "a) (b" and ppid == 1 and ticks == 0


def test_summary_of_a_recorded_xz_run() -> None:
    """A real recording (0.25 s ticks around `xz -T2` natively, with another tenant's pytest
    on the host at the time): xz's two threads lead, in the inside group, near a full core at
    their busiest; the per-group CPU adds up to what /proc/stat counted host-wide."""
    rec = recording_from_json(json.loads((TEL / "recording-xz-native.json").read_text()))
    s, series = summarize(rec)
    assert s["cpus"] == 2 and 4.5 < s["duration_s"] < 6
    top = s["threads"][:2]
    assert [(t["group"], t["program"]) for t in top] == [("inside", "xz")] * 2
    assert all(t["peak_core_share"] >= 0.9 for t in top)
    assert all(0 <= b <= 1 for b in s["cpu_busy_share"])
    busy = s["host_cpu_s"]["busy"]
    assert busy <= s["cpus"] * s["duration_s"] * 1.02
    grouped = sum(s["groups"][g]["cpu_s"] for g in GROUPS)
    assert 0.85 * busy <= grouped <= 1.05 * busy
    assert s["groups"]["other"]["cpu_s"] > 1  # the other tenant is seen, not blamed on xz
    assert len(series["t"]) == s["ticks"] - 1 == len(series["cpu_busy"])
    assert all(len(row) == 2 for row in series["cpu_busy"])


def test_summary_needs_two_ticks() -> None:
    rec = recording_from_json(json.loads((TEL / "recording-xz-native.json").read_text()))
    rec.ticks = rec.ticks[:1]
    with pytest.raises(ValueError, match="two ticks"):
        summarize(rec)


def test_cpuacct_parsers() -> None:
    assert cpuacct.parse_cpuacct_line("4:memory:/a\n2:cpu,cpuacct:/itx-x\n0::/\n") == "/itx-x"
    assert cpuacct.parse_cpuacct_line("0::/itx-y\n") == "/itx-y"
    assert cpuacct.parse_cpu_stat_usage("usage_usec 2500000\nuser_usec 1\n") == 2.5


@pytest.mark.integration
@requires_root_and("runc")
def test_every_measured_cell_stores_telemetry(image: ImageArtifacts, tmp_path: Path) -> None:
    """native and runc run xz; every measured cell has a summary whose inside CPU comes from
    the environment's cgroup and covers xz's work (what itx-time measured inside). (The native
    group isotax made is checked gone by the suite's leak test.)"""
    plan = """
name = "tel"
repetitions = 2
warmups = 1
[telemetry]
interval_s = 0.2
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
network = "none"
[[workloads]]
name = "compress"
params = { corpus_mib = 8, threads = 2 }
"""
    with ran(plan, image, tmp_path) as (store, run_id):
        cells = {c.id: c for c in store.cells(run_id)}
        tel = store.telemetry(run_id)
        measured = [c for c in cells.values() if not c.key.warmup]
        assert sorted(tel) == sorted(c.id for c in measured)  # warm-ups are not watched
        for cid, s in tel.items():
            c = cells[cid]
            assert "cgroup CPU accounting" in s["inside"]["source"]
            xz_cpu = next(x for x in c.samples if x.metric == "cpu_per_mb").value \
                * 8 * 1.048576 / 1e3
            assert s["inside"]["cpu_s"] >= 0.9 * xz_cpu, (c.key.environment, s["inside"])
            assert s["work"] == {"amount": 8 * 1048576 / 1e9, "unit": "GB"}
            # other tenants of this shared host may top the list: they are "other"
            own = next(t for t in s["threads"] if t["group"] not in ("other", "kernel"))
            assert (own["program"], own["group"]) == ("xz", "inside")
            assert s["programs"]["inside"]["xz"]["rss_max_bytes"] > 1 << 20
            assert store.telemetry_series(cid)["t"]
        # every result carries its cost per unit and its limiter with evidence
        d = analyze(store, run_id)
        point = ("compress", "corpus_mib=8,level=2,seed=1,threads=2")
        for env in ("native", "runc"):
            ex = d.explained[(env, *point)]
            assert ex.repetitions == 2 and ex.cost is not None and ex.cost.unit == "GB"
            assert ex.cost.inside > 0 and ex.limiter.words and ex.limiter.evidence
        md = markdown.render(d)
        section = md.split("## Every result")[1].split("\n## ")[0]
        assert "| runc | " in section and "per GB" in section and "Evidence" in section
        doc = json.loads(json_report.render(d))
        assert {e["environment"] for e in doc["explained"]} == {"native", "runc"}


def test_guest_series_parser() -> None:
    stat = (TEL / "proc-stat.txt").read_text()
    later = "\n".join(
        " ".join([p[0], str(int(p[1]) + 50), *p[2:]]) if p and p[0] == "cpu0" else ln
        for ln in stat.splitlines() for p in [ln.split()])
    text = f"itx-tick 100.00\n{stat}itx-tick 100.50\n{later}\nitx-tick 101.0\ncpu0 1 2"
    gs = guest_series(text)
    assert gs["t"] == [0.5]  # the reading cut off by the kill is dropped
    assert gs["cpu_busy"] == [[1.0, 0.0]]  # cpu0: 50 ticks of user time in 0.5 s


@pytest.mark.integration
@requires_root_and("qemu-system-x86_64")
def test_vm_guest_view_and_tcg_thread(image: ImageArtifacts, tmp_path: Path) -> None:
    """In a VM the environment's own work is what the guest's /proc/stat says, sampled
    inside the guest during the run; the host sees QEMU's vCPU thread (machinery)."""
    with started("vm", "qemu", "none", image, tmp_path) as inst:
        describe = {**inst.describe(), "identity": "vm: test"}
        with observed(inst, describe, None, Settings(0.3, perf=False)) as obs:
            inst.exec(["sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"],
                      300).check()
    s = obs.summary
    assert not obs.error and s["kind_class"] == "vm"
    assert s["inside"]["source"] == "the guest's own /proc/stat"
    assert s["inside"]["cpu_s"] > 0.5 * s["duration_s"]  # one guest CPU kept busy
    assert max(s["guest"]["cpu_busy_peak"]) > 0.8
    assert len(obs.series["guest_t"]) >= 2
    top = s["threads"][0]
    assert top["group"] == "machinery" and top["program"].startswith("qemu")
