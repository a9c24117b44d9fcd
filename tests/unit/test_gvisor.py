"""gVisor (runsc): golden command lines per platform and network, and parsers of real runsc
output (tests/data/gvisor)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import DATA

from isotax import protocols
from isotax.environments.oci.gvisor import (
    INSTALL_FIX,
    RUNSC_PATH,
    first_panic,
    overlay_words,
    parse_state_pids,
    runsc_flags,
    runsc_path,
)
from isotax.environments.oci.runtime import OCI_STATE_ROOT, Runtime, runtime_state_containers
from isotax.environments.runtime_cli import exec_not_found, parse_version
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec


def _command_lines() -> str:
    """Every platform x network (and the overlay2 knob) as the argv of `runsc ... run`."""
    lines = []
    for platform in ("systrap", "ptrace", "kvm"):
        for network in ("bridge", "host"):
            for overlay2 in (None, "none"):
                rt = Runtime("runsc", str(RUNSC_PATH), runsc_flags(platform, network, overlay2))
                argv = rt.argv("run", "--detach", "--bundle", "B", "itx-c")
                lines.append(f"{platform} {network} {overlay2}: {' '.join(argv)}")
    return "\n".join(lines) + "\n"


def test_command_lines_golden() -> None:
    assert _command_lines() == (DATA / "gvisor" / "command-lines.golden").read_text()


def test_bad_platform_and_network_are_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"'kvmm'.*systrap, ptrace, kvm"):
        runsc_flags("kvmm", "host")
    with pytest.raises(ValueError, match=r"'tap'.*bridge, host, none"):
        runsc_flags("systrap", "tap")
    assert "--network=none" in runsc_flags("systrap", "none")


def test_unknown_option_is_refused(image_stub: ImageArtifacts, tmp_path: Path) -> None:
    env = protocols.environments()["gvisor"]()
    spec = EnvSpec(name="x", kind="gvisor", image=image_stub, workdir=tmp_path,
                   options={"platfrom": "ptrace"})
    with pytest.raises(ValueError, match=r"platfrom.*known are platform, overlay2"):
        env.start(spec)


@pytest.fixture
def image_stub(tmp_path: Path) -> ImageArtifacts:
    # Never started: the options are checked before anything else.
    return ImageArtifacts(recipe_hash="x", root=tmp_path / "img")


def test_version_of_the_pinned_build() -> None:
    first = (DATA / "gvisor" / "version.txt").read_text().splitlines()[0]
    assert parse_version(first).startswith("v0.0.0-2026")


def test_state_file_gives_sentry_and_gofer() -> None:
    pids = parse_state_pids((DATA / "gvisor" / "state.json").read_text())
    assert len(pids) == 2 and len(set(pids)) == 2 and all(p > 1 for p in pids)
    assert parse_state_pids('{"sandbox": {"pid": 0}, "goferPid": 0}') == []


@pytest.mark.parametrize("name", ["exec-not-found.txt", "exec-not-found-path.txt"])
def test_exec_not_found_on_real_runsc_error(name: str) -> None:
    assert exec_not_found((DATA / "gvisor" / name).read_text())
    assert not exec_not_found("sh: 1: exit: Illegal number: x")


def test_first_panic_of_a_real_kvm_failure() -> None:
    # runsc --platform=kvm on this machine's kvm_pvm (head of its --panic-log).
    assert first_panic((DATA / "gvisor" / "kvm-panic-log.txt").read_text()) == (
        "panic: error initializing vCPU(id=0) state: error setting system registers: "
        "invalid argument")
    assert first_panic("") == ""


def test_state_root_listing(tmp_path: Path) -> None:
    for name in ("itx-a-1_sandbox:itx-a-1.state", "itx-a-1_sandbox:itx-a-1.lock"):
        (tmp_path / name).write_text("")
    (tmp_path / "itx-runc-2").mkdir()
    assert runtime_state_containers(sorted(tmp_path.iterdir())) == ["itx-a-1", "itx-runc-2"]


def test_overlay_words_follow_runsc() -> None:
    assert "none in effect" in overlay_words(None, "volume")
    assert "IS overlaid" in overlay_words("all:memory", "volume")
    assert "filestore" in overlay_words(None, "rootfs")
    assert "host's overlayfs" in overlay_words("none", "rootfs")


def test_runsc_path_prefers_isotax_build() -> None:
    path = runsc_path()
    if RUNSC_PATH.exists():
        assert path == str(RUNSC_PATH)
    assert "scripts/setup.sh" in INSTALL_FIX
    assert "go install gvisor.dev/gvisor/runsc@" in INSTALL_FIX


def test_state_root_is_isotax_private() -> None:
    assert Runtime("runsc").root == OCI_STATE_ROOT / "runsc"
