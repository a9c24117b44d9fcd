"""How the local cluster fits the host it starts on: the cgroup layout read from the host
(tests/data/kubernetes/host: real texts of the development host, a real cgroup2 mountinfo, and
hand-written systemd ones, named so), the kubelet's names for its cgroups under each driver,
the configuration each layout gets, and the address range chosen around the host's real
routes and addresses (`ip -j`, with and without 10.217.0.0/16 taken)."""

from __future__ import annotations

import json
import tomllib
from ipaddress import IPv4Network
from pathlib import Path

import pytest
from support import DATA

from isotax.host.kubernetes import configs, ranges
from isotax.host.kubernetes import layout as L
from isotax.host.kubernetes import nodecgroups as cg
from isotax.host.kubernetes.components import argvs

HOST = DATA / "kubernetes" / "host"


def _text(name: str) -> str:
    return (HOST / name).read_text()


# -- the cgroup layout ------------------------------------------------------------------------

def test_the_layout_is_read_from_the_mounts_and_pid_1() -> None:
    hybrid, v2 = _text("mountinfo-v1-hybrid.txt"), _text("mountinfo-v2-mountns.txt")
    systemd_v2 = _text("mountinfo-v2-systemd-handwritten.txt")
    here, systemd = _text("comm-pid1-process_api.txt"), _text("comm-pid1-systemd-handwritten.txt")
    # This host: v1 hierarchies and a cgroup2 at /sys/fs/cgroup/unified, no systemd.
    assert cg.detect(hybrid, here, False) == cg.V1
    assert cg.detect(hybrid, systemd, True) == cg.V1  # a v1 host under systemd: as before
    # /sys/fs/cgroup itself cgroup2: v2, with the systemd driver only where systemd is init.
    assert cg.detect(v2, here, False) == cg.V2
    assert cg.detect(systemd_v2, systemd, True) == cg.V2_SYSTEMD
    assert cg.detect(systemd_v2, systemd, False) == cg.V2  # no /run/systemd/system
    assert cg.detect(systemd_v2, here, True) == cg.V2  # PID 1 is not systemd (a container)
    assert cg.detect("", "", False) == cg.V1
    assert [x.driver for x in (cg.V1, cg.V2, cg.V2_SYSTEMD)] == ["cgroupfs", "cgroupfs",
                                                                "systemd"]
    assert "systemd driver" in cg.V2_SYSTEMD.words() and "v1" in cg.V1.words()


def test_the_kubelets_systemd_names() -> None:
    # Root "/" (a kubeadm node): the paths every such node has.
    assert cg.to_systemd(["kubepods", "burstable", "pod1a2b-3c4d"]) == (
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b_3c4d.slice")
    assert cg.to_systemd([]) == "/"
    # isotax's root /itx-k8s: one part, its '-' escaped, so a slice of its own at the top.
    assert cg.root_unit(L.CGROUP_ROOT) == "itx_k8s.slice"
    assert cg.root_unit(L.WORKER.cgroup_root) == "itx_k8s_n2.slice"  # a sibling, not a child
    with pytest.raises(ValueError, match="empty part"):
        cg.to_systemd(["itx", ""])


def test_a_pods_cgroup_on_each_layout() -> None:
    uid = "0e5c7a8e-1f2b-4c3d-9e8f-a1b2c3d4e5f6"
    assert cg.pod_dir(cg.V1, "itx-k8s", "burstable", uid, "cpuacct") == Path(
        f"/sys/fs/cgroup/cpuacct/itx-k8s/kubepods/burstable/pod{uid}")
    assert cg.pod_dir(cg.V1, "itx-k8s", "", uid, "memory") == Path(
        f"/sys/fs/cgroup/memory/itx-k8s/kubepods/pod{uid}")  # Guaranteed: no QoS group
    assert cg.pod_dir(cg.V2, "itx-k8s", "besteffort", uid, "cpuacct") == Path(
        f"/sys/fs/cgroup/itx-k8s/kubepods/besteffort/pod{uid}")
    escaped = uid.replace("-", "_")
    assert cg.pod_dir(cg.V2_SYSTEMD, "itx-k8s", "burstable", uid, "memory") == Path(
        "/sys/fs/cgroup/itx_k8s.slice/itx_k8s-kubepods.slice/itx_k8s-kubepods-burstable.slice/"
        f"itx_k8s-kubepods-burstable-pod{escaped}.slice")
    assert cg.pod_dir(cg.V2_SYSTEMD, "itx-k8s-n2", "", uid, "cpu") == Path(
        "/sys/fs/cgroup/itx_k8s_n2.slice/itx_k8s_n2-kubepods.slice/"
        f"itx_k8s_n2-kubepods-pod{escaped}.slice")
    assert cg.root_dirs(cg.V1, "itx-k8s", ("cpu", "memory")) == [
        Path("/sys/fs/cgroup/cpu/itx-k8s"), Path("/sys/fs/cgroup/memory/itx-k8s")]
    assert cg.root_dirs(cg.V2, "itx-k8s") == [Path("/sys/fs/cgroup/itx-k8s")]
    assert cg.root_dirs(cg.V2_SYSTEMD, "itx-k8s") == [Path("/sys/fs/cgroup/itx_k8s.slice")]


def test_limits_mean_the_same_on_v1_and_v2() -> None:
    assert cg.cpu_limit("max 100000\n") is None and cg.cpu_limit("-1\n", "100000\n") is None
    assert cg.cpu_limit("150000 100000\n") == cg.cpu_limit("150000\n", "100000\n") == 1.5
    assert cg.memory_limit("max\n") is None
    assert cg.memory_limit("9223372036854771712\n") is None  # v1's "unlimited"
    assert cg.memory_limit("1073741824\n") == 1 << 30
    assert cg.limits_words(1.5, 1 << 30, "0-1") == "CPU 1.5, memory 1024 MiB, CPUs 0-1"
    assert cg.limits_words(None, None, "") == "CPU unlimited, memory unlimited, CPUs ?"


def test_limits_read_from_a_groups_files(tmp_path: Path) -> None:
    v2 = tmp_path / "v2"
    v2.mkdir()
    for name, text in (("cpu.max", "200000 100000\n"), ("memory.max", "536870912\n"),
                       ("cpuset.cpus.effective", "0-1\n")):
        (v2 / name).write_text(text)
    assert cg.read_limits(cg.V2_SYSTEMD, dict.fromkeys(("cpu", "memory", "cpuset"), v2)) == \
        "CPU 2, memory 512 MiB, CPUs 0-1"
    dirs = {h: tmp_path / h for h in ("cpu", "memory", "cpuset")}
    for d in dirs.values():
        d.mkdir()
    (dirs["cpu"] / "cpu.cfs_quota_us").write_text("-1\n")
    (dirs["cpu"] / "cpu.cfs_period_us").write_text("100000\n")
    (dirs["memory"] / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (dirs["cpuset"] / "cpuset.effective_cpus").write_text("0-1\n")
    assert cg.read_limits(cg.V1, dict(dirs)) == "CPU unlimited, memory unlimited, CPUs 0-1"
    assert cg.read_limits(cg.V2, {"cpu": None, "memory": None, "cpuset": None}) == ""


def test_each_layout_gets_its_driver_everywhere() -> None:
    for layout, systemd in ((cg.V1, False), (cg.V2, False), (cg.V2_SYSTEMD, True)):
        files = configs.files(cgroups=layout)
        k = json.loads(files["kubelet.json"])
        assert k["cgroupDriver"] == layout.driver and k["cgroupRoot"] == f"/{L.CGROUP_ROOT}"
        # Kubernetes 1.35+ refuses v1 unless told; on v2 the setting is left out.
        assert ("failCgroupV1" in k) == (layout.version == 1)
        runc = tomllib.loads(files["containerd.toml"])["plugins"][
            "io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]["runc"]["options"]
        assert runc["SystemdCgroup"] is systemd
        runsc = tomllib.loads(files["runsc.toml"])["runsc_config"]
        assert runsc.get("systemd-cgroup") == ("true" if systemd else None)
        assert runsc["platform"] == "systrap"


# -- the address range ------------------------------------------------------------------------

def test_the_hosts_routes_and_addresses_read_from_ip_json() -> None:
    routes = ranges.route_prefixes(_text("ip-route-all.json"))
    assert IPv4Network("192.0.2.0/24") in routes and IPv4Network("127.0.0.0/8") in routes
    assert all(r.prefixlen >= 8 for r in routes)  # the default route claims nothing
    assert IPv4Network("192.0.2.0/24") in ranges.address_prefixes(_text("ip-addr.json"))
    taken = ranges.route_prefixes(_text("ip-route-all-217-taken.json"))
    assert IPv4Network("10.217.0.0/16") in taken
    assert IPv4Network("10.217.0.0/16") in ranges.address_prefixes(_text("ip-addr-217-taken.json"))
    catch_all = json.dumps([{"dst": "0.0.0.0/1"}, {"dst": "128.0.0.0/1"}, {"dst": "default"}])
    assert ranges.route_prefixes(catch_all) == []


def test_the_first_free_candidate_is_chosen() -> None:
    free = ranges.route_prefixes(_text("ip-route-all.json")) + ranges.address_prefixes(
        _text("ip-addr.json"))
    assert ranges.choose(free) == IPv4Network(L.DEFAULT_RANGE) == IPv4Network(
        ranges.CANDIDATES[0])
    taken = ranges.route_prefixes(_text("ip-route-all-217-taken.json"))
    assert ranges.choose(taken) == IPv4Network("10.218.0.0/16")
    # Only the address (a link that is down has no route): still taken.
    assert ranges.choose(ranges.address_prefixes(_text("ip-addr-217-taken.json"))) == \
        IPv4Network("10.218.0.0/16")
    # A VPN holding 10.0.0.0/8: the 172.16.0.0/12 candidates.
    assert ranges.choose([IPv4Network("10.0.0.0/8")]) == IPv4Network("172.29.0.0/16")
    assert ranges.choose([IPv4Network("10.218.5.0/24")], ("10.218.0.0/16", "10.219.0.0/16")) \
        == IPv4Network("10.219.0.0/16")
    with pytest.raises(ranges.RangeError, match=r"10\.217\.0\.0/16 \(10\.0\.0\.0/8\).*free one"):
        ranges.choose([IPv4Network("10.0.0.0/8"), IPv4Network("172.16.0.0/12")])


def test_every_address_follows_the_recorded_range(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(L, "RANGE_FILE", tmp_path / "range")
    assert str(L.cluster_range()) == L.DEFAULT_RANGE  # no cluster: the default
    assert (L.NODE_IP, L.POD_CIDR, L.WORKER.ip, L.WORKER.pod_cidr) == (
        "10.217.0.1", "10.217.1.0/24", "10.217.0.2", "10.217.2.0/24")
    (tmp_path / "range").write_text("172.29.0.0/16\n")
    assert (L.NODE_IP, L.LOCAL.ip, L.POD_CIDR, L.SERVICE_CIDR, L.SERVICE_FIRST_IP) == (
        "172.29.0.1", "172.29.0.1", "172.29.1.0/24", "172.29.128.0/20", "172.29.128.1")
    assert (L.WORKER.ip, L.WORKER.pod_cidr) == ("172.29.0.2", "172.29.2.0/24")
    files = configs.files()
    assert json.loads(files["kubelet.json"])["address"] == "172.29.0.1"
    assert json.loads(files["kube-proxy.json"])["nodePortAddresses"] == ["172.29.0.1/32"]
    assert json.loads(files["cni/net.d/10-itx.conflist"])["plugins"][0]["ipam"]["ranges"] == [
        [{"subnet": "172.29.1.0/24"}]]
    api = " ".join(next(c for c in argvs() if c.name == "kube-apiserver").argv)
    assert "--bind-address=172.29.0.1" in api and "--service-cluster-ip-range=172.29.128.0/20" \
        in api
    assert "10.217." not in "".join(files.values()) + api
