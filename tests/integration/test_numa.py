"""NUMA placement for real: a native environment bound by numactl, and what the runner says
where a node or kind cannot."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support import ran, started

from isotax.analysis.report_data import analyze
from isotax.host.facts.numa import (
    nodes,
)
from isotax.image.artifacts import ImageArtifacts


@pytest.mark.integration
def test_native_bound_to_a_node_runs_under_numactl(image: ImageArtifacts, tmp_path: Path) -> None:
    if shutil.which("numactl") is None:
        pytest.skip("numactl is not installed (scripts/setup.sh installs it)")
    from isotax import protocols
    from isotax.protocols import EnvSpec

    inst = protocols.environments()["native"]().start(EnvSpec(
        name="numa", kind="native", image=image, workdir=tmp_path, numa_node=0))
    try:
        done = inst.exec(["head", "-1", "/proc/self/numa_maps"], 10).check()
        assert " bind:0 " in done.stdout and done.argv[0] == "head"
        assert "node 0" in inst.facts().display()["numa"]
    finally:
        inst.stop()
    with started("numa-free", "native", "host", image, tmp_path / "free") as free:
        assert " default " in free.exec(["head", "-1", "/proc/self/numa_maps"], 10).stdout


PLAN = """
name = "numa"
repetitions = 1
warmups = 0
parity = "flag"
[[environments]]
name = "native"
kind = "native"
numa_node = 0
[[environments]]
name = "far"
kind = "native"
numa_node = 63
optional = true  # (the CLI refuses it at load) the runner skips it at start, with the reason
[[environments]]
name = "runc-pinned"
kind = "runc"
numa_node = 0
[[workloads]]
name = "density"
params = { max_instances = 1, settle_s = 0.0 }
"""


@pytest.mark.integration
def test_runner_says_why_a_placement_cannot_run(image: ImageArtifacts, tmp_path: Path) -> None:
    if shutil.which("numactl") is None:
        pytest.skip("numactl is not installed (scripts/setup.sh installs it)")
    from isotax.host.facts.fingerprint import fingerprint

    with ran(PLAN, image, tmp_path, host=fingerprint()) as (store, run_id):
        envs = {e.name: e for e in store.environments(run_id)}
        assert envs["native"].available
        if 63 not in nodes():
            assert "NUMA node 63 does not exist here" in envs["far"].reason
        # runc binds the container's cpuset to the node, and says so
        assert envs["runc-pinned"].available, envs["runc-pinned"].reason
        assert "(cpuset)" in envs["runc-pinned"].describe.lines()["numa"]
        d = analyze(store, run_id)
    if len(nodes()) == 1:
        assert any("one NUMA node" in w for w in d.warnings)
