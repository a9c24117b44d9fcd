"""Renderers: each turns a ReportData into text, nothing else. One module per format.

May import analysis and everything below it (workloads' figure hints come through protocols);
never run or cli. No statistics here: what a number means was decided by the analysis.
"""

from __future__ import annotations

import errno
from pathlib import Path

from isotax.analysis.report_data import ReportData
from isotax.report import csv_report, json_report, markdown
from isotax.store.base import DiskFull

FILENAMES = {"md": "report.md", "csv": "results.csv", "json": "results.json",
             "html": "report.html", "claims": "claims.csv"}


def _html(data: ReportData) -> str:
    from isotax.report import html  # matplotlib is loaded only when HTML is written

    return html.render(data)


def _claims_csv(data: ReportData) -> str:
    from isotax.report.claims_section import verdicts
    from isotax.report.claims_table import claims_csv

    shown = verdicts(data)
    return claims_csv(shown) if shown else ""


RENDERERS = {"md": markdown.render, "csv": csv_report.render, "json": json_report.render,
             "html": _html, "claims": _claims_csv}


def write_reports(data: ReportData, out_dir: Path,
                  formats: tuple[str, ...] = ("md", "csv", "json", "claims", "html")
                  ) -> list[Path]:
    """Write each format into out_dir (claims.csv only where the run judges a claim); a full
    disk raises DiskFull (store.base) naming out_dir, and leaves no half-written file (a
    report written before stays as it was)."""
    written = []
    tmp = out_dir
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for fmt in formats:
            path = out_dir / FILENAMES[fmt]
            text = RENDERERS[fmt](data)
            if not text:
                continue
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_text(text)
            tmp.replace(path)  # a reader never sees half a report
            written.append(path)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        if tmp != out_dir:
            tmp.unlink(missing_ok=True)
        raise DiskFull(out_dir, f"the report of {data.run.id}") from e
    return written
