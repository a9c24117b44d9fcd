"""The summary isotax prints at the end of a run or a report: each workload point's headline
ratio per environment, in at most 100 columns, and its warnings grouped one line per kind
(the reports print each in full). rich decides the rest: colour on a terminal that has it,
plain text when the output is piped or NO_COLOR is set."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from isotax.analysis.report_data import ReportData
from isotax.analysis.report_warnings import HIGH_LAG1, ReportWarning, by_kind, subjects
from isotax.report.decisions import context_lines, counts_line

WIDTH = 100
PREFIX = "warning: "
FULL = 200  # a kind's only warning is shown whole up to this many characters
SEE = "; see the report's Warnings"


def summary_table(d: ReportData) -> Table:
    envs = [e for e in d.columns if e != d.baseline]
    t = Table(title=f"ratio to {d.baseline} (headline metric; ≈ equivalent, ? undecided; ↑/↓ "
                    "higher/lower is better)", title_style="bold", expand=False,
              pad_edge=False)
    t.add_column("workload point", overflow="fold", max_width=34)
    for e in envs:
        t.add_column(d.label(e), justify="right", overflow="fold", max_width=14)
    for r in d.headline_rows():
        arrow = "↑" if r.higher_is_better else "↓"
        label = f"{r.workload} {d.sweep_label.get((r.workload, r.params_key), '')} " \
                f"{r.metric} {arrow}"
        cells: list[Text] = []
        for e in envs:
            cell = d.cells.get((r, e))
            rr = cell.ratio if cell else None
            if rr is None:
                cells.append(Text("n/a" if d.na_reason(e, r) else "—", style="dim"))
                continue
            if rr.within_noise:
                cells.append(Text(f"{rr.ratio:.3g} ≈", style="dim"))
            elif rr.decided == "undecided":
                cells.append(Text(f"{rr.ratio:.3g} ?"))
            else:
                style = "green" if rr.verdict == "better" else \
                    "red" if rr.verdict == "worse" else ""
                cells.append(Text(f"{rr.ratio:.3g}", style=style))
        t.add_row(" ".join(label.split()), *cells)
    return t


def print_summary(d: ReportData, console: Console | None = None) -> None:
    """Print the summary table within WIDTH columns (or the terminal's, if narrower)."""
    out = console or Console()
    width = min(WIDTH, out.width)
    if not d.rows or len(d.columns) < 2:
        out.print("no ratios: no results, or only the baseline ran")
        return
    out.print(summary_table(d), width=width)
    if counts_line(d):
        out.print(counts_line(d), width=width, markup=False, highlight=False)
    for line in context_lines(d):  # wrapped here: the console may not wrap (soft_wrap)
        out.print(textwrap.fill(line, width), width=width, markup=False, highlight=False)


def warning_counts(d: ReportData) -> dict[ReportWarning, int]:
    """How many of what its title names each kind is about, where one warning speaks for
    several (one "undecided verdicts" warning for all 41 undecided ratios, one "failed
    cells" warning per environment): read from the data the warnings were made from, so the
    terminal does not print "undecided verdicts (1)" for 41 ratios. Kinds left out count
    their warnings."""
    out: dict[ReportWarning, int] = {}
    seq = d.sequential
    if seq is not None and seq.ratios:
        out[ReportWarning.UNDECIDED] = sum(not r.verdict.verdict.decided
                                           for r in d.asked_ratios())
        # One warning per environment, each counting its ratios above the limit.
        out[ReportWarning.CORRELATED_PAIRS] = sum(r.lag1 > HIGH_LAG1 for r in seq.ratios)
    if d.rejudged:
        out[ReportWarning.REJUDGED] = len(d.rejudged)
    if d.failures:
        out[ReportWarning.FAILURES] = len(d.failures)
    if d.outliers:
        out[ReportWarning.OUTLIERS] = len(d.outliers)
    if d.unwatched:
        out[ReportWarning.NO_TELEMETRY] = d.unwatched
    return out


def grouped_warnings(warnings: Sequence[str], width: int = WIDTH,
                     counts: Mapping[ReportWarning, int] | None = None) -> list[str]:
    """One line per kind of warning, the most important kind first (ReportWarning's order):
    its title, how many (counts[kind] where given: the ratios, cells or values it is about;
    else its warnings), the environments it concerns and where to read them whole, within
    width where the title allows. A kind's only warning, if short, is its text in full; a
    warning without a kind (a plain str) is shown in full after the rest."""
    lines: list[str] = []
    for kind, said in by_kind(warnings):
        if kind is None or (len(said) == 1 and len(said[0]) <= FULL):
            lines += [PREFIX + w for w in said]
            continue
        lines.append(_group_line(kind.title, (counts or {}).get(kind, len(said)),
                                 subjects(said), width))
    return lines


def _group_line(title: str, count: int, subjects: list[str], width: int) -> str:
    """"warning: TITLE (COUNT): a, b and N more; see the report's Warnings", with as many
    subjects as fit in width (none when not even one does)."""
    head = f"{PREFIX}{title} ({count})"
    for shown in range(len(subjects), 0, -1):
        more = len(subjects) - shown
        line = f"{head}: {', '.join(subjects[:shown])}{f' and {more} more' if more else ''}{SEE}"
        if len(line) <= width:
            return line
    return head + SEE


def print_warnings(d: ReportData, console: Console | None = None) -> None:
    """The run's warnings, one line per kind (grouped_warnings), within WIDTH columns (or
    the terminal's, if narrower); "warning:" in yellow on a terminal. No markup is read:
    warnings quote plan syntax such as "[verdicts]"."""
    out = console or Console(stderr=True)
    width = min(WIDTH, out.width)
    for line in grouped_warnings(d.warnings, width, warning_counts(d)):
        out.print(Text.assemble(("warning:", "yellow"), line[len(PREFIX) - 1:]), width=width)
