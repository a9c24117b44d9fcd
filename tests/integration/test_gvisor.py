"""gVisor (runsc) for real, where the machine has isotax's runsc build: sandboxes on systrap
(bridge and host network, volume and overlay storage), the other platforms where they work
(the reason where they do not), a short compress, rr and fio run, and the Sentry and Gofer
in the footprint."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ours, started

from isotax import protocols
from isotax.environments.oci.gvisor import GvisorInstance
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import NamespaceLoadGen
from isotax.model import NOT_MEASURED
from isotax.protocols import PHASES, EnvSpec, Unavailable
from isotax.run.launcher import EnvLauncher
from isotax.workloads.density import Density
from isotax.workloads.rr import SOCKPERF_TCP_REASON


@pytest.fixture(params=["bridge", "host"])
def inst(request: pytest.FixtureRequest, image: ImageArtifacts,
         tmp_path: Path) -> Iterator[GvisorInstance]:
    with started(f"test-gv-{request.param}", "gvisor", request.param, image, tmp_path) as i:
        assert isinstance(i, GvisorInstance)
        yield i


@pytest.mark.integration
def test_sandbox_runs_the_image(inst: GvisorInstance) -> None:
    m = inst.milestones
    assert list(m)[:4] == list(PHASES) or set(PHASES) <= set(m)
    assert 0 <= m["create"] <= m["started"] <= m["first_instruction"] <= m["ready"] < 30
    assert inst.exec(["cat", "/etc/debian_version"], 30).check().stdout.startswith("12.")
    # The kernel the workload sees is gVisor's, not the host's.
    dmesg = inst.exec(["dmesg"], 30).check().stdout
    assert "gVisor" in dmesg or "Starting gVisor" in dmesg
    assert inst.exec(["itx-no-such-program"], 30).returncode == 127
    d = inst.facts().display()
    assert d["kind"] == "gvisor" and d["platform"] == "systrap"
    assert d["runtime"].startswith("runsc v0.0.0-") or "runsc" in d["runtime"]
    assert d["network"] == inst.network and "--gofer-network-namespace=new" in d["runsc_flags"]


@pytest.mark.integration
def test_sentry_and_gofer_are_the_instance(inst: GvisorInstance) -> None:
    pids = inst.host_pids()
    args = {p: Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode() for p in pids}
    assert any(a.endswith("runsc-sandbox") for a in args.values()), args
    assert any(a.endswith("runsc-gofer") for a in args.values()), args
    kmem = inst.kernel_memory_bytes()
    assert kmem is not None and kmem > 0


@pytest.mark.integration
def test_network(inst: GvisorInstance) -> None:
    if inst.network == "host":
        assert inst.address == "127.0.0.1"
        # hostinet: the sandbox's interfaces are the host's.
        seen = inst.exec(["cat", "/proc/net/dev"], 30).check().stdout
        assert all(f"{dev}:" in seen for dev in os.listdir("/sys/class/net")
                   if not dev.startswith("itx"))
        return
    assert inst._seat is not None
    lease = inst._seat.lease
    assert inst.address == lease.ip
    srv = socket.socket()
    srv.bind((lease.gateway, 0))
    srv.listen(1)
    srv.settimeout(20)
    port = srv.getsockname()[1]
    got: list[str] = []

    def accept() -> None:
        conn, peer = srv.accept()
        got.append(peer[0])
        conn.close()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    inst.exec(["bash", "-c", f"echo hi > /dev/tcp/{lease.gateway}/{port}"], 30).check()
    t.join(20)
    srv.close()
    assert got == [lease.ip]  # gVisor's netstack speaks from the leased address


@pytest.mark.integration
def test_pause_resume_and_stop_twice(inst: GvisorInstance) -> None:
    inst.pause()
    assert inst.state() == "paused"
    inst.resume()
    assert inst.state() == "running"
    inst.exec(["true"], 30).check()
    names = [inst.cid]
    if inst._seat is not None:
        names.append(inst._seat.bridge.name)
    assert ours(*names)  # the running sandbox is visible to find_leaks()
    pids = inst.host_pids()
    inst.pause()  # stop() must cope with a paused sandbox
    inst.stop()
    inst.stop()
    assert ours(*names) == []
    left = [(p, Path(f"/proc/{p}/cmdline").read_bytes()[:80]) for p in pids if _live(p)]
    assert not left
    assert not inst.bundle.exists() and not inst.state_file().exists()
    assert inst.state() == "gone"


def _live(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def _start(image: ImageArtifacts, tmp_path: Path, name: str, **kw: object) -> GvisorInstance:
    env = protocols.environments()["gvisor"]()
    a = env.available()
    if not a.ok:
        pytest.skip(f"gvisor unavailable here: {a}")
    i = env.start(EnvSpec(name=name, kind="gvisor", image=image, workdir=tmp_path, **kw))  # type: ignore[arg-type]
    assert isinstance(i, GvisorInstance)
    return i


@pytest.mark.integration
def test_storage_volume_and_rootfs_overlays(image: ImageArtifacts, tmp_path: Path) -> None:
    # volume: runsc does not overlay a read-only root or the volume: writes reach the host.
    i = _start(image, tmp_path / "v", "test-gv-vol")
    try:
        i.exec(["sh", "-c", "echo v > /mnt/itx-f"], 30).check()
        assert i.fs.volume is not None and (i.fs.volume / "itx-f").read_text() == "v\n"
        assert i.exec(["touch", "/itx-ro"], 30).returncode != 0
    finally:
        i.stop()
    # rootfs, runsc's default overlay2 (root:self): writes stay in the sandbox's overlay ...
    i = _start(image, tmp_path / "r", "test-gv-ovl", storage="rootfs")
    try:
        i.exec(["sh", "-c", f"echo r > {i.data_dir}/itx-f"], 30).check()
        assert not list(i.fs.overlay.upper.rglob("itx-f"))
        assert "filestore" in i.facts().display()["overlay2"]
    finally:
        i.stop()
    # ... and with --overlay2=none they go through the Gofer to the host's overlayfs.
    i = _start(image, tmp_path / "n", "test-gv-none", storage="rootfs",
               options={"overlay2": "none"})
    try:
        i.exec(["sh", "-c", f"echo n > {i.data_dir}/itx-f"], 30).check()
        assert [p.read_text() for p in i.fs.overlay.upper.rglob("itx-f")] == ["n\n"]
    finally:
        i.stop()
    assert ours("test-gv-") == []


@pytest.mark.integration
@pytest.mark.parametrize("platform", ["ptrace", "kvm"])
def test_other_platforms_run_or_say_why(platform: str, image: ImageArtifacts,
                                        tmp_path: Path) -> None:
    env = protocols.environments()["gvisor"]()
    if not env.available().ok:
        pytest.skip(f"gvisor unavailable here: {env.available()}")
    spec = EnvSpec(name=f"test-gv-{platform}", kind="gvisor", image=image, workdir=tmp_path,
                   options={"platform": platform})
    try:
        i = env.start(spec)
    except Unavailable as e:
        # Only kvm may be missing (hardware virtualisation), and the reason must say so.
        assert platform == "kvm", str(e)
        assert "kvm" in str(e) and "systrap" in e.availability.fix
        assert ours(f"test-gv-{platform}") == []
        return
    try:
        assert i.facts().display()["platform"] == platform
        assert i.exec(["cat", "/etc/debian_version"], 60).check().stdout.startswith("12.")
    finally:
        i.stop()
    assert ours(f"test-gv-{platform}") == []


@pytest.mark.integration
def test_density_counts_sentry_and_gofer(image: ImageArtifacts, tmp_path: Path) -> None:
    name = "test-gv-density"
    with started(name, "gvisor", "host", image, tmp_path / "probe"):
        pass
    spec = EnvSpec(name=name, kind="gvisor", image=image, workdir=tmp_path / "launched",
                   network="host")
    lau = EnvLauncher(protocols.environments()["gvisor"](), spec, deadline=float("inf"))
    try:
        params = {"max_instances": 2, "min_available_mib": 512, "settle_s": 0.5}
        samples = {s.metric: s for s in Density().launch_and_measure(lau, params, None)}
    finally:
        lau.close()
    assert samples["instances"].value == 2
    labels = samples["idle_instance_mib"].labels
    by_prog = labels["idle_by_program_mib"]
    # The Sentry and the Gofer are host processes of the instance; the workload's own
    # processes live inside the Sentry and are not host processes at all.
    assert "itx-ready" not in by_prog, by_prog
    assert samples["idle_instance_mib"].value > 5 and labels["idle_kernel_mib"] is not None
    assert ours(name) == []


# -- workloads for real --------------------------------------------------------------------

def _params(workload: str, **over: object) -> dict[str, object]:
    cls = protocols.workloads()[workload]
    return {**{p.name: p.default for p in cls.params}, **over}


@pytest.mark.integration
@pytest.mark.parametrize("network", ["bridge", "host"])
def test_compress_rr_and_fio_in_systrap(network: str, image: ImageArtifacts,
                                        loadgen: NamespaceLoadGen, tmp_path: Path) -> None:
    """Short real runs of the quick plan's CPU, network and disk workloads in gVisor systrap:
    netperf TCP_RR from the load generator reaches the sandbox (its netstack behind the DNAT,
    or the host's stack), fio does O_DIRECT libaio reads on the volume through the Gofer.
    rr keeps its default tail = true: sockperf's TCP server fails in gVisor (hostinet refuses
    its recvfrom(MSG_NOSIGNAL) with EINVAL; netstack refuses its sendto on a connected socket
    with a stale address with EAFNOSUPPORT; Linux ignores both), so netperf's metrics are
    measured and the p99.9 alone is marked not measured, with the reason."""
    name = f"test-gv-wl-{network}"
    with started(name, "gvisor", network, image, tmp_path) as inst:
        runs = [("compress", _params("compress", corpus_mib=2, threads=2)),
                ("rr", _params("rr", proto="tcp", seconds=1)),
                ("fio", _params("fio", pattern="randread", bs="4k", iodepth=16, size_mib=8,
                                runtime_s=1, ramp_s=0))]
        for workload, params in runs:
            w = protocols.workloads()[workload]()
            w.prepare(inst, params, loadgen)
            samples = {s.metric: s for s in w.run(inst, params, loadgen)}
            assert samples, workload
            main = {"compress": "throughput", "rr": "transactions_per_s",
                    "fio": "read_iops"}[workload]
            assert samples[main].value > 0, (workload, samples[main])
            if workload == "rr":
                assert samples[main].labels["path"] == loadgen.path(inst)
                assert "latency_p99_9_us" not in samples
                assert samples[main].labels[NOT_MEASURED] == {
                    "latency_p99_9_us": SOCKPERF_TCP_REASON}
    assert ours(name) == []
