"""Figures of a comparison of two runs (isotax compare), in SVG like isotax.report.figures:
run B over run A per environment and headline metric, and each environment's ratio to the
baseline in A and in B side by side (did the isolation tax itself change?). The studies'
figures overlaid (B dashed over A) come from isotax.report.figures with `other`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from isotax.analysis.compare import Comparison, Line
from isotax.analysis.report_data import ReportData, Row
from isotax.report.figures import STYLES, point_label, ratio_bar
from isotax.report.svg_figure import colors, to_svg

_TICKS = (0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0)
_WIDE_TICKS = (1e-4, 1e-3, 0.01, 0.1, 0.5, 1.0, 2.0, 10.0, 100.0, 1e3, 1e4)


def headline_lines(c: Comparison, a: ReportData) -> list[tuple[Row, dict[str, Line]]]:
    """Per headline row of run A (in its order), the comparison's line for each environment
    that both runs measured."""
    index = {(x.environment, x.workload, x.params_key, x.metric): x for x in c.lines}
    out = []
    for r in a.headline_rows():
        by_env = {e: line for e in a.columns
                  if (line := index.get((e, r.workload, r.params_key, r.metric))) is not None}
        if by_env:
            out.append((r, by_env))
    return out


def _log_axis(ax: Axes, values: Sequence[float], label: str) -> None:
    lo = min([*values, 0.8])
    hi = max([*values, 1.25])
    # Near 1 the fine ticks; a VM next to containers spans decades: one tick per decade.
    choice = _TICKS if lo >= 0.2 and hi <= 5 else _WIDE_TICKS
    ticks = [t for t in choice if lo / 1.5 <= t <= hi * 1.5] or [1.0]
    ax.set_xticks([math.log10(t) for t in ticks], [f"{t:g}×" for t in ticks])
    ax.set_xlabel(label)


def b_over_a(c: Comparison, a: ReportData) -> str:
    """B / A of every headline metric per environment, on a log axis with its 95% interval;
    hollow where within noise. Right of 1× is B better for ↑ metrics, worse for ↓ ones."""
    rows = [(r, by_env) for r, by_env in headline_lines(c, a) if by_env]
    envs = [e for e in a.columns if any(e in by_env for _, by_env in rows)]
    if not rows:
        return ""
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.22 * len(rows) * len(envs) + 1)))
    step = 1.0 / (len(envs) + 1)
    palette = dict(zip(a.columns, colors(len(a.columns)), strict=True))
    shown: list[float] = []
    for j, env in enumerate(envs):
        for i, (_, by_env) in enumerate(rows):
            line = by_env.get(env)
            if line is None or line.ratio.ratio <= 0:
                continue
            shown += ratio_bar(ax, i + j * step, line.ratio, palette[env], step * 0.9,
                                a.label(env) if i == 0 else None)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks([i + (len(envs) - 1) * step / 2 for i in range(len(rows))],
                  [point_label(a, r) for r, _ in rows])
    ax.invert_yaxis()
    _log_axis(ax, shown, "run B / run A (log scale); line: 95% interval; hollow: within noise")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return to_svg(fig)


def tax_a_and_b(a: ReportData, b: ReportData, names: Sequence[str] = ("A", "B")) -> str:
    """Each environment's headline ratio to the baseline in run A and in run B, one above the
    other (A circles, B squares) with 95% intervals: where the two differ, the isolation tax
    itself moved, not only the host."""
    envs = [e for e in a.columns if e != a.baseline and e in b.columns]
    b_rows = {(r.workload, r.params_key, r.metric): r for r in b.rows}
    rows = [(r, b_rows[(r.workload, r.params_key, r.metric)]) for r in a.headline_rows()
            if (r.workload, r.params_key, r.metric) in b_rows]
    if not rows or not envs:
        return ""
    fig, ax = plt.subplots(figsize=(8, max(3.0, 0.3 * len(rows) * len(envs) + 1)))
    palette = dict(zip(a.columns, colors(len(a.columns)), strict=True))
    step = 1.0 / (len(envs) + 1)
    shown: list[float] = []
    for j, env in enumerate(envs):
        for i, (ra, rb) in enumerate(rows):
            for k, (data, row) in enumerate(((a, ra), (b, rb))):
                cell = data.cells.get((row, env))
                if cell is None or cell.ratio is None or cell.ratio.ratio <= 0:
                    continue
                r = cell.ratio
                y = i + j * step + (k - 0.5) * step * 0.4
                x = math.log10(r.ratio)
                ls, marker = STYLES[k]
                ax.plot([x], [y], marker=marker, color=palette[env],
                        markerfacecolor="none" if r.within_noise else palette[env],
                        linestyle="none",
                        label=f"{a.label(env)} [{names[k]}]" if i == 0 else None)
                shown.append(r.ratio)
                if r.has_ci and r.ci_low > 0:
                    ax.plot([math.log10(r.ci_low), math.log10(r.ci_high)], [y, y],
                            color=palette[env], linestyle=ls, linewidth=0.8)
                    shown += [r.ci_low, r.ci_high]
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks([i + (len(envs) - 1) * step / 2 for i in range(len(rows))],
                  [point_label(a, r) for r, _ in rows])
    ax.invert_yaxis()
    _log_axis(ax, shown, f"ratio to {a.baseline} (log scale); {names[0]}: circles, solid "
                         f"interval; {names[1]}: squares, dashed; hollow: within noise")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return to_svg(fig)
