"""nspawn, the system container: its command line and helpers (pure)."""

from __future__ import annotations

from pathlib import Path

from support import DATA

from isotax.environments.nspawn import (
    MASKED,
    cgroup_dirs,
    join_cgroups_script,
    nspawn_argv,
    parse_nspid_leader,
)


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
    assert parse_nspid_leader((DATA / "nspawn" / "status-pid1-in-child-ns.txt").read_text())
    assert not parse_nspid_leader((DATA / "nspawn" / "status-host-process.txt").read_text())


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
