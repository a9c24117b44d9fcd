"""Memory footprint for real: a native instance whose holding process is measured."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import started

from isotax.image.artifacts import ImageArtifacts
from isotax.run.leaks import find_leaks
from isotax.telemetry.footprint import (
    measure,
)


@pytest.mark.integration
def test_native_instance_is_its_holding_process(image: ImageArtifacts, tmp_path: Path) -> None:
    with started("fp", "native", "host", image, tmp_path) as inst:
        pids = list(inst.host_pids())
        assert len(pids) == 1
        fp = measure(inst)
        assert [p.name for p in fp.processes] == ["itx-ready"]
        # A static helper: well under a MiB, but never nothing.
        assert 0 < fp.pss_bytes < 4 * 1024 * 1024 and fp.kernel_bytes is None
        assert fp.total_bytes == fp.pss_bytes
        assert {"create", "started", "first_instruction", "ready"} <= inst.milestones.keys()
        # While it runs the leak check sees it (were it left behind, it would be named).
        assert any(f"process {pids[0]} " in x for x in find_leaks())
    assert not any(f"process {pids[0]} " in x for x in find_leaks())
    assert not Path(f"/proc/{pids[0]}").exists() or \
        Path(f"/proc/{pids[0]}/comm").read_text().strip() != "itx-ready"
