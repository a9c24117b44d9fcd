"""Words a reader can trust (issue 28, item 9): the Summary shows the interval its verdict came
from or names the other one, the limiter never says "undetermined" beside an "undecided"
verdict, a warning's count counts ratios, no "rounds were added ... 0 round(s)", emulation is
explained once per report, and `compare` of a run with itself says so."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from support import ROOT

from isotax.analysis import sequential
from isotax.analysis.compare import NotComparable, compare
from isotax.analysis.limiter import Limiter, aggregate, suspect
from isotax.analysis.report_data import ReportData, ReportWarning, analyze
from isotax.analysis.stats import Ratio
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.report import decisions, emulation, html, markdown
from isotax.report.figures import _judged
from isotax.report.terminal import grouped_warnings, print_warnings
from isotax.report.verdicts_section import verdict_words
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.run_meta import SequentialMeta
from isotax.store.sqlite import SQLiteStore

PLAN = 'name = "t"\nrepetitions = 3\n'
# native; runc and crun near it (undecided at 3 pairs); qemu emulated, 0.2x (decided worse).
VALUES = {"native": [100.0, 104.0, 96.0], "runc": [97.0, 103.0, 99.0],
          "crun": [101.0, 98.0, 103.0], "qemu": [20.0, 21.0, 19.0]}


def _store(tmp_path: Path) -> SQLiteStore:
    s = SQLiteStore(tmp_path / "isotax.db")
    s.create_run("r1", "t", PLAN, 1, {"hostname": "h", "kernel": "6.1"})
    for env in VALUES:
        describe = {"accelerator": "tcg", "emulated": "yes"} if env == "qemu" else {}
        s.put_environment(EnvRecord("r1", env, env, True, "",
                                    EnvironmentDescription.from_stored(describe),
                                    {}, {"ready": 0.1}))
    for env, vals in VALUES.items():
        for rep, v in enumerate(vals, start=1):
            s.commit_cell("r1", CellKey(env, "compress", {"level": 2}, rep), "1",
                          CellOutcome(CellStatus.OK, "", [Sample("throughput", v, "MB/s")]), 0, 1)
    s.set_run_status("r1", "complete", 2.0)
    return s


@pytest.fixture
def data(tmp_path: Path) -> ReportData:
    return analyze(_store(tmp_path), "r1")


def _summary(page: str) -> str:
    """The HTML report's Summary section alone."""
    return page.split(">Summary</h2>", 1)[1].split("</h2>", 1)[0]


# -- 1. the Summary shows the interval its verdict came from ------------------------------------


def test_the_summary_shows_the_verdicts_interval_not_the_bootstrap(data: ReportData) -> None:
    row = data.rows[0]
    r = data.cells[(row, "runc")].ratio
    v = decisions.verdict_of(data, row, "runc")
    assert r is not None and v is not None and v.verdict.value == "undecided"
    # The bootstrap interval is far narrower: showing it beside "?" was the confusion.
    assert v.high - v.low > 2 * (r.ci_high - r.ci_low)
    summary = _summary(html.render(data))
    assert f"{r.ratio:.3f} ? <span class=small>{v.interval()}</span>" in summary
    assert f"[{r.ci_low:.3f}, {r.ci_high:.3f}]" not in summary
    assert "in brackets the 95% confidence sequence its verdict came from" in summary
    assert "line: the 95% confidence sequence its verdict came from" in summary


def test_a_ratio_without_a_verdict_names_its_bootstrap_interval() -> None:
    r = Ratio(0.9, 0.88, 0.92, True)
    assert html.ratio_cell(r) == \
        '<div class="worse">0.900 <span class=small>95% bootstrap [0.880, 0.920]</span></div>'
    assert verdict_words(r, False) == "0.900, 95% bootstrap [0.880, 0.920]: worse"


def test_every_result_gives_the_verdict_with_its_sequence(data: ReportData) -> None:
    row = data.rows[0]
    v = decisions.verdict_of(data, row, "runc")
    r = data.cells[(row, "runc")].ratio
    assert v is not None and r is not None
    assert verdict_words(r, False, v) == \
        f"{r.ratio:.3f}: undecided (the verdict's 95% confidence sequence {v.interval()})"


def test_the_bootstrap_table_says_it_decides_nothing(data: ReportData) -> None:
    md = markdown.render(data)
    heading = md.index("### Ratio to native, with 95% bootstrap interval")
    assert md.index(markdown.BOOTSTRAP_IS_NOT_THE_VERDICT) > heading


def test_the_summary_figure_draws_the_sequence_and_nothing_while_unbounded(
        data: ReportData) -> None:
    row = data.rows[0]
    r = data.cells[(row, "runc")].ratio
    v = decisions.verdict_of(data, row, "runc")
    assert r is not None and v is not None
    drawn = _judged(data, row, "runc", r)
    assert (drawn.ci_low, drawn.ci_high) == (v.low, v.high) and drawn.ratio == r.ratio
    unbounded = v.__class__(v.verdict, v.ratio, 0.0, math.inf, v.margin, 1,
                            v.higher_is_better, v.reason)
    assert all(math.isnan(x) for x in decisions.sequence_bounds(unbounded))
    # JSON's ends (compare, the layers, the fleet): None while unbounded, the bounds after.
    assert unbounded.ends == (None, None) and v.ends == (v.low, v.high)


# -- 2. the limiter's word is not the verdict's --------------------------------------------------


def test_the_limiter_never_says_undetermined_or_undecided() -> None:
    assert Limiter.NO_CLEAR.value == "no clear limiter"
    assert not any(w in lim.value for lim in Limiter for w in ("undetermined", "undecided"))
    assert suspect(None).words == "no clear limiter: no telemetry for this run"
    assert aggregate([]).words == "no clear limiter: no repetitions"
    schema = json.loads((ROOT / "src/isotax/report/schema/results.schema.json").read_text())
    assert schema["$defs"]["Limiter"]["enum"][-1] == "no clear limiter"
    assert "undetermined" not in json.dumps(schema)


# -- 3. a warning's count counts ratios ----------------------------------------------------------


def test_undecided_verdicts_are_counted_by_ratio(data: ReportData) -> None:
    undecided = [w for w in data.warnings if getattr(w, "kind", None) is ReportWarning.UNDECIDED]
    assert len(undecided) == 1 and undecided[0].startswith("2 of 3 headline ratio(s)")
    buf = io.StringIO()
    print_warnings(data, Console(file=buf, width=100))
    assert "warning: undecided verdicts (2); see the report's Warnings" in buf.getvalue()
    # Without the counts a kind counts its warnings: one paragraph for two ratios.
    assert "warning: undecided verdicts (1); see the report's Warnings" in \
        grouped_warnings(data.warnings)


def test_failed_cells_are_counted_by_cell() -> None:
    said = [ReportWarning.FAILURES.say(count=5, env="runc"),
            ReportWarning.FAILURES.say(count=7, env="crun")]
    assert grouped_warnings(said, counts={ReportWarning.FAILURES: 12}) == [
        "warning: failed cells (12): runc, crun; see the report's Warnings"]


def test_correlated_pairs_and_rejudged_verdicts_are_counted_by_ratio() -> None:
    from types import SimpleNamespace
    from typing import cast

    from isotax.report.terminal import warning_counts

    ratios = [SimpleNamespace(lag1=x) for x in (0.5, 0.6, 0.7, 0.1, math.nan)]
    d = cast(ReportData, SimpleNamespace(
        sequential=SimpleNamespace(ratios=ratios, decided=5), rejudged=["a", "b", "c"],
        failures=[], outliers=[], unwatched=0, asked_ratios=lambda: []))
    counts = warning_counts(d)
    assert counts[ReportWarning.CORRELATED_PAIRS] == 3  # two environments' warnings, 3 ratios
    assert counts[ReportWarning.REJUDGED] == 3 and counts[ReportWarning.UNDECIDED] == 0


# -- 4. no "rounds were added ... 0 round(s)" ----------------------------------------------------


def test_no_round_added_says_so_and_why() -> None:
    meta = SequentialMeta(ended=sequential.TIME_SPENT, rounds=0, added_cells=0, spent_s=0.0)
    assert decisions.added_rounds_words("r1", 3, 10, meta) == (
        "After the 3 fixed rounds no round was added (the plan allows up to 10 runs a point): "
        "time budget reached (not one more pair of an undecided ratio fit in the time left "
        "after the 3 fixed rounds).")
    meta = meta.model_copy(update={"ended": sequential.ALL_DECIDED})
    assert decisions.added_rounds_words("r1", 3, 10, meta) == (
        "After the 3 fixed rounds no round was added (the plan allows up to 10 runs a point): "
        "every headline ratio decided.")


def test_rounds_added_are_counted_and_an_unfinished_one_named() -> None:
    meta = SequentialMeta(ended=sequential.TIME_SPENT, rounds=2, added_cells=8, spent_s=30.4)
    assert decisions.added_rounds_words("r1", 5, 8, meta) == (
        "After the 5 fixed rounds, 2 round(s) were added for the undecided ratios (8 cell(s) "
        "in 30 s; up to 8 runs a point). Added rounds ended: time budget reached.")
    meta = meta.model_copy(update={"ended": None})
    assert decisions.added_rounds_words("r1", 5, 8, meta).startswith(
        "**Not finished**: the run stopped during added round 3, after the 5 fixed rounds; "
        "`isotax run --resume r1`")
    meta = meta.model_copy(update={"ended": sequential.TIME_SPENT})
    assert decisions.added_rounds_words("r1", 1, 40, meta).startswith(
        "After the fixed round, 2 round(s) were added")  # one round: no "1 fixed rounds"


# -- 5. emulation explained once -----------------------------------------------------------------


def test_emulation_is_explained_once_at_the_top_of_each_report(data: ReportData) -> None:
    explained = "measure the emulator"
    assert sum(explained in w for w in data.warnings) == 1  # results.json keeps it whole
    md, page = markdown.render(data), html.render(data)
    for text in (md, page):
        assert text.count(explained) == 1
        assert text.index(explained) < text.index("qemu (emulated)")  # before the first mark
        assert emulation.POINTER.format(env="qemu") in text
    assert emulation.report_warnings(data).count(emulation.POINTER.format(env="qemu")) == 1


# -- 6. compare of a run with itself ------------------------------------------------------------


def test_a_run_is_not_compared_with_itself(tmp_path: Path) -> None:
    store = _store(tmp_path)
    run, cells = store.get_run("r1"), store.cells("r1")
    with pytest.raises(NotComparable, match=r"^both sides are the same run \(r1\): .*give "
                                            r"two different runs"):
        compare(run, cells, run, cells, force=True)
    store.close()
    for extra in ([], ["--force"]):
        done = subprocess.run([sys.executable, "-m", "isotax", "compare", "r1", "r1",
                               "--results", str(tmp_path), "--out", str(tmp_path / "cmp"),
                               *extra], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.strip().splitlines() == [
            "isotax: both sides are the same run (r1): every ratio would be 1 by "
            "construction; give two different runs (a bundle of a run is that same run)"]
        assert not (tmp_path / "cmp").exists()
