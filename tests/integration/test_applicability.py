"""Not applicable, for real: a run over native and containers without a network, where the
network workload is n/a with the reason and the CPU workload runs, in runc and in gVisor."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import ran, why_not_root_and

from isotax.analysis.report_data import analyze
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellStatus
from isotax.report import markdown

PLAN = """
name = "t-na"
seed = 5
repetitions = 2
warmups = 0
parity = "flag"
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc-offline"
kind = "runc"
network = "none"
[[environments]]
name = "gvisor-offline"
kind = "gvisor"
network = "none"
[[workloads]]
name = "compress"
params = { corpus_mib = 1, threads = 1 }
[[workloads]]
name = "rr"
params = { seconds = 1, tail = false }
"""


@pytest.mark.integration
@pytest.mark.skipif(why_not_root_and("runc") is not None, reason=why_not_root_and("runc") or "")
def test_network_workload_is_na_without_a_network(image: ImageArtifacts,
                                                  tmp_path: Path) -> None:
    with ran(PLAN, image, tmp_path) as (store, run_id):
        envs = {e.name: e for e in store.environments(run_id)}
        offline = [n for n in ("runc-offline", "gvisor-offline") if envs[n].available]
        assert "runc-offline" in offline, envs["runc-offline"].reason
        from isotax import protocols

        if protocols.environments()["gvisor"]().available().ok:
            assert "gvisor-offline" in offline, envs["gvisor-offline"].reason
        by = {(c.key.environment, c.key.workload): c for c in store.cells(run_id)}
        for env in offline:
            na = by[(env, "rr")]
            assert na.status is CellStatus.NOT_APPLICABLE and not na.samples
            assert 'network = "none"' in na.reason
            assert by[(env, "compress")].status is CellStatus.OK  # the rest runs
        assert by[("native", "rr")].status is CellStatus.OK
        md = markdown.render(analyze(store, run_id))
    assert "## Not applicable" in md and "## Failures" not in md
