"""Telemetry during a real run: a run through the runner that stores telemetry with every
measured cell, and a VM's guest view and TCG thread."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import ran, requires_root_and, started

from isotax.analysis.report_data import analyze
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import Isolation
from isotax.report import json_report, markdown
from isotax.telemetry.observe import Settings, observed
from isotax.telemetry.summary import Work


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
            assert s.inside is not None and "cgroup CPU accounting" in s.inside.source
            xz_cpu = next(x for x in c.samples if x.metric == "cpu_per_mb").value \
                * 8 * 1.048576 / 1e3
            assert s.inside.cpu_s >= 0.9 * xz_cpu, (c.key.environment, s.inside)
            assert s.work == Work(8 * 1048576 / 1e9, "GB")
            # other tenants of this shared host may top the list: they are "other"
            own = next(t for t in s.threads if t.group not in ("other", "kernel"))
            assert (own.program, own.group) == ("xz", "inside")
            assert s.programs is not None
            assert s.programs["inside"]["xz"].rss_max_bytes > 1 << 20
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


@pytest.mark.integration
@requires_root_and("qemu-system-x86_64")
def test_vm_guest_view_and_tcg_thread(image: ImageArtifacts, tmp_path: Path) -> None:
    """In a VM the environment's own work is what the guest's /proc/stat says, sampled
    inside the guest during the run; the host sees QEMU's vCPU thread (machinery)."""
    with started("vm", "qemu", "none", image, tmp_path) as inst, \
            observed(inst, Isolation.VM, None, Settings(0.3, perf=False)) as obs:
        inst.exec(["sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"],
                  300).check()
    s = obs.summary
    assert not obs.error and s is not None and s.kind_class == "vm"
    assert s.inside is not None and s.inside.source == "the guest's own /proc/stat"
    assert s.inside.cpu_s > 0.5 * s.duration_s  # one guest CPU kept busy
    assert s.guest is not None and s.guest.cpu_busy_peak is not None
    assert max(s.guest.cpu_busy_peak) > 0.8
    assert len(obs.series["guest_t"]) >= 2
    top = s.threads[0]
    assert top.group == "machinery" and top.program.startswith("qemu")
