"""The noise floor for real: a short native-vs-native (A/A) run."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import AA_PLAN, ran

from isotax.analysis.report_data import analyze
from isotax.image.artifacts import ImageArtifacts
from isotax.report import json_report, markdown


@pytest.mark.integration
def test_noise_floor_of_a_real_native_against_native_run(image: ImageArtifacts,
                                                         tmp_path: Path) -> None:
    with ran(AA_PLAN, image, tmp_path) as (store, run_id):
        d = analyze(store, run_id)
        envs = [e.name for e in store.environments(run_id)]
    assert envs == ["native", "native-aa"] and d.aa_env == "native-aa"
    floors = {r.metric: f for r, f in d.noise_floor.items()}
    assert 0 <= floors["throughput"] < 1, floors
    md = markdown.render(d)
    assert "### Noise floor (A/A: native against native-aa)" in md
    assert '"aa_environment": "native-aa"' in json_report.render(d)
