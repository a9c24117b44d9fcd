"""Sequential verdicts for real: runs through the Runner on the native environment against a
second native environment (an A/A pair, so the truth is "equivalent"), with a workload whose
spread the test sets."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from support import SEQUENTIAL_PLAN, SpreadWorkload, ran, requires_root_and

from isotax.analysis.report_data import analyze
from isotax.analysis.sequential import ALL_DECIDED, CANNOT_DECIDE
from isotax.image.artifacts import ImageArtifacts
from isotax.plan import parse_plan
from isotax.report import json_report, markdown
from isotax.run.runner import Runner
from isotax.store.sqlite import SQLiteStore

# Each test runs the native environment, whose CPU accounting group needs root.
pytestmark = requires_root_and(root_for="the native environment's CPU accounting cgroup")


def _reps(store: SQLiteStore, run_id: str) -> dict[tuple[str, str], list[int]]:
    """(environment, params key) -> its measured repetition numbers in commit order."""
    out: dict[tuple[str, str], list[int]] = defaultdict(list)
    for c in store.cells(run_id):
        out[(c.key.environment, c.key.params_key)].append(c.key.repetition)
    return out


def test_rounds_go_only_where_they_decide_and_stop_when_decided(tmp_path: Path,
                                                               spread: None) -> None:
    """Spread 0.1%: equivalent after the 3 fixed rounds, no more runs. 0.6%: undecided at 3,
    a few added rounds decide it. 20%: no number of runs up to the cap can, so none is
    spent on it. Every added cell pairs with the baseline's of its round."""
    text = SEQUENTIAL_PLAN.format(verdicts="[verdicts]\nmax_repetitions = 12\nbudget_s = 120",
                                  params="{ spread = [0.001, 0.006, 0.2] }")
    with ran(text, ImageArtifacts("t", tmp_path / "i"), tmp_path) as (store, run_id):
        meta = store.run_meta(run_id)["sequential"]
        reps = _reps(store, run_id)
        data = analyze(store, run_id)
        md = markdown.render(data)
        js = json_report.render(data)
    by = {r["params"]: r for r in meta["ratios"]}
    quiet, middle, loud = (by[f"sleep_s=0.0,spread={s}"] for s in (0.001, 0.006, 0.2))
    assert quiet["verdict"] == "equivalent" and quiet["pairs"] == 3
    assert reps[("native2", "sleep_s=0.0,spread=0.001")] == [1, 2, 3]
    assert middle["verdict"] == "equivalent" and 3 < middle["pairs"] <= 12
    assert loud["verdict"] == "undecided" and loud["pairs"] == 3
    assert "would not decide it" in loud["reason"]
    assert reps[("native2", "sleep_s=0.0,spread=0.2")] == [1, 2, 3]
    # the middle point's added cells: the same round numbers on both sides
    added = reps[("native2", "sleep_s=0.0,spread=0.006")][3:]
    assert added and added == reps[("native", "sleep_s=0.0,spread=0.006")][3:]
    assert meta["ended"] == CANNOT_DECIDE and meta["decided"] == 2 and meta["total"] == 3
    assert "**Verdicts: 2 of 3 headline ratios to native decided (2 equivalent); 1 " \
        "undecided.**" in md and "## Verdicts" in md
    assert '"decided": 2' in js and '"verdict": "undecided"' in js


def test_an_interrupted_run_resumes_its_rounds_from_the_store(tmp_path: Path,
                                                            spread: None) -> None:
    text = SEQUENTIAL_PLAN.format(verdicts="[verdicts]\nmax_repetitions = 12",
                                  params="{ spread = 0.01 }")
    SpreadWorkload.interrupt_at = 8  # in the added rounds (6 fixed cells)
    with ran(text, ImageArtifacts("t", tmp_path / "i"), tmp_path, status="interrupted") \
            as (store, run_id):
        SpreadWorkload.interrupt_at = None
        first = store.run_meta(run_id)["sequential"]
        assert first["ended"] is None
        plan = parse_plan(text)
        assert Runner(plan, text, store, ImageArtifacts("t", tmp_path / "i"),
                      log=lambda _: None).run(run_id) == "complete"
        meta = store.run_meta(run_id)["sequential"]
        phases = store.run_meta(run_id)["phases"]
    assert meta["ended"] == ALL_DECIDED and meta["decided"] == 1
    # the phases of both processes add up, and the workload is most of the run
    assert phases["wall_s"] > 0 and phases["seconds"]["workload"] > 0
    assert sum(phases["seconds"].values()) <= phases["wall_s"] + 0.01


def test_short_points_hold_several_runs_per_cell_and_their_pairs_narrow(
        tmp_path: Path, spread: None) -> None:
    """Cell length for real: a point whose run takes ~0.05 s holds cell_s / that many runs
    per cell (at most runs_per_cell), a long one holds one; the count is stored per
    environment and point, the cell's value is the runs' mean (labelled with the count), and
    the short point's pairs have the spread of a mean of that many runs."""
    from isotax.analysis import cell_length
    from isotax.analysis.headline import headline_values

    text = SEQUENTIAL_PLAN.format(
        verdicts="[verdicts]\nmargin = 0.5\ncell_s = 0.5\nruns_per_cell = 6",
        params="{ spread = 0.2, sleep_s = [0.0, 0.6] }")
    with ran(text, ImageArtifacts("t", tmp_path / "i"), tmp_path) as (store, run_id):
        meta = store.run_meta(run_id)
        cells = store.cells(run_id)
        md = markdown.render(analyze(store, run_id))
    short, long_ = "sleep_s=0.0,spread=0.2", "sleep_s=0.6,spread=0.2"
    for env in ("native", "native2"):
        assert cell_length.of(meta, env, "test-spread", short) == 6  # capped
        assert cell_length.of(meta, env, "test-spread", long_) == 1
    labels = {c.key.params_key: c.samples[0].labels for c in cells if not c.key.warmup}
    assert labels[short] == {cell_length.RUNS_LABEL: 6} and labels[long_] == {}
    # The means of 6 draws at 20% spread vary by ~8%, single draws by ~20%: over both
    # environments' 6 cells, a spread above 15% would be a 1-in-200 draw.
    import statistics
    values, _, _ = headline_values(cells)
    short_values = [v / 100 for env in ("native", "native2")
                    for v in values[(env, "test-spread", short)].values()]
    assert len(short_values) == 6 and statistics.stdev(short_values) < 0.15
    assert "test-spread ×6 (a cell's value is their mean)" in md
