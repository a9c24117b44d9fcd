"""runc and crun environments: pure helpers on real output, and the bundle's config."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import DATA

from isotax import protocols
from isotax.environments.base import parse_ready_marker
from isotax.environments.container_fs import SCRATCH
from isotax.environments.oci.bundle import bundle_config, new_container_id
from isotax.environments.runtime_cli import exec_not_found, parse_version
from isotax.host.facts.cgroups import hybrid_cgroup2_with_controllers


def test_both_kinds_registered() -> None:
    assert {"runc", "crun"} <= set(protocols.environments())


@pytest.mark.parametrize("rt,version", [("runc", "1.1.5+ds1"), ("crun", "1.8.1")])
def test_parse_version(rt: str, version: str) -> None:
    first = (DATA / "oci" / f"{rt}-version.txt").read_text().splitlines()[0]
    assert parse_version(first) == version


def test_hybrid_cgroup_layout_detected_on_real_mountinfo() -> None:
    mi = (DATA / "oci" / "mountinfo-hybrid.txt").read_text()
    ctl = (DATA / "oci" / "unified-cgroup.controllers").read_text()
    assert ctl.split() == ["hugetlb"]
    assert hybrid_cgroup2_with_controllers(mi, ctl)
    # Same layout without controllers on the v2 side: crun copes, no workaround needed.
    assert not hybrid_cgroup2_with_controllers(mi, "")
    v1_only = "\n".join(ln for ln in mi.splitlines() if " - cgroup2 " not in ln)
    assert not hybrid_cgroup2_with_controllers(v1_only, ctl)


@pytest.mark.parametrize("name,expected", [
    ("runc-exec-not-found.stderr", True),
    ("runc-exec-abs-not-found.stderr", True),
    ("runc-exec-ls-missing.stderr", False),
    ("crun-exec-not-found.stderr", True),
    ("crun-exec-abs-not-found.stderr", True),
    ("crun-exec-ls-missing.stderr", False),
])
def test_exec_not_found_on_real_runtime_errors(name: str, expected: bool) -> None:
    assert exec_not_found((DATA / "oci" / name).read_text()) is expected


def test_parse_ready_marker() -> None:
    # The output of a real container whose PID 1 was `itx-ready --hold`.
    assert parse_ready_marker((DATA / "oci" / "itx-ready-hold.log").read_text()) == 656783836466
    assert parse_ready_marker("noise\nITX-READY 123456789\n") == 123456789
    assert parse_ready_marker("ITX-READY\n") is None
    assert parse_ready_marker("") is None


def test_container_ids_are_prefixed_and_clean() -> None:
    cid = new_container_id("runc bridge/Test")
    assert cid.startswith("itx-runc-bridge-test-") and len(cid) == len("itx-runc-bridge-test-") + 6
    assert new_container_id("x") != new_container_id("x")


def _mount(cfg: dict, dest: str) -> dict:
    return next(m for m in cfg["mounts"] if m["destination"] == dest)


def test_bundle_config_defaults() -> None:
    cfg = bundle_config(root=Path("/r"), args=["a"], hostname="h", cgroups_path="/itx-x",
                        network=None, memory_mib=1024)
    assert cfg["root"] == {"path": "/r", "readonly": True}
    for dest in (SCRATCH, "/run", "/dev/shm"):
        assert _mount(cfg, dest)["type"] == "tmpfs"
    assert "size=524288k" in _mount(cfg, "/dev/shm")["options"]  # half of the memory
    assert {"type": "network"} not in cfg["linux"]["namespaces"]  # host network
    assert "PATH=/opt/isotax/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        in cfg["process"]["env"]


def test_bundle_config_limits_only_when_asked() -> None:
    free = bundle_config(root=Path("/r"), args=["a"], hostname="h", cgroups_path="/c",
                         network="/run/netns/itx-ns1")
    assert set(free["linux"]["resources"]) == {"devices"}
    assert {"type": "network", "path": "/run/netns/itx-ns1"} in free["linux"]["namespaces"]
    lim = bundle_config(root=Path("/r"), args=["a"], hostname="h", cgroups_path="/c",
                        network="new", vcpus=2, memory_mib=256)
    assert lim["linux"]["resources"]["cpu"]["cpus"] == "0-1"
    assert lim["linux"]["resources"]["memory"]["limit"] == 256 << 20
    assert {"type": "network"} in lim["linux"]["namespaces"]
    # numa_node: the node's CPUs and memory node replace vcpus' 0-based list on node 0.
    node = bundle_config(root=Path("/r"), args=["a"], hostname="h", cgroups_path="/c",
                         network=None, vcpus=2, cpuset=("8-9", "1"))
    assert node["linux"]["resources"]["cpu"] == {"cpus": "8-9", "mems": "1"}


def test_bundle_config_storage_volume_mount() -> None:
    vol = {"destination": "/mnt", "type": "bind", "source": "/w/v", "options": ["rbind", "rw"]}
    cfg = bundle_config(root=Path("/w/r"), args=["a"], hostname="h", cgroups_path="/c",
                        network=None, readonly=False, extra_mounts=[vol])
    assert cfg["root"] == {"path": "/w/r", "readonly": False}
    assert _mount(cfg, "/mnt") == vol
