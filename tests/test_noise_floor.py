"""The noise floor: the baseline run twice (A/A), interleaved like everything else; a
difference no larger than A/A shows is within noise. A real short native-vs-native run."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from support import ran

from isotax.analysis.report_data import analyze
from isotax.analysis.stats import Ratio, aa_noise_floor
from isotax.image.artifacts import ImageArtifacts
from isotax.plan import PlanError, parse_plan
from isotax.report import json_report, markdown


def test_a_difference_inside_the_floor_is_within_noise() -> None:
    aa = Ratio(1.01, 0.97, 1.02, True)
    assert aa_noise_floor(aa) == pytest.approx(0.03)
    tight = Ratio(1.02, 1.01, 1.03, True)  # its interval excludes 1 ...
    assert tight.verdict == "better"
    floored = Ratio(1.02, 1.01, 1.03, True, noise_floor=aa_noise_floor(aa))
    assert floored.verdict == "within noise"  # ... but A/A moved as much
    beyond = Ratio(0.90, 0.88, 0.92, True, noise_floor=0.03)
    assert beyond.verdict == "worse"
    assert math.isnan(aa_noise_floor(Ratio(1.0, math.nan, math.nan, True)))


PLAN = """
name = "t-aa"
seed = 4
repetitions = 3
warmups = 0
aa = true
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "compress"
params = { corpus_mib = 2, threads = 1 }
"""


def test_aa_runs_the_baseline_again_under_its_own_name() -> None:
    plan = parse_plan(PLAN)
    assert [e.name for e in plan.run_environments] == ["native", "native-aa"]
    assert [e.kind for e in plan.run_environments] == ["native", "native"]
    assert [e.name for e in parse_plan(PLAN.replace("aa = true", "")).run_environments] \
        == ["native"]
    clash = PLAN + '[[environments]]\nname = "native-aa"\nkind = "native"\n'
    with pytest.raises(PlanError, match="already an environment's name"):
        parse_plan(clash)


@pytest.mark.integration
def test_noise_floor_of_a_real_native_against_native_run(image: ImageArtifacts,
                                                         tmp_path: Path) -> None:
    with ran(PLAN, image, tmp_path) as (store, run_id):
        d = analyze(store, run_id)
        envs = [e.name for e in store.environments(run_id)]
    assert envs == ["native", "native-aa"] and d.aa_env == "native-aa"
    floors = {r.metric: f for r, f in d.noise_floor.items()}
    assert 0 <= floors["throughput"] < 1, floors
    md = markdown.render(d)
    assert "### Noise floor (A/A: native against native-aa)" in md
    assert '"aa_environment": "native-aa"' in json_report.render(d)
