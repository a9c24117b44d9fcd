"""Renderers: each turns a ReportData into text, nothing else. One module per format.

May import analysis and everything below it (workloads' figure hints come through protocols);
never run or cli. No statistics here: what a number means was decided by the analysis.
"""

from __future__ import annotations

from pathlib import Path

from isotax.analysis.report_data import ReportData
from isotax.report import csv_report, json_report, markdown

FILENAMES = {"md": "report.md", "csv": "results.csv", "json": "results.json",
             "html": "report.html"}


def _html(data: ReportData) -> str:
    from isotax.report import html  # matplotlib is loaded only when HTML is written

    return html.render(data)


RENDERERS = {"md": markdown.render, "csv": csv_report.render, "json": json_report.render,
             "html": _html}


def write_reports(data: ReportData, out_dir: Path,
                  formats: tuple[str, ...] = ("md", "csv", "json", "html")) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        path = out_dir / FILENAMES[fmt]
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(RENDERERS[fmt](data))
        tmp.replace(path)  # a reader never sees half a report
        written.append(path)
    return written
