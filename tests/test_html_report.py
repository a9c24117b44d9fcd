"""The self-contained HTML report: generated from a stored run, nothing fetched from outside,
every host and plan string escaped, and opened in headless Chromium for a screenshot that is
not blank and a console without errors."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import escape
from pathlib import Path

import pytest
from support import ran, requires_root_and

from isotax.analysis.report_data import analyze
from isotax.host.fingerprint import fingerprint
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellKey, CellStatus, Sample
from isotax.report import html, markdown, write_reports
from isotax.store.base import EnvRecord
from isotax.store.sqlite import SQLiteStore
from isotax.telemetry.envcpu import METRIC as ENV_CPU

HOSTILE_HOST = "<script>alert('host')</script>\x1b[31m\x07"
HOSTILE_CPU = '"><img src=x onerror=alert(1)>'
HOSTILE_PLAN = """
name = "hostile"
description = "</pre><script>alert('plan')</script>"
repetitions = 2
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
[[workloads]]
name = "compress"
params = { corpus_mib = 1 }
"""


def _hostile_store(tmp_path: Path) -> tuple[SQLiteStore, str]:
    """A stored run whose host name, CPU model and plan carry markup, with results."""
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r1", "hostile", HOSTILE_PLAN, 1,
                     {"hostname": HOSTILE_HOST, "cpu_model": HOSTILE_CPU, "cpus": 2})
    params = {"corpus_mib": 1, "level": 2, "seed": 1, "threads": 0}
    for rep, (a, b) in enumerate([(10.0, 9.0), (10.5, 9.2), (9.8, 9.1)], start=1):
        for env, v in (("native", a), ("runc", b)):
            store.commit_cell("r1", CellKey(env, "compress", params, rep), "1", CellStatus.OK,
                              "", 0, 1, [Sample("throughput", v, "MB/s", True)])
    store.set_run_status("r1", "complete", 2)
    return store, "r1"


def _self_contained(page: str) -> None:
    assert "<script" not in page.lower()
    assert not re.search(r"""\b(src|href)\s*=\s*["']?(https?:|//)""", page, re.I)
    assert "<link" not in page.lower() and "@import" not in page


def test_hostile_strings_are_escaped(tmp_path: Path) -> None:
    store, run_id = _hostile_store(tmp_path)
    page = html.render(analyze(store, run_id))
    _self_contained(page)
    assert HOSTILE_HOST not in page and "&lt;script&gt;alert(&#x27;host&#x27;)" in page
    # A terminal colour code is dropped, another control character shows as U+FFFD.
    assert "\x1b" not in page and "\x07" not in page and "&lt;/script&gt;\ufffd" in page
    assert HOSTILE_CPU not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;/pre&gt;&lt;script&gt;alert(&#x27;plan&#x27;)" in page
    assert ">Results</h2>" in page and "<svg" in page  # results rendered, with a figure


RICH_PLAN = """
name = "rich"
repetitions = 5
aa = true
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
network = "bridge"
[[environments]]
name = "runc-host"
kind = "runc"
network = "host"
[[workloads]]
name = "compress"
params = { corpus_mib = 16 }
[[workloads]]
name = "rr"
"""


def _rich_store(tmp_path: Path) -> tuple[SQLiteStore, str]:
    """A stored run with every section the Markdown report can have: the host's whole
    fingerprint (with a hostile name), telemetry (verdicts, cost), the environments' own
    CPU, a layer (bridge → host), an A/A noise floor, an outlier, a failure, a point that
    does not apply, adaptive repetitions, startup and density."""
    host = {**fingerprint(Path(__file__).parent / "data" / "host" / "this-host"),
            "hostname": HOSTILE_HOST}
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r", "rich", RICH_PLAN, 1, host)
    envs = {"native": 1.0, "native-aa": 1.01, "runc": 0.9, "runc-host": 0.97}
    for env in envs:
        store.put_environment(EnvRecord("r", env, env.split("-")[0], True, "",
                                        {"network": "bridge"} if env == "runc" else {},
                                        {"xz-utils": "5.4.1"}, {"ready": 0.1}))
    cost = Path(__file__).parent / "data" / "cost"
    params = {"corpus_mib": 16, "level": 2}
    for rep in range(1, 6):
        for env, k in envs.items():
            summary = json.loads((cost / f"{'native' if env.startswith('native') else 'runc'}"
                                  "-compress-1.json").read_text())
            value = (100.0 + rep % 3) * k * (0.6 if (env, rep) == ("native", 5) else 1.0)
            store.commit_cell("r", CellKey(env, "compress", params, rep), "1", CellStatus.OK,
                              "", rep, rep + 1,
                              [Sample("throughput", value, "MB/s"),
                               Sample(ENV_CPU, 0.5 * rep, "s", False,
                                      {"by_program": {"runc": 0.2, "xz": 0.3}})],
                              (summary, {"t": [0.5]}))
            store.commit_cell("r", CellKey(env, "startup", {"starts": 3}, rep), "1",
                              CellStatus.OK, "", 0, 1,
                              [Sample("ready_ms", 20.0 * k, "ms", False),
                               Sample("ready_p95_ms", 30.0 * k, "ms", False)])
        store.commit_cell("r", CellKey("runc-host", "rr", {"proto": "tcp"}, rep), "1",
                          CellStatus.NOT_APPLICABLE, "no network to measure", 0, 1, [])
    for env in envs:
        store.commit_cell("r", CellKey(env, "density", {"max_instances": 2}, 1), "1",
                          CellStatus.OK, "", 0, 1,
                          [Sample("idle_instance_mib", 1.5, "MiB", False)])
    store.commit_cell("r", CellKey("runc", "compress", params, 6), "1", CellStatus.FAILED,
                      "SanityError: <b>xz</b> output differs", 0, 1, [])
    store.put_run_meta("r", "adaptive", {
        "target": 0.02, "budget_s": 60, "max_repetitions": 5, "min_repetitions": 2,
        "metrics": "all", "repetitions": 3, "ended": "budget spent", "rounds": 2,
        "added_cells": 8, "spent_s": 30.0, "met": 0, "ratios": [
            {"environment": "runc", "workload": "compress", "params": "corpus_mib=16,level=2",
             "metric": "throughput", "ratio": 0.9, "half_width": 0.03, "n": 5,
             "n_baseline": 5, "met": False}]})
    store.set_run_status("r", "complete", 9)
    return store, "r"


def test_every_section_of_the_markdown_is_in_the_html(tmp_path: Path) -> None:
    """report.md's sections (## and ###) are report.html's, each ## one in the contents; the
    warnings' "see Failures/Outliers/Repetitions" link to theirs."""
    for store, run_id in (_hostile_store(tmp_path), _rich_store(tmp_path / "rich")):
        d = analyze(store, run_id)
        md, page = markdown.render(d), html.render(d)
        _self_contained(page)
        sections = [ln[3:] for ln in md.splitlines() if ln.startswith("## ")]
        subsections = [ln[4:] for ln in md.splitlines() if ln.startswith("### ")]
        assert "Results" in sections and "Plan (exact)" in sections
        for title in sections:
            shown = escape(title.replace("\\|", "|"))
            assert re.search(f"<h2 id=[^>]+>{re.escape(shown)}</h2>", page), title
            assert re.search(f"<a href=#[^>]+>{re.escape(shown)}</a>", page), title
        for title in subsections:
            assert f">{escape(title.replace(chr(92) + '|', '|'))}</h3>" in page, title
        ids = re.findall(r"<h[23] id=([^ >]+)>", page)
        assert len(ids) == len(set(ids))  # every anchor leads to one place
        for href in re.findall(r"<a (?:class=small )?href=#([^ >]+)>", page):
            assert href in ids, href
    # The rich run has every section the Markdown can have.
    assert {"Host", "Environments", "Results", "Every result: is it real, what it cost, "
            "what limited it", "Repetitions", "Attribution to layers", "CPU of the "
            "environments' own host processes", "Tool versions", "Not applicable", "Outliers",
            "Failures", "Warnings", "Plan (exact)"} <= set(sections)
    assert {"Noise floor (A/A: native against native-aa)", "Startup phases",
            "Memory footprint and density", "compress"} <= {t.split(" (")[0] if
                                                            t.startswith(("Startup", "Memory"))
                                                            else t for t in subsections}
    # The same content: the markdown's tables' cells, and its markup as markup, not text.
    assert "<td>runc → runc-host</td>" in page and "<b>not met</b>" in page
    assert "SanityError: &lt;b&gt;xz&lt;/b&gt; output differs" in page
    assert "<b>Ended: budget spent.</b>" in page and "<details><summary>Evidence" in page
    assert HOSTILE_HOST not in page and "<td>SMT</td>" in page
    for name in ("Failures", "Outliers", "Repetitions"):
        assert f"see <a href=#{name.lower()}>{name}</a>" in page, name


@pytest.mark.integration
@requires_root_and("runc")
def test_html_from_a_real_stored_run(image: ImageArtifacts, tmp_path: Path) -> None:
    plan = """
name = "html"
repetitions = 2
warmups = 0
[telemetry]
interval_s = 0.25
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
network = "none"
[[workloads]]
name = "compress"
params = { corpus_mib = 4, threads = 1 }
"""
    with ran(plan, image, tmp_path) as (store, run_id):
        paths = write_reports(analyze(store, run_id), tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text()
    assert tmp_path / "out" / "report.html" in paths
    _self_contained(page)
    for section in ("Summary", "Results", "Figures", "CPU per unit of work", "Environments",
                    "Plan (exact)"):
        assert f">{section}</h2>" in page and f">{section}</a>" in page  # and in the contents
    assert page.count("<svg") >= 3  # summary, bars, cost
    assert "CPU-s per GB" in page  # the cost figure's axis
    assert "one core" in page or "all cores" in page or "undetermined" in page  # limiter


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _open(page: Path, shot: Path) -> str:
    """Headless Chromium renders page into shot; returns its log (console messages too)."""
    chromium = _chromium()
    assert chromium is not None
    done = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--window-size=1300,2400", "--enable-logging=stderr", "--v=0",
         f"--screenshot={shot}", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert shot.exists(), done.stderr[-2000:]
    return done.stderr


def _console_errors(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if "CONSOLE" in ln]


@pytest.mark.skipif(_chromium() is None,
                    reason="chromium is not installed (scripts/setup.sh installs it)")
def test_chromium_screenshot_is_not_blank_and_console_clean(tmp_path: Path) -> None:
    from PIL import Image

    # The check itself can fail: a page that logs a console error is caught.
    control = tmp_path / "control.html"
    control.write_text("<html><body><script>console.error('isotax-control')</script>"
                       "</body></html>")
    assert any("isotax-control" in ln for ln in _console_errors(
        _open(control, tmp_path / "control.png")))

    store, run_id = _hostile_store(tmp_path)
    out = tmp_path / "out"
    write_reports(analyze(store, run_id), out, ("html",))
    shot = tmp_path / "report.png"
    log = _open(out / "report.html", shot)
    assert _console_errors(log) == []
    img = Image.open(shot).convert("RGB")
    colours = img.getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 20  # text, tables and a figure, not a blank page
    extrema = img.convert("L").getextrema()
    assert extrema[0] < 64 and extrema[1] > 192  # dark text on a light page


@pytest.mark.skipif(_chromium() is None,
                    reason="chromium is not installed (scripts/setup.sh installs it)")
def test_chromium_opens_the_figures_and_the_comparison(tmp_path: Path) -> None:
    """The report with every figure, and the comparison with its overlays, render in
    Chromium without a console message; the figures' colours reach the screenshot."""
    from PIL import Image
    from test_report_figures import figure_store

    from isotax.analysis.compare import compare
    from isotax.report import compare_html

    store_a, a = figure_store(tmp_path / "a", "a")
    store_b, b = figure_store(tmp_path / "b", "b", {"native": 1.0, "runc": 1.5})
    da, db = analyze(store_a, a), analyze(store_b, b)
    pages = {"report": html.render(da),
             "compare": compare_html.render(compare(store_a.get_run(a), store_a.cells(a),
                                                    store_b.get_run(b), store_b.cells(b)),
                                            da, db)}
    for name, text in pages.items():
        page = tmp_path / f"{name}.html"
        page.write_text(text)
        _self_contained(text)
        shot = tmp_path / f"{name}.png"
        assert _console_errors(_open(page, shot)) == [], name
        rgb = Image.open(shot).convert("RGB")
        # tab10's first two colours (native, runc) are drawn somewhere on the first screen.
        found = {c for _, c in rgb.getcolors(maxcolors=1 << 20) or []}
        assert (31, 119, 180) in found and (255, 127, 14) in found, name
