"""Figures of a fleet side by side (isotax fleet report), in SVG like isotax.report.figures:
per headline metric, each environment's isolation tax on every host as grouped bars (x: the
environment, one bar per host, whiskers: the 95% interval, a dashed line at 1.0: native)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

from isotax.analysis.fleet import Fleet, apart
from isotax.report.svg_figure import colors, to_svg

# Beyond this spread of values a linear axis flattens the containers next to an emulated VM.
_LOG_SPREAD = 5.0


def tax_bars(f: Fleet, point: tuple[str, str, str]) -> str:
    """One headline metric (workload, params_key, metric): every environment's tax per host.
    Hollow: equivalent to the baseline on that host; ≠ above a bar: that host's tax differs
    beyond the margin from the reference host's."""
    rows = [r for r in f.rows if (r.workload, r.params_key, r.metric) == point]
    hosts = f.compared
    if not rows or not hosts:
        return ""
    fig, ax = plt.subplots(figsize=(max(4.0, 0.5 * len(rows) * len(hosts) + 2), 3.2))
    width = 0.8 / len(hosts)
    shown: list[float] = []
    for j, (host, color) in enumerate(zip(hosts, colors(len(hosts)), strict=True)):
        xs, ys, err_lo, err_hi, faces, marks = [], [], [], [], [], []
        for i, row in enumerate(rows):
            t = row.taxes.get(host)
            if t is None or t.tax is None or t.tax.ratio <= 0:
                continue
            r = t.tax
            x = i + (j - (len(hosts) - 1) / 2) * width
            xs.append(x)
            ys.append(r.ratio)
            low = r.ci_low if r.has_ci and r.ci_low > 0 else r.ratio
            high = r.ci_high if r.has_ci else r.ratio
            err_lo.append(r.ratio - low)
            err_hi.append(high - r.ratio)
            faces.append("none" if r.within_noise else color)
            shown += [low, high]
            vs = t.vs_reference
            if apart(vs):
                marks.append((x, high))
        if not xs:
            continue
        label = f"{host} (reference)" if host == f.reference else host
        ax.bar(xs, ys, width * 0.9, color=faces, edgecolor=color, label=label,
               yerr=[err_lo, err_hi], error_kw={"elinewidth": 0.8, "capsize": 2})
        for x, top in marks:
            ax.annotate("≠", (x, top), xytext=(0, 2), textcoords="offset points",
                        ha="center", va="bottom", fontsize=9, color=color)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    positive = [v for v in shown if v > 0]
    if positive and max(positive) / min(positive) > _LOG_SPREAD:
        ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.set_xticks(range(len(rows)),
                  [r.environment + (" (TCG)" if any(t.emulated for t in r.taxes.values())
                                    else "") for r in rows],
                  rotation=20 if len(rows) > 4 else 0, ha="right" if len(rows) > 4 else "center")
    head = rows[0]
    arrow = "↑" if head.higher_is_better else "↓"
    ax.set_title(f"{head.workload} {head.sweep} {head.metric} {arrow}".replace("  ", " "),
                 fontsize=9)
    ax.set_ylabel(f"ratio to {f.baseline} on each host")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return to_svg(fig)
