"""NUMA placement: parsers on this host's real node files and the local share."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support import DATA

from isotax.host.facts.numa import (
    counters,
    local_share,
    nodes,
    numactl_prefix,
    parse_cpulist,
    parse_numastat,
)


def test_cpulists() -> None:
    assert parse_cpulist((DATA / "numa" / "node0-cpulist.txt").read_text()) == [0, 1]
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == []


def test_numastat_of_a_real_node() -> None:
    c = parse_numastat((DATA / "numa" / "node0-numastat.txt").read_text())
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
        shutil.copy(DATA / "numa" / "node0-numastat.txt", d / "numastat")
    (tmp_path / "possible").write_text("0-1\n")  # not a node directory
    assert nodes(tmp_path) == {0: [0, 1], 1: [2, 3]}
    assert set(counters(tmp_path)) == {0, 1}
    assert numactl_prefix(None) == [] and numactl_prefix(1)[-1] == "--membind=1"
