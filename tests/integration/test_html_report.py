"""The self-contained HTML report for real: from a run stored by the real Runner, and opened
in headless Chromium for a screenshot that is not blank and a console without errors."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support import figure_store, hostile_store, ran, requires_root_and, self_contained

from isotax.analysis.report_data import analyze
from isotax.image.artifacts import ImageArtifacts
from isotax.report import html, write_reports


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
    self_contained(page)
    for section in ("Summary", "Results", "Figures", "CPU per unit of work", "Environments",
                    "Plan (exact)"):
        assert f">{section}</h2>" in page and f">{section}</a>" in page  # and in the contents
    assert page.count("<svg") >= 3  # summary, bars, cost
    assert "CPU-s per GB" in page  # the cost figure's axis
    assert "one core" in page or "all cores" in page or "no clear limiter" in page  # limiter


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

    store, run_id = hostile_store(tmp_path)
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
        self_contained(text)
        shot = tmp_path / f"{name}.png"
        assert _console_errors(_open(page, shot)) == [], name
        rgb = Image.open(shot).convert("RGB")
        # tab10's first two colours (native, runc) are drawn somewhere on the first screen.
        found = {c for _, c in rgb.getcolors(maxcolors=1 << 20) or []}
        assert (31, 119, 180) in found and (255, 127, 14) in found, name


CLAIMS = """version = 1
[source]
study = "a test's claims"
[[claim]]
id = "runc-mysql-equal"
finding = "runc's MySQL equals native"
source_figure = "equal"
source_ratio = 1.0
environment = { kind = "runc" }
workload = "mysql"
params = { threads = 1 }
metric = "transactions_per_s"
relation = { equivalent_pct = 5 }
[[claim]]
id = "runc-mysql-slower"
finding = "runc's MySQL is slower"
source_figure = "-20%"
source_ratio = 0.8
environment = { kind = "runc" }
workload = "mysql"
params = { threads = 1 }
metric = "transactions_per_s"
relation = { worse_by_at_least_pct = 10 }
[[claim]]
id = "needs-a-big-host"
finding = "something a small host cannot show"
source_figure = "+8%"
not_measurable = "needs a 44-core host"
"""


@pytest.mark.skipif(_chromium() is None,
                    reason="chromium is not installed (scripts/setup.sh installs it)")
def test_chromium_renders_the_studies_section_with_its_colours(tmp_path: Path) -> None:
    """"The studies on this host": a run measured for a claims file (kept in its metadata)
    shows each claim's verdict coloured by its outcome and the figure of the source's ratio
    beside this host's; Chromium renders it without a console message, and the verdicts'
    colours reach the screenshot."""
    from PIL import Image

    store, run_id = figure_store(tmp_path)
    store.put_run_meta(run_id, "claims", {"files": {"mine.toml": CLAIMS}})
    text = html.render(analyze(store, run_id))
    self_contained(text)
    assert ">The studies on this host</h2>" in text
    for cls in ("claim-holds", "claim-fails", "claim-nothere"):
        assert f"<td class={cls}>" in text, cls
    assert "source ratio (hollow diamond)" in text  # the figure's caption: it was drawn
    # The section alone, as the report styles it, on one screen.
    start = text.index(">The studies on this host</h2>")
    section = text[text.rfind("<h2", 0, start):text.index("<h2", start + 10)]
    page = tmp_path / "claims.html"
    page.write_text(text[:text.index("<body>") + 6] + section + "</body></html>")
    shot = tmp_path / "claims.png"
    assert _console_errors(_open(page, shot)) == []
    found = {c for _, c in Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 20) or []}
    assert (200, 230, 201) in found and (255, 205, 210) in found  # holds, does not hold
    assert (46, 125, 50) in found and (198, 40, 40) in found  # the figure's dots and lines
