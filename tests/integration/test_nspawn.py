"""nspawn, the system container, for real: a boot of the image's own systemd, a workload in
it, pause, and nothing left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import ours, requires_root_and

from isotax import protocols
from isotax.environments.nspawn import (
    NspawnInstance,
)
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import PHASES, EnvSpec
from isotax.telemetry.footprint import measure


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
    assert ours(inst.machine, "t-nsp") == []
