"""The studies' figures, drawn with matplotlib into SVG text for the HTML report.

Why matplotlib and SVG: the report must work offline as one file. matplotlib is the plotting
library the studies' readers know, it runs headless (Agg) with no browser or server, and its
SVG output is text that can be inlined; an interactive library (plotly) would inline ~3.5 MB
of JavaScript into every report. Text stays text in the SVG (svg.fonttype none), so the
figures are small and searchable, and matplotlib escapes every label it writes.
Each function takes the analysed run and returns SVG markup, or "" when the run has nothing
for that figure.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from isotax.analysis import ReportData, Row
from isotax.environments.base import PHASES

plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "isotax", "font.size": 9,
                     "axes.spines.top": False, "axes.spines.right": False})

# Concurrency sweeps drawn as throughput vs concurrency: workload -> its concurrency parameter.
CONCURRENCY = {"redis": "connections", "mysql": "threads"}
BARS = ("compress", "linpack", "stream", "randomaccess", "fio", "throughput", "rr")


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    # No date in the SVG: a report made again from the same store (or from its exported
    # bundle, elsewhere) is byte for byte the same.
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype: inlined in HTML


def _colors(n: int) -> list[Any]:
    cmap = plt.get_cmap("tab10")
    return [cmap(i % 10) for i in range(n)]


def env_colors(d: ReportData) -> dict[str, Any]:
    """One colour per environment, the same in every figure (by its column)."""
    return dict(zip(d.columns, _colors(len(d.columns)), strict=True))


def _point_label(d: ReportData, r: Row) -> str:
    sweep = d.sweep_label.get((r.workload, r.params_key), "")
    return f"{r.workload} {sweep} {r.metric}".replace("  ", " ").strip()


def summary(d: ReportData) -> str:
    """Every environment's ratio to the baseline per headline metric, on a log axis, with
    its 95% interval; hollow bars are within noise."""
    rows = d.headline_rows()
    envs = [e for e in d.columns if e != d.baseline]
    if not rows or not envs:
        return ""
    height = max(3.0, 0.22 * len(rows) * len(envs) + 1)
    fig, ax = plt.subplots(figsize=(8, height))
    step = 1.0 / (len(envs) + 1)
    palette = env_colors(d)
    for j, env in enumerate(envs):
        color = palette[env]
        for i, r in enumerate(rows):
            cell = d.cells.get((r, env))
            if cell is None or cell.ratio is None or cell.ratio.ratio <= 0:
                continue
            rr = cell.ratio
            y = i + j * step
            ax.barh(y, math.log10(rr.ratio), height=step * 0.9, left=0,
                    color=color if not rr.within_noise else "none", edgecolor=color,
                    label=d.label(env) if i == 0 else None)
            if rr.has_ci and rr.ci_low > 0:
                ax.plot([math.log10(rr.ci_low), math.log10(rr.ci_high)], [y, y], color="black",
                        linewidth=0.8)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks([i + (len(envs) - 1) * step / 2 for i in range(len(rows))],
                  [_point_label(d, r) for r in rows])
    ax.invert_yaxis()
    ticks = [-2, -1, math.log10(0.5), 0, math.log10(2), 1, 2]
    ax.set_xticks(ticks, [f"{10 ** t:g}×" for t in ticks])
    ax.set_xlabel(f"ratio to {d.baseline} (log scale; ↑ metrics: right is better, ↓ metrics: "
                  "left is better); line: 95% interval; hollow: within noise")
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return _svg(fig)


def bars(d: ReportData) -> str:
    """Mean ± sd of each CPU, memory, network and disk point's headline metric."""
    rows = [r for r in d.headline_rows() if r.workload in BARS]
    if not rows:
        return ""
    cols = 3
    nrows = math.ceil(len(rows) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(10, 2.6 * nrows), squeeze=False)
    envs = d.columns
    colors = list(env_colors(d).values())
    for k, r in enumerate(rows):
        ax = axes[k // cols][k % cols]
        means, sds = [], []
        for env in envs:
            cell = d.cells.get((r, env))
            means.append(cell.summary.mean if cell else 0.0)
            sds.append(cell.summary.sd if cell and math.isfinite(cell.summary.sd) else 0.0)
        ax.bar(range(len(envs)), means, yerr=sds, color=colors, capsize=3)
        ax.set_xticks(range(len(envs)), [d.label(e) for e in envs], rotation=30, ha="right")
        arrow = "↑" if r.higher_is_better else "↓"
        ax.set_title(f"{_point_label(d, r)} {arrow}", fontsize=9)
        ax.set_ylabel(r.unit)
    for k in range(len(rows), nrows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.tight_layout()
    return _svg(fig)


def _sweep_value(params_key: str, name: str) -> float | None:
    for part in params_key.split(","):
        k, _, v = part.partition("=")
        if k == name:
            try:
                return float(v)
            except ValueError:
                return None
    return None


def concurrency(d: ReportData, workload: str) -> str:
    """Headline throughput against the concurrency sweep, per environment, with the loss
    against the baseline on a second axis."""
    knob = CONCURRENCY.get(workload)
    rows = [r for r in d.headline_rows() if r.workload == workload]
    if knob is None or len(rows) < 2:
        return ""
    found = [_sweep_value(r.params_key, knob) for r in rows]
    xs = [x for x in found if x is not None]
    if len(xs) != len(rows):
        return ""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax2 = ax.twinx()
    for env, color in env_colors(d).items():
        pts = [(x, c) for x, r in zip(xs, rows, strict=True)
               if (c := d.cells.get((r, env))) is not None]
        if not pts:
            continue
        ax.errorbar([x for x, _ in pts], [c.summary.mean for _, c in pts],
                    yerr=[c.summary.sd for _, c in pts], color=color, marker="o",
                    capsize=3, label=d.label(env))
        loss = [(x, (c.ratio.ratio - 1) * 100) for x, c in pts if c.ratio is not None]
        if loss:
            ax2.plot([x for x, _ in loss], [v for _, v in loss], color=color, linestyle=":",
                     marker="x")
    ax.set_xlabel(knob)
    ax.set_ylabel(f"{rows[0].metric} ({rows[0].unit})")
    ax2.set_ylabel(f"Δ% vs {d.baseline} (dotted)")
    ax2.axhline(0, color="grey", linewidth=0.5)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.12, 1))
    ax.set_title(f"{workload}: throughput vs {knob}", fontsize=9)
    return _svg(fig)


def startup(d: ReportData) -> str:
    """Stacked bars: the time from the request to each phase, per environment."""
    phases = [p for p in PHASES if any(r.workload == "startup" and r.metric == f"{p}_ms"
                                       for r in d.rows)]
    if not phases:
        return ""
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(d.columns) + 1.2))
    for i, env in enumerate(d.columns):
        left = 0.0
        for phase, color in zip(phases, _colors(len(phases)), strict=True):
            row = next((r for r in d.rows if r.workload == "startup"
                        and r.metric == f"{phase}_ms"), None)
            cell = d.cells.get((row, env)) if row else None
            if cell is None:
                continue
            # Milestones are times from the request; a bar segment is the step to this one.
            at = max(left, cell.summary.mean)
            ax.barh(i, at - left, left=left, color=color, label=phase if i == 0 else None)
            left = at
    ax.set_yticks(range(len(d.columns)), [d.label(e) for e in d.columns])
    ax.invert_yaxis()
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("ms from the request (median per cell, mean over repetitions; symlog)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _svg(fig)


def density(curves: Mapping[str, Sequence[Mapping[str, Any]]], labels: Mapping[str, str]
            ) -> str:
    """Host memory against the number of instances side by side, per environment."""
    if not curves:
        return ""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    palette = dict(zip(labels, _colors(len(labels)), strict=True))  # labels: column order
    for env, curve in curves.items():
        color = palette.get(env, "black")
        pts = [(c["instances"], c["total_mib"]) for c in curve
               if "instances" in c and "total_mib" in c]
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", color=color,
                    label=labels.get(env, env))
    ax.set_xlabel("instances running")
    ax.set_ylabel("host memory of the instances (MiB)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return _svg(fig)


def cost(d: ReportData) -> str:
    """Per workload point, CPU per unit of work in the environment and hidden on the host."""
    points = d.in_row_order((wl, pk) for _, wl, pk in d.explained)
    if not points:
        return ""
    cols = 3
    nrows = math.ceil(len(points) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(10, 2.4 * nrows), squeeze=False)
    for k, (wl, pk) in enumerate(points):
        ax = axes[k // cols][k % cols]
        envs = [e for e in d.columns if (e, wl, pk) in d.explained]
        inside = []
        hidden = []
        unit = "run"
        for e in envs:
            c = d.explained[(e, wl, pk)].cost
            inside.append(c.inside if c else 0.0)
            hidden.append(c.hidden if c else 0.0)
            unit = c.unit if c else unit
        ax.bar(range(len(envs)), inside, color="#4c72b0", label="in the environment")
        ax.bar(range(len(envs)), hidden, bottom=inside, color="#dd8452",
               label="hidden on the host")
        ax.set_xticks(range(len(envs)), [d.label(e) for e in envs], rotation=30, ha="right")
        ax.set_title(f"{wl} {d.sweep_label.get((wl, pk), '')}".strip(), fontsize=9)
        ax.set_ylabel(f"CPU-s per {unit}")
        totals = [i + h for i, h in zip(inside, hidden, strict=True) if i + h > 0]
        if totals and max(totals) / min(totals) > 50:  # a VM next to containers
            ax.set_yscale("log")
        if k == 0:
            ax.legend(fontsize=7)
    for k in range(len(points), nrows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.tight_layout()
    return _svg(fig)
