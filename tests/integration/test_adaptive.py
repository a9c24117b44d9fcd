"""Adaptive repetitions for real: runs through the Runner on the native environment with a
workload whose spread the test sets."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from support import ADAPTIVE_PLAN, SpreadWorkload, ran, requires_root_and

from isotax.analysis import adaptive
from isotax.analysis.adaptive import BUDGET_REACHED, CAP_REACHED, TARGET_MET
from isotax.analysis.report_data import analyze
from isotax.image.artifacts import ImageArtifacts
from isotax.plan import parse_plan
from isotax.report import json_report, markdown
from isotax.run.runner import Runner
from isotax.run.schedule import new_run_id
from isotax.store.base import CellRecord
from isotax.store.sqlite import SQLiteStore

# Each test runs the native environment, whose CPU accounting group needs root.
pytestmark = requires_root_and(root_for="the native environment's CPU accounting cgroup")


def _reps(store: SQLiteStore, run_id: str) -> dict[tuple[str, str], list[int]]:
    """(environment, params key) -> its measured repetition numbers in commit order."""
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for c in store.cells(run_id):
        out[(c.key.environment, c.key.params_key)].append(c.key.repetition)
    return out


def test_small_spread_meets_the_target_before_the_cap(tmp_path: Path, spread: None) -> None:
    text = ADAPTIVE_PLAN.format(adaptive="[adaptive]\ntarget = 0.02\nmax_repetitions = 40",
                        params="{ spread = 0.04 }")
    with ran(text, ImageArtifacts("t", tmp_path / "i"), tmp_path) as (store, run_id):
        meta = store.run_meta(run_id)["adaptive"]
        reps = _reps(store, run_id)
        md = markdown.render(analyze(store, run_id))
    assert meta["ended"] == TARGET_MET and meta["met"] == 1
    (r,) = meta["ratios"]
    assert r["met"] and r["half_width"] <= 0.02 and r["environment"] == "native2"
    # more than the 3 fixed repetitions were needed, far fewer than the cap
    assert 3 < r["n"] < 40 and r["n"] == r["n_baseline"]
    for got in reps.values():  # the baseline ran alongside; numbers continue 1, 2, 3, 4, ...
        assert sorted(got) == list(range(1, r["n"] + 1))
    assert meta["rounds"] == r["n"] - 3 and meta["added_cells"] == 2 * (r["n"] - 3)
    assert "## Repetitions" in md and "**Ended: target met.**" in md
    assert "1 of 1 ratios met the target" in md


def test_large_spread_ends_at_the_cap_and_says_not_met(tmp_path: Path, spread: None) -> None:
    text = ADAPTIVE_PLAN.format(adaptive="[adaptive]\ntarget = 0.02\nmax_repetitions = 8",
                        params="{ spread = [0.002, 0.3] }")
    with ran(text, ImageArtifacts("t", tmp_path / "i"), tmp_path) as (store, run_id):
        meta = store.run_meta(run_id)["adaptive"]
        reps = _reps(store, run_id)
        d = analyze(store, run_id)
    assert meta["ended"] == CAP_REACHED
    by_spread = {r["params"]: r for r in meta["ratios"]}
    tight, wide = by_spread["sleep_s=0.0,spread=0.002"], by_spread["sleep_s=0.0,spread=0.3"]
    # tight enough after the fixed rounds, but met only once both sides have
    # min_repetitions (5 by default): two rounds were added for it, then no more
    assert tight["met"] and tight["n"] == 5
    assert not wide["met"] and wide["n"] == wide["n_baseline"] == 8
    assert Counter(len(v) for v in reps.values()) == Counter({5: 2, 8: 2})
    # the report's own interval is the one adaptive repetitions judged
    row = next(r for r in d.rows if r.params_key == wide["params"])
    rr = d.cells[(row, "native2")].ratio
    assert rr is not None and adaptive.half_width(rr) == pytest.approx(wide["half_width"])
    md = markdown.render(d)
    section = md.split("## Repetitions")[1].split("\n## ")[0]
    assert "**Ended: repetition cap reached.**" in section and "**not met**" in section
    assert "1 of 2 ratios met the target" in section
    doc = json.loads(json_report.render(d))
    assert doc["adaptive"]["ended"] == CAP_REACHED and len(doc["adaptive"]["ratios"]) == 2


def test_the_time_budget_ends_it_with_rounds_kept_balanced(tmp_path: Path,
                                                           spread: None) -> None:
    text = ADAPTIVE_PLAN.format(adaptive="[adaptive]\ntarget = 0.02\nbudget_s = 1.5",
                        params="{ spread = 0.3, sleep_s = 0.1 }")
    with ran(text, ImageArtifacts("t", tmp_path / "i"), tmp_path) as (store, run_id):
        meta = store.run_meta(run_id)["adaptive"]
        cells = store.cells(run_id)
    assert meta["ended"] == BUDGET_REACHED and meta["added_cells"] >= 2
    longest = max(c.ended - c.started for c in cells)
    assert meta["spent_s"] <= 1.5 + longest  # no cell started once the budget was spent
    n = Counter(c.key.environment for c in cells)
    assert abs(n["native"] - n["native2"]) <= 1


def test_resume_of_an_interrupted_adaptive_run_goes_on(tmp_path: Path, spread: None) -> None:
    text = ADAPTIVE_PLAN.format(adaptive="[adaptive]\ntarget = 0.02\nmax_repetitions = 6",
                        params="{ spread = 0.3 }")
    plan = parse_plan(text)
    store = SQLiteStore(tmp_path / "isotax.db")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, text, plan.seed, {"hostname": "h"})
    image = ImageArtifacts("t", tmp_path / "i")
    try:
        SpreadWorkload.interrupt_at = 6 + 3  # in the second added round
        assert Runner(plan, text, store, image, log=lambda m: None).run(run_id) == "interrupted"
        first = store.cells(run_id)
        assert len(first) == 8 and store.run_meta(run_id)["adaptive"]["ended"] is None
        assert markdown.render(analyze(store, run_id)).count("**Not finished**") == 1
        SpreadWorkload.interrupt_at = None
        assert Runner(plan, text, store, image, log=lambda m: None).run(run_id) == "complete"
        after = store.cells(run_id)
        meta = store.run_meta(run_id)["adaptive"]
    finally:
        store.close()
    assert [c.id for c in after[:8]] == [c.id for c in first]  # kept as they were
    assert len({c.key.ident for c in after}) == len(after) == 12
    assert meta["ended"] == CAP_REACHED and meta["rounds"] == 3
    assert all(sorted(v) == list(range(1, 7)) for v in _reps_of(after).values())


def _reps_of(cells: list[CellRecord]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for c in cells:
        out[c.key.environment].append(c.key.repetition)
    return out
