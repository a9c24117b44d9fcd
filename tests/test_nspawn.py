"""nspawn, the system container: its command line and helpers (pure), then a real boot of the
image's own systemd, a workload in it, pause, and nothing left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import requires_root_and

from isotax import protocols
from isotax.environments.nspawn import (
    MASKED,
    NspawnInstance,
    cgroup_dirs,
    join_cgroups_script,
    nspawn_argv,
    parse_nspid_leader,
)
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import PHASES, EnvSpec
from isotax.run.leaks import find_leaks
from isotax.telemetry.footprint import measure

DATA = Path(__file__).parent / "data" / "nspawn"


def test_command_line_volume_and_host_network() -> None:
    argv = nspawn_argv(machine="itx-a-1", root=Path("/img"), readonly=True,
                       volume=Path("/w/vol"), netns=None)
    assert argv[:5] == ["systemd-nspawn", "--quiet", "--register=no", "--keep-unit",
                        "--machine=itx-a-1"]
    assert "--read-only" in argv and "--bind=/w/vol:/mnt" in argv and "--tmpfs=/tmp" in argv
    assert not any(a.startswith("--network") for a in argv)
    boot = argv.index("--boot")
    assert argv[boot + 1] == "--" and "systemd.unit=multi-user.target" in argv[boot:]
    assert [a for a in argv if a.startswith("systemd.mask=")] == [
        f"systemd.mask={u}" for u in MASKED]


def test_command_line_overlay_root_and_bridge() -> None:
    argv = nspawn_argv(machine="itx-b-2", root=Path("/w/root"), readonly=False, volume=None,
                       netns="/run/netns/itx-ns2")
    assert "--read-only" not in argv and not any(a.startswith("--bind=") for a in argv)
    assert "--network-namespace-path=/run/netns/itx-ns2" in argv
    assert "--directory=/w/root" in argv


def test_leader_is_pid_1_of_a_child_namespace() -> None:
    assert parse_nspid_leader((DATA / "status-pid1-in-child-ns.txt").read_text())
    assert not parse_nspid_leader((DATA / "status-host-process.txt").read_text())


def test_cgroup_dirs_v1_and_v2(tmp_path: Path) -> None:
    for h in ("memory", "freezer", "systemd", "unified"):
        (tmp_path / h).mkdir()
        (tmp_path / h / "cgroup.procs").write_text("")
    (tmp_path / "cpu").symlink_to(tmp_path / "memory")  # v1 links (cpu -> cpu,cpuacct)
    assert [d.parent.name for d in cgroup_dirs("itx-x", tmp_path)] == [
        "freezer", "memory", "systemd", "unified"]
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    assert cgroup_dirs("itx-x", v2) == [v2 / "itx-x"]
    script = join_cgroups_script([Path("/sys/fs/cgroup/memory/itx-x")])
    assert script == 'echo $$ > /sys/fs/cgroup/memory/itx-x/cgroup.procs; exec "$@"'


@pytest.mark.integration
@requires_root_and("systemd-nspawn", "nsenter", "debootstrap")
@pytest.mark.parametrize("network", ["host", "bridge"])
def test_boots_the_images_init_and_runs_a_workload(image: ImageArtifacts, tmp_path: Path,
                                                    network: str) -> None:
    env = protocols.environments()["nspawn"]()
    avail = env.available()
    if not avail.ok:
        pytest.skip(f"nspawn unavailable here: {avail}")
    inst = env.start(EnvSpec(name="t-nsp", kind="nspawn", image=image, workdir=tmp_path,
                             network=network, memory_mib=1024))
    assert isinstance(inst, NspawnInstance)
    try:
        m = inst.milestones
        assert all(p in m for p in PHASES)
        assert 0 <= m["create"] <= m["started"] <= m["first_instruction"] <= m["ready"]
        assert inst.exec(["cat", "/proc/1/comm"], 30).check().stdout.strip() == "systemd"
        assert inst.exec(["cat", "/etc/debian_version"], 30).check().stdout.startswith("12.")
        # The image's own servers are masked: nothing listens on redis' or MariaDB's port.
        units = inst.exec(["systemctl", "is-active", "redis-server", "mariadb"], 30).stdout
        assert "active\n" not in units.replace("inactive", "")
        assert inst.exec(["sh", "-c", "echo x > /mnt/f && cat /mnt/f"], 30).check().stdout == "x\n"
        assert inst.exec(["sh", "-c", "echo x > /etc/f"], 30).returncode != 0  # read-only root
        mem = next(d for d in inst._cgroups if d.parent.name == "memory")
        assert (mem / "memory.limit_in_bytes").read_text().strip() == str(1024 << 20)
        fp = measure(inst)
        assert "systemd" in fp.by_program() and fp.kernel_bytes is not None
        inst.pause()
        freezer = next(d for d in inst._cgroups if d.parent.name == "freezer")
        assert (freezer / "freezer.state").read_text().strip() == "FROZEN"
        assert inst.exec(["true"], 2).returncode == 126  # refused at once, never frozen
        inst.resume()
        assert inst.exec(["true"], 30).returncode == 0
        if network == "bridge":
            route = inst.exec(["ip", "route", "show", "default"], 30).stdout
            assert "via" in route
    finally:
        inst.stop()
    assert [x for x in find_leaks() if inst.machine in x or "t-nsp" in x] == []
