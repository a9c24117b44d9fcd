"""The quick compress workload, really run through `isotax run` natively, in runc, in crun and
in the QEMU VM (TCG here), then reported; nothing may be left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import requires_root_and

pytestmark = [
    pytest.mark.integration,
    requires_root_and("runc", "crun", "qemu-system-x86_64", "debootstrap"),
]

PLAN = """
name = "itest"
seed = 5
repetitions = 2
warmups = 0
timeout_s = 600
parity = "flag"  # the VM has 1 GiB, the host more: reported, not refused
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
network = "bridge"
[[environments]]
name = "crun"
kind = "crun"
network = "host"
[[environments]]
name = "qemu"
kind = "qemu"
network = "bridge"
vcpus = 2
memory_mib = 1024
[[workloads]]
name = "compress"
params = { corpus_mib = 2, threads = 2 }
"""


def test_compress_everywhere_then_report(tmp_path: Path) -> None:
    from isotax.run.leaks import find_leaks

    before = set(find_leaks())
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN)
    results = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "isotax", "run", str(plan), "--results",
                        str(results)], capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stderr[-3000:]
    (run_dir,) = [d for d in results.iterdir() if d.is_dir()]
    # The run ends by printing where the self-contained HTML report is.
    last = p.stdout.strip().splitlines()[-1]
    assert last == f"HTML report: {run_dir / 'report.html'}", p.stdout[-500:]
    assert ">Summary</h2>" in (run_dir / "report.html").read_text()
    doc = json.loads((run_dir / "results.json").read_text())
    envs = {e["name"]: e for e in doc["environments"]}
    assert all(envs[n]["available"] for n in ("native", "runc", "crun", "qemu")), envs
    thr = [r for r in doc["results"] if r["metric"] == "throughput"]
    assert {r["environment"] for r in thr} == {"native", "runc", "crun", "qemu"}
    assert all(r["n"] == 2 and r["mean"] > 0 for r in thr)
    assert doc["failures"] == []
    # What each environment's own host processes used per run: QEMU runs the whole guest.
    cpu = {c["environment"]: c for c in doc["environment_cpu"]}
    assert set(cpu) == {"native", "runc", "crun", "qemu"}
    assert cpu["qemu"]["by_program_mean_s"]["qemu-system-x86"] > 0.1, cpu["qemu"]
    # ... and what each holds on the host, idle, before any workload
    assert "qemu-system-x86" in envs["qemu"]["describe"]["host_memory"]
    assert "itx-ready" in envs["runc"]["describe"]["host_memory"]
    qemu = envs["qemu"]
    assert qemu["describe"]["accelerator"] in ("kvm", "tcg")
    if qemu["describe"]["accelerator"] == "tcg":
        assert qemu["emulated"]
        md = (run_dir / "report.md").read_text()
        assert "qemu (emulated)" in md and "EMULATED" in md
    # Unequal memory was flagged: what the plan gave the VM and what its guest really has,
    # with advice that can be followed (memory_mib is set already: not "set memory_mib").
    memory = [w for w in doc["warnings"]
              if "unequal resources: qemu was given memory_mib = 1024 (its guest sees" in w]
    assert len(memory) == 1 and "a VM cannot be given all of its host's memory" in memory[0]
    # Same bits everywhere: compress fails a cell whose corpus digest or compressed size
    # differs from another environment's, so no failures above means they all agreed.
    assert set(find_leaks()) <= before
