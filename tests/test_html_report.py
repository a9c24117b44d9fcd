"""The self-contained HTML report: generated from a stored run, nothing fetched from outside,
every host and plan string escaped, and opened in headless Chromium for a screenshot that is
not blank and a console without errors."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import ran, requires_root_and

from isotax.analysis import analyze
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellKey, CellStatus, Sample
from isotax.report import html, write_reports
from isotax.store.sqlite import SQLiteStore

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
    assert ">Table 1</h2>" in page and "<svg" in page  # results rendered, with a figure


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
    for section in ("Summary", "Table 1", "Figures", "CPU per unit of work", "Environments",
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

    from isotax.compare import compare
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
