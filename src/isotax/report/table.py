"""Row-wise view of a ReportData shared by the CSV, JSON and Markdown renderers, and the
blocks a report section is made of, shared by the Markdown and HTML renderers."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from isotax.analysis.report_data import ReportData


def _num(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def result_rows(d: ReportData) -> list[dict[str, Any]]:
    """One dict per (workload, parameters, metric, environment) that has values."""
    out = []
    for row in d.rows:
        for env in d.columns:
            cell = d.cells.get((row, env))
            if cell is None:
                continue
            r = cell.ratio
            out.append({
                "workload": row.workload,
                "params": row.params_key,
                "metric": row.metric,
                "unit": row.unit,
                "higher_is_better": row.higher_is_better,
                "environment": env,
                "emulated": d.emulated(env),
                "n": cell.summary.n,
                "mean": cell.summary.mean,
                "sd": cell.summary.sd,
                "ci_low": _num(cell.summary.ci_low),
                "ci_high": _num(cell.summary.ci_high),
                "ratio": r.ratio if r else None,
                "ratio_ci_low": _num(r.ci_low) if r else None,
                "ratio_ci_high": _num(r.ci_high) if r else None,
                "delta_pct": r.delta_pct if r else None,
                "verdict": r.verdict if r else ("baseline" if env == d.baseline else None),
                "values": list(cell.values),
            })
    return out


# A report section as data: the Markdown and the HTML report render the same blocks, so a
# section written once is in both. Text is markdown's inline form (**bold**, `code`), which
# the HTML renderer turns into markup after escaping.


@dataclass(frozen=True)
class Heading:
    level: int
    title: str


@dataclass(frozen=True)
class Text:
    """A paragraph; **bold** and `code` are its only markup."""

    text: str


@dataclass(frozen=True)
class Grid:
    """A table of plain-text cells (the renderer escapes them)."""

    header: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Items:
    """A bulleted list; each item is Text's inline form."""

    items: list[str]


@dataclass(frozen=True)
class Code:
    """Preformatted text: the exact plan."""

    lang: str
    text: str


@dataclass(frozen=True)
class Details:
    """A collapsed part: its summary line, then its blocks."""

    summary: str
    body: tuple[Block, ...]


@dataclass(frozen=True)
class Gap:
    """One more blank line in the markdown, nothing in HTML (it keeps a report written
    before these blocks existed byte for byte the same)."""


Block = Heading | Text | Grid | Items | Code | Details | Gap
MdTable = Callable[[list[str], list[list[str]]], list[str]]


def to_markdown(blocks: Sequence[Block], table: MdTable) -> list[str]:
    """Markdown lines: a blank line before every block, tables drawn by `table`."""
    out: list[str] = []
    for b in blocks:
        out.append("")
        if isinstance(b, Heading):
            out.append("#" * b.level + " " + b.title)
        elif isinstance(b, Text):
            out.append(b.text)
        elif isinstance(b, Grid):
            out += table(b.header, b.rows)
        elif isinstance(b, Items):
            out += [f"- {item}" for item in b.items]
        elif isinstance(b, Code):
            out += [f"```{b.lang}", b.text.rstrip().replace("```", "` ` `"), "```"]
        elif isinstance(b, Details):
            out += [f"<details><summary>{b.summary}</summary>", *to_markdown(b.body, table),
                    "", "</details>"]
    return out
