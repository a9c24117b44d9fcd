"""runc and crun environments for real: real containers (root)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ours, why_not_root_and

from isotax import protocols
from isotax.environments.container_fs import SCRATCH
from isotax.environments.oci.instance import OciInstance
from isotax.environments.oci.runtime import Runtime, start_times_ms
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec
from isotax.run.leaks import find_leaks

REGISTRY = protocols.environments()

RUNTIMES = ["runc", "crun"]


def _why_not(rt: str) -> str | None:
    return why_not_root_and(rt, root_for="OCI containers")


@pytest.fixture(params=[(rt, net) for rt in RUNTIMES for net in ("host", "bridge")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def inst(request: pytest.FixtureRequest, image: ImageArtifacts,
         tmp_path: Path) -> Iterator[OciInstance]:
    rt, net = request.param
    if (why := _why_not(rt)) is not None:
        pytest.skip(why)
    env = REGISTRY[rt]()
    spec = EnvSpec(name=f"test-{net}", kind=rt, image=image, workdir=tmp_path, network=net)
    i = env.start(spec)
    assert isinstance(i, OciInstance)
    try:
        yield i
    finally:
        i.stop()


@pytest.mark.integration
def test_container_runs_the_image(inst: OciInstance) -> None:
    m = inst.milestones
    # The marker's own timestamp may precede "started": `run --detach` returns only after the
    # container's PID 1 is already running.
    assert 0 <= m["create"] <= min(m["started"], m["ready"]) and max(m.values()) < 30
    assert inst.hold[0] == "/opt/isotax/bin/itx-ready"  # the real PID 1 helper, marker seen
    assert inst.exec(["cat", "/etc/debian_version"], 30).check().stdout.startswith("12.")
    assert "XZ Utils" in inst.exec(["xz", "--version"], 30).check().stdout
    missing = inst.exec(["itx-no-such-program"], 30)
    assert missing.returncode == 127
    d = inst.facts().display()
    assert d["kind"] == inst.rt.name and d["runtime"].startswith(inst.rt.name + " ")
    assert d["command_line"].startswith(inst.rt.binary) and d["command_line"].split(
        "  #")[0].endswith(f"run --detach --bundle {inst.bundle} {inst.cid}")
    assert d["network"] == inst.network and d["address"] == inst.address


@pytest.mark.integration
def test_scratch_is_writable_tmpfs_and_root_is_read_only(inst: OciInstance) -> None:
    fs = inst.exec(["stat", "-f", "-c", "%T", inst.scratch], 30).check().stdout.strip()
    assert fs == "tmpfs"
    inst.exec(["sh", "-c", f"echo x > {inst.scratch}/f && test -s {inst.scratch}/f"], 30).check()
    assert inst.exec(["sh", "-c", "echo $TMPDIR"], 30).check().stdout.strip() == SCRATCH
    ro = inst.exec(["touch", "/itx-ro-test"], 30)
    assert ro.returncode != 0 and "Read-only file system" in ro.stderr


@pytest.mark.integration
def test_network_mode(inst: OciInstance) -> None:
    if inst.network == "host":
        assert inst.address == "127.0.0.1"
        host_ifaces = sorted(os.listdir("/sys/class/net"))
        seen = inst.exec(["ls", "/sys/class/net"], 30).check().stdout.split()
        assert sorted(seen) == host_ifaces
        return
    assert inst._seat is not None
    lease = inst._seat.lease
    assert inst.address == lease.ip
    srv = socket.socket()
    srv.bind((lease.gateway, 0))
    srv.listen(1)
    srv.settimeout(10)
    port = srv.getsockname()[1]
    got: list[str] = []

    def accept() -> None:
        conn, peer = srv.accept()
        got.append(peer[0])
        conn.close()

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    inst.exec(["bash", "-c", f"echo hi > /dev/tcp/{lease.gateway}/{port}"], 30).check()
    t.join(10)
    srv.close()
    assert got == [lease.ip]  # the container speaks from its leased address


@pytest.mark.integration
def test_pause_resume_and_stop_twice(inst: OciInstance) -> None:
    # Paused through the container's own freezer cgroup, not a runtime process; the runtime
    # reads the same cgroup back and agrees (its state "paused", its resume works too).
    assert inst._set_frozen(True), "the freezer cgroup is not where isotax looks for it"
    assert inst.state() == "paused" and inst.alive() == ""
    inst.resume()
    assert inst.state() == "running"
    inst.exec(["true"], 30).check()
    inst.pause()
    assert inst.state() == "paused"
    assert inst.rt.call("resume", inst.cid).returncode == 0  # the runtime thaws it
    assert inst.state() == "running" and inst.alive() == ""
    inst.exec(["true"], 30).check()
    names = [inst.cid]
    if inst._seat is not None:
        names.append(inst._seat.bridge.name)
    assert ours(*names)  # the running container is visible to find_leaks()
    inst.pause()  # stop() must cope with a frozen container
    inst.stop()
    inst.stop()
    assert ours(*names) == []
    assert not inst.bundle.exists()
    assert inst.state() == "gone"


@pytest.mark.integration
@pytest.mark.parametrize("rt", RUNTIMES)
def test_limits_apply_only_when_asked(rt: str, image: ImageArtifacts, tmp_path: Path) -> None:
    if (why := _why_not(rt)) is not None:
        pytest.skip(why)
    spec = EnvSpec(name="test-limits", kind=rt, image=image, workdir=tmp_path, vcpus=1,
                   memory_mib=256)
    i = REGISTRY[rt]().start(spec)
    try:
        out = i.exec(["cat", "/sys/fs/cgroup/cpuset/cpuset.cpus",
                      "/sys/fs/cgroup/memory/memory.limit_in_bytes"], 30).check().stdout.split()
        assert out == ["0", str(256 << 20)]
        assert i.exec(["nproc"], 30).check().stdout.strip() == "1"
    finally:
        i.stop()
    assert ours(i.cid) == []


@pytest.mark.integration
@pytest.mark.parametrize("rt", RUNTIMES)
def test_available_and_start_time(rt: str, image: ImageArtifacts) -> None:
    if (why := _why_not(rt)) is not None:
        pytest.skip(why)
    a = REGISTRY[rt]().available()
    assert a.ok, str(a)
    times = start_times_ms(rt, image, n=3)
    assert len(times) == 3 and all(0 < t < 5000 for t in times)
    assert not [x for x in find_leaks() if "itx-start-" in x]
    listed = Runtime(rt).call("list", "-q").stdout.split()
    assert not any(c.startswith("itx-start-") for c in listed)


# -- storage ----------------------------------------------------------------------------------

@pytest.mark.integration
@pytest.mark.parametrize("rt", RUNTIMES)
def test_storage_volume_and_overlay_rootfs(rt: str, image: ImageArtifacts,
                                           tmp_path: Path) -> None:
    """volume: the image root stays read-only, /mnt is a writable host directory; rootfs: the
    root is an overlayfs over the image (writable, the image untouched), mounted on the host
    where find_leaks() sees it until stop() unmounts it."""
    if (why := _why_not(rt)) is not None:
        pytest.skip(why)
    vol = REGISTRY[rt]().start(EnvSpec(name="test-vol", kind=rt, image=image,
                                       workdir=tmp_path / "v", storage="volume"))
    assert isinstance(vol, OciInstance)
    try:
        assert vol.data_dir == "/mnt" and "bind-mounted volume" in vol.facts().display()["storage"]
        vol.exec(["sh", "-c", "echo x > /mnt/f"], 30).check()
        assert [p.name for p in (tmp_path / "v").glob("itx-*-volume/f")] == ["f"]
        assert vol.exec(["touch", "/itx-ro-test"], 30).returncode != 0
    finally:
        vol.stop()
    assert not list((tmp_path / "v").glob("itx-*-volume"))

    ovl = REGISTRY[rt]().start(EnvSpec(name="test-ovl", kind=rt, image=image,
                                       workdir=tmp_path / "o", storage="rootfs"))
    assert isinstance(ovl, OciInstance)
    try:
        d = ovl.facts().display()
        assert d["storage"].startswith("overlayfs rootfs") and "overlayfs" in d["rootfs"]
        assert ovl.exec(["stat", "-f", "-c", "%T", "/"], 30).check().stdout.strip() \
            == "overlayfs"
        ovl.exec(["sh", "-c", f"echo x > {ovl.data_dir}/f && touch /itx-rw-test"], 30).check()
        assert not (image.rootfs / "itx-rw-test").exists()  # the lower layer is untouched
        assert (ovl.fs.overlay.upper / "itx-rw-test").exists()
        assert any(str(ovl.fs.overlay.merged) in x for x in find_leaks())  # a mount it sees
    finally:
        ovl.stop()
    assert ours(ovl.cid) == []
    assert not [p for p in (tmp_path / "o").iterdir() if p.is_dir()]  # merged, upper, work
