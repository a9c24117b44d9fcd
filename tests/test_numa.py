"""NUMA placement: parsers on this host's real node files, the local share, a native
environment really bound by numactl, and what the runner says where a node or kind cannot."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support import ran, started

from isotax.analysis.report_data import analyze
from isotax.host.numa import (
    counters,
    local_share,
    nodes,
    numactl_prefix,
    parse_cpulist,
    parse_numastat,
)
from isotax.image.artifacts import ImageArtifacts

DATA = Path(__file__).parent / "data" / "numa"


def test_cpulists() -> None:
    assert parse_cpulist((DATA / "node0-cpulist.txt").read_text()) == [0, 1]
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []


def test_numastat_of_a_real_node() -> None:
    c = parse_numastat((DATA / "node0-numastat.txt").read_text())
    assert c["local_node"] == c["numa_hit"] == 133482361 and c["other_node"] == 0
    with pytest.raises(ValueError, match="numastat"):
        parse_numastat("numa_hit 5\n")


def test_local_share_over_nodes() -> None:
    before = {0: {"local_node": 100, "other_node": 10}, 1: {"local_node": 50, "other_node": 0}}
    after = {0: {"local_node": 160, "other_node": 30}, 1: {"local_node": 70, "other_node": 0}}
    assert local_share(before, after) == pytest.approx(80 / 100)
    assert local_share(after, after) is None  # nothing allocated


def test_nodes_from_a_sysfs_tree(tmp_path: Path) -> None:
    for n, cpus in ((0, "0-1"), (1, "2-3")):
        d = tmp_path / f"node{n}"
        d.mkdir()
        (d / "cpulist").write_text(cpus + "\n")
        shutil.copy(DATA / "node0-numastat.txt", d / "numastat")
    (tmp_path / "possible").write_text("0-1\n")  # not a node directory
    assert nodes(tmp_path) == {0: [0, 1], 1: [2, 3]}
    assert set(counters(tmp_path)) == {0, 1}
    assert numactl_prefix(None) == [] and numactl_prefix(1)[-1] == "--membind=1"


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
        assert "node 0" in inst.describe()["numa"]
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
    from isotax.host.fingerprint import fingerprint

    with ran(PLAN, image, tmp_path, host=fingerprint()) as (store, run_id):
        envs = {e.name: e for e in store.environments(run_id)}
        assert envs["native"].available
        if 63 not in nodes():
            assert "NUMA node 63 does not exist here" in envs["far"].reason
        # runc binds the container's cpuset to the node, and says so
        assert envs["runc-pinned"].available, envs["runc-pinned"].reason
        assert "(cpuset)" in envs["runc-pinned"].describe["numa"]
        d = analyze(store, run_id)
    if len(nodes()) == 1:
        assert any("one NUMA node" in w for w in d.warnings)
