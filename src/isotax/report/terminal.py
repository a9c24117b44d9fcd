"""The summary isotax prints at the end of a run or a report: each workload point's headline
ratio per environment, in at most 100 columns. rich decides the rest: colour on a terminal
that has it, plain text when the output is piped or NO_COLOR is set."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from isotax.analysis import ReportData

WIDTH = 100


def summary_table(d: ReportData) -> Table:
    envs = [e for e in d.columns if e != d.baseline]
    t = Table(title=f"ratio to {d.baseline} (headline metric; ≈ within noise; ↑/↓ higher/lower "
                    "is better)", title_style="bold", expand=False, pad_edge=False)
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
