"""The noise floor: the baseline run twice (A/A), interleaved like everything else; a
difference no larger than A/A shows is within noise."""

from __future__ import annotations

import math

import pytest
from support import AA_PLAN

from isotax.analysis.stats import Ratio, aa_noise_floor
from isotax.plan import PlanError, parse_plan


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


def test_aa_runs_the_baseline_again_under_its_own_name() -> None:
    plan = parse_plan(AA_PLAN)
    assert [e.name for e in plan.run_environments] == ["native", "native-aa"]
    assert [e.kind for e in plan.run_environments] == ["native", "native"]
    assert [e.name for e in parse_plan(AA_PLAN.replace("aa = true", "")).run_environments] \
        == ["native"]
    clash = AA_PLAN + '[[environments]]\nname = "native-aa"\nkind = "native"\n'
    with pytest.raises(PlanError, match="already an environment's name"):
        parse_plan(clash)
