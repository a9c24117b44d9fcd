"""The studies' figures, drawn with matplotlib into SVG text for the HTML report.

Why matplotlib and SVG: the report must work offline as one file. matplotlib is the plotting
library the studies' readers know, it runs headless (Agg) with no browser or server, and its
SVG output is text that can be inlined; an interactive library (plotly) would inline ~3.5 MB
of JavaScript into every report. Text stays text in the SVG (svg.fonttype none), so the
figures are small and searchable, and matplotlib escapes every label it writes.
Each function takes the analysed run and returns SVG markup, or "" when the run has nothing
for that figure. Where a figure fixes an axis range (the log axis of the CPU per unit of work,
the 0-100% of CPU utilisation), a bar or interval the range cuts off is marked at the axis
edge (▲ ▼ ▶ ◀, pointing where it lies) with its value written beside it, and the figure says
so: a clipped value is never silently a shorter bar.
Which workload gets which figure is the workload's own word: its FigureHints
(isotax.protocols), read by name, so a stored run of an unknown workload gets tables only.
Figures of several workloads follow the run's order of workloads, as the tables do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter, MaxNLocator

from isotax.analysis.report_data import CdfKey, ReportData, Row, sweep_words
from isotax.analysis.stats import Ratio
from isotax.protocols import PHASES, CpuCurve, FigureHints, figure_hints
from isotax.report import decisions
from isotax.report.svg_figure import clip_note, colors, mark_clipped, to_svg


def hinted(d: ReportData, wants: Callable[[FigureHints], object]) -> list[str]:
    """The run's workloads, in row order, whose figure hints `wants` something of."""
    return [wl for wl in d.workloads() if wants(figure_hints(wl))]


def env_colors(d: ReportData) -> dict[str, Any]:
    """One colour per environment, the same in every figure (by its column)."""
    return dict(zip(d.columns, colors(len(d.columns)), strict=True))


def point_label(d: ReportData, r: Row) -> str:
    sweep = d.sweep_label.get((r.workload, r.params_key), "")
    return f"{r.workload} {sweep} {r.metric}".replace("  ", " ").strip()


def ratio_bar(ax: Axes, y: float, r: Ratio, color: Any, height: float, label: str | None
              ) -> list[float]:
    """A ratio as a horizontal bar on a log10 axis (hollow within noise) with its 95%
    interval as a black line; returns the values shown, for the axis range."""
    ax.barh(y, math.log10(r.ratio), height=height,
            color="none" if r.within_noise else color, edgecolor=color, label=label)
    shown = [r.ratio]
    if r.has_ci and r.ci_low > 0:
        ax.plot([math.log10(r.ci_low), math.log10(r.ci_high)], [y, y], color="black",
                linewidth=0.8)
        shown += [r.ci_low, r.ci_high]
    return shown


def summary(d: ReportData) -> str:
    """Every environment's ratio to the baseline per headline metric, on a log axis, with
    the interval its verdict came from (the confidence sequence; a ratio without a verdict:
    its bootstrap interval); hollow bars are within noise."""
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
            ratio_bar(ax, i + j * step, _judged(d, r, env, cell.ratio), color, step * 0.9,
                      d.label(env) if i == 0 else None)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_yticks([i + (len(envs) - 1) * step / 2 for i in range(len(rows))],
                  [point_label(d, r) for r in rows])
    ax.invert_yaxis()
    ticks = [-2, -1, math.log10(0.5), 0, math.log10(2), 1, 2]
    ax.set_xticks(ticks, [f"{10 ** t:g}×" for t in ticks])
    ax.set_xlabel(f"ratio to {d.baseline} (log scale; ↑ metrics: right is better, ↓ metrics: "
                  "left is better)\nline: the verdict's 95% confidence sequence (without a "
                  "verdict: 95% bootstrap interval); hollow: within noise")
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8)
    return to_svg(fig)


def _judged(d: ReportData, row: Row, env: str, r: Ratio) -> Ratio:
    """r with the interval its verdict came from in place of its bootstrap interval (NaN
    while the confidence sequence is unbounded: no line), so the summary figure shows what
    decided; r itself where there is no verdict."""
    v = decisions.verdict_of(d, row, env)
    if v is None:
        return r
    low, high = decisions.sequence_bounds(v)
    return replace(r, ci_low=low, ci_high=high)


def bars(d: ReportData) -> str:
    """Mean ± sd of each CPU, memory, network and disk point's headline metric."""
    rows = [r for r in d.headline_rows() if figure_hints(r.workload).bars]
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
        ax.set_title(f"{point_label(d, r)} {arrow}", fontsize=9)
        ax.set_ylabel(r.unit)
    for k in range(len(rows), nrows * cols):
        axes[k // cols][k % cols].axis("off")
    return to_svg(fig, tight_layout=True)


def _sweep_value(d: ReportData, workload: str, params_key: str, name: str) -> float | None:
    """The point's value of parameter `name`, as stored (ReportData.point_params), where it
    is a number; None where the point has no such parameter or it is not a number."""
    v = d.point_params.get((workload, params_key), {}).get(name)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _others(d: ReportData, workload: str, params_key: str, knob: str) -> str:
    """The point's varying parameters but `knob`, "k=v,k=v" as the point's sweep label shows
    them: what a sweep along knob groups its points by."""
    return sweep_words(d.point_params.get((workload, params_key), {}),
                       d.common_params.get(workload, {}), leave_out=knob)


# Overlays (isotax compare): run A solid with circles, run B dashed with squares.
STYLES = (("-", "o"), ("--", "s"))


def _runs(d: ReportData, other: ReportData | None, names: Sequence[str]
          ) -> list[tuple[ReportData, str, str, str]]:
    """(data, name suffix for legends, line style, marker) for one run or two overlaid."""
    if other is None:
        return [(d, "", *STYLES[0])]
    return [(x, f" [{n}]", *st) for x, n, st in zip((d, other), names, STYLES, strict=False)]


def _palette(runs: Sequence[tuple[ReportData, str, str, str]]) -> dict[str, Any]:
    """One colour per environment name across the runs (run A's columns first)."""
    names = list(dict.fromkeys(e for r in runs for e in r[0].columns))
    return dict(zip(names, colors(len(names)), strict=True))


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))


Sweep = tuple[str, list[tuple[float, str, str]]]  # (group label, [(x, params_key, metric)])


def sweeps(d: ReportData, workload: str, knob: str, metric: str | None = None) -> list[Sweep]:
    """The workload's points along knob, grouped by its other parameters (fio's numjobs per
    pattern, say): each group's (x, params_key, metric) ascending, for groups of 2 points or
    more. metric: that metric of every point; None: each point's headline metric."""
    rows = d.headline_rows() if metric is None else [r for r in d.rows if r.metric == metric]
    groups: dict[str, list[tuple[float, str, str]]] = {}
    for r in rows:
        x = _sweep_value(d, workload, r.params_key, knob) if r.workload == workload else None
        if x is None:
            continue
        groups.setdefault(_others(d, workload, r.params_key, knob), []).append(
            (x, r.params_key, r.metric))
    return [(g, sorted(pts)) for g, pts in groups.items() if len(pts) >= 2]


def sweep_knobs(d: ReportData) -> list[tuple[str, str]]:
    """(workload, knob) of every concurrency sweep the run has (each workload's hinted
    `concurrency` parameters, in that order), a figure each."""
    return [(wl, k) for wl in hinted(d, lambda h: h.concurrency)
            for k in figure_hints(wl).concurrency if sweeps(d, wl, k)]


def _panels(n: int, width: float, height: float) -> tuple[Figure, list[Any]]:
    cols = min(n, 2)
    fig, axes = plt.subplots(math.ceil(n / cols), cols, figsize=(width * cols, height * math.ceil(
        n / cols)), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.axis("off")
    return fig, flat[:n]


def concurrency(d: ReportData, workload: str, knob: str, other: ReportData | None = None,
                names: Sequence[str] = ("A", "B")) -> str:
    """Headline throughput against a concurrency sweep, per environment, with the loss
    against the baseline on a second axis (one run) or run B dashed over run A (two); a
    panel per combination of the other parameters."""
    groups = sweeps(d, workload, knob)
    if not groups:
        return ""
    runs = _runs(d, other, names)
    palette = _palette(runs)
    fig, axes = _panels(len(groups), 6.2 if other is None else 5.6, 3.6)
    for ax, (label, pts) in zip(axes, groups, strict=True):
        ax2 = ax.twinx() if other is None else None
        for data, suffix, ls, marker in runs:
            for env in data.columns:
                cells = [(x, c) for x, pk, metric in pts
                         if (c := data.cell(env, workload, pk, metric)) is not None]
                if not cells:
                    continue
                color = palette[env]
                ax.errorbar([x for x, _ in cells], [c.summary.mean for _, c in cells],
                            yerr=[_sd(c.summary.sd) for _, c in cells], color=color,
                            marker=marker, linestyle=ls, capsize=3,
                            label=data.label(env) + suffix)
                loss = [(x, (c.ratio.ratio - 1) * 100) for x, c in cells if c.ratio is not None]
                if ax2 is not None and loss:
                    ax2.plot([x for x, _ in loss], [v for _, v in loss], color=color,
                             linestyle=":", marker="x")
        metric = pts[0][2]
        unit = next((r.unit for r in d.rows if r.workload == workload and r.metric == metric),
                    "")
        ax.set_xlabel(knob)
        ax.set_ylabel(f"{metric} ({unit})")
        if ax2 is not None:
            ax2.set_ylabel(f"Δ% vs {d.baseline} (dotted)")
            ax2.axhline(0, color="grey", linewidth=0.5)
        ax.set_title(" ".join(p for p in (workload, label) if p) + f": throughput vs {knob}",
                     fontsize=9)
    last = axes[-1]
    last.legend(*axes[0].get_legend_handles_labels(), fontsize=7, loc="upper left",
                bbox_to_anchor=(1.18 if other is None else 1.01, 1))
    return to_svg(fig, tight_layout=True)


def latency_workloads(d: ReportData) -> list[str]:
    """The run's workloads with latency panels (a throughput-vs-latency figure each)."""
    return hinted(d, lambda h: h.latency_panels)


def throughput_latency(d: ReportData, workload: str, other: ReportData | None = None,
                       names: Sequence[str] = ("A", "B")) -> str:
    """Latency against throughput as the concurrency sweep climbs, per environment: where
    the curve turns up is the point past which more load only queues. Panels: the
    workload's hinted latency panels, along its first concurrency parameter; the first
    latency is drawn solid, the second dashed (one run) or thin (two runs)."""
    hints = figure_hints(workload)
    knob = (*hints.concurrency, "")[0]
    panels = [(lp.title, lp.throughput, lp.latencies, label, pts)
              for lp in hints.latency_panels
              for label, pts in sweeps(d, workload, knob, lp.throughput)]
    if not panels:
        return ""
    runs = _runs(d, other, names)
    palette = _palette(runs)
    fig, axes = _panels(len(panels), 5.2, 3.6)
    for ax, (title, tput, lats, label, pts) in zip(axes, panels, strict=True):
        ys: list[float] = []
        for data, suffix, ls, marker in runs:
            for env in data.columns:
                for k, lat in enumerate(lats):
                    xy = [(x, t.summary.mean, c.summary.mean) for x, pk, _ in pts
                          if (t := data.cell(env, workload, pk, tput)) is not None
                          and (c := data.cell(env, workload, pk, lat)) is not None]
                    if not xy:
                        continue
                    ys += [y for _, _, y in xy]
                    style = ls if k == 0 else ("--" if other is None else ls)
                    ax.plot([p[1] for p in xy], [p[2] for p in xy], color=palette[env],
                            marker=marker, linestyle=style, linewidth=1.4 if k == 0 else 0.8,
                            label=data.label(env) + suffix if k == 0 else None)
                    if k == 0 and data is d:
                        for x, t_, y in xy:
                            ax.annotate(f"{x:g}", (t_, y), fontsize=6, xytext=(3, 3),
                                        textcoords="offset points")
        if ys and min(ys) > 0 and max(ys) / min(ys) > 20:
            ax.set_yscale("log")
        unit = next((r.unit for r in d.rows if r.workload == workload and r.metric == tput), "")
        ax.set_xlabel(f"{tput} ({unit})")
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        lat_unit = next((r.unit for r in d.rows if r.metric == lats[0]), "")
        ax.set_ylabel(f"latency ({lat_unit})")
        name = " ".join(p for p in (workload, title, label) if p)
        ax.set_title(f"{name}: latency vs throughput (labels: {knob})", fontsize=9)
    last = axes[-1]
    handles, labels = axes[0].get_legend_handles_labels()
    for k, lat in enumerate(panels[0][2]):
        handles.append(Line2D([], [], color="black", linewidth=1.4 if k == 0 else 0.8,
                              linestyle="-" if k == 0 or other is not None else "--"))
        labels.append(lat)
    last.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return to_svg(fig, tight_layout=True)


def cpu_curves(d: ReportData) -> list[tuple[str, CpuCurve]]:
    """(workload, its hint) of the run's workloads with a throughput-vs-CPU figure."""
    return [(wl, c) for wl in hinted(d, lambda h: h.cpu_curve)
            if (c := figure_hints(wl).cpu_curve) is not None]


def cpu_curve(d: ReportData, workload: str, other: ReportData | None = None,
              names: Sequence[str] = ("A", "B")) -> str:
    """A workload's throughput against the host's CPU utilisation during its client's window
    (the workload's own /proc/stat reading, e.g. MySQL's per thread count): a curve to the
    right of native's pays for the same work with more of the host."""
    c = figure_hints(workload).cpu_curve
    if c is None:
        return ""
    runs = _runs(d, other, names)
    palette = _palette(runs)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    drawn = False
    ends: list[tuple[float, float, str]] = []  # (tps, utilisation) a 0-100% axis may cut
    points = [(x, pk) for x, pk, _ in sorted(
        p for _, pts in sweeps(d, workload, c.axis, c.throughput) for p in pts)] or [
        (_sweep_value(d, workload, r.params_key, c.axis) or 0.0, r.params_key) for r in d.rows
        if r.workload == workload and r.metric == c.throughput]
    for data, suffix, ls, marker in runs:
        for env in data.columns:
            pts = [(x, u.summary, t.summary) for x, pk in points
                   if (t := data.cell(env, workload, pk, c.throughput)) is not None
                   and (u := data.cell(env, workload, pk, c.utilisation)) is not None]
            if not pts:
                continue
            drawn = True
            ax.errorbar([u.mean for _, u, _ in pts], [t.mean for _, _, t in pts],
                        xerr=[_sd(u.sd) for _, u, _ in pts], yerr=[_sd(t.sd) for *_, t in pts],
                        color=palette[env], marker=marker, linestyle=ls, capsize=3,
                        label=data.label(env) + suffix)
            if data is d:
                for x, util, tps in pts:
                    ax.annotate(f"{x:g}", (util.mean, tps.mean), fontsize=6, xytext=(3, 3),
                                textcoords="offset points")
            for _, util, tps in pts:
                sd = _sd(util.sd)
                ends += [(tps.mean, util.mean, f"{util.mean:.0f}%"),
                         (tps.mean, util.mean + sd, f"to {util.mean + sd:.0f}%"),
                         (tps.mean, util.mean - sd, f"from {util.mean - sd:.0f}%")]
    if not drawn:
        plt.close(fig)
        return ""
    ax.set_xlim(0, 100)
    clip_note(fig, mark_clipped(ax, ends, axis="x"))
    ax.set_xlabel("host CPU utilisation during the run, % of all CPUs (the load generator's "
                  f"{c.client} included)")
    ax.set_ylabel(c.label)
    ax.set_title(f"{workload}: throughput vs CPU utilisation (labels: {c.axis})", fontsize=9)
    _legend(ax)
    return to_svg(fig)


def _sd(sd: float) -> float:
    return sd if math.isfinite(sd) else 0.0


CDF_TITLES = {"clat_cdf_us": "completion latency", "rtt_cdf_us": "round trip",
              "latency_cdf_us": "transaction latency"}


def latency_cdf(d: ReportData, key: CdfKey, other: ReportData | None = None,
                names: Sequence[str] = ("A", "B")) -> str:
    """One point's latency CDF per environment, pooled over its repetitions: the whole
    distribution (left) and its tail as 1 - F on a log axis (right), where p99, p99.9 and
    p99.99 are the lines' crossings of 10^-2, 10^-3, 10^-4."""
    runs = _runs(d, other, names)
    palette = _palette(runs)
    series = [(data, suffix, ls, env, cdf) for data, suffix, ls, _ in runs
              for env, cdf in data.latency_cdfs.get(key, {}).items() if cdf]
    if not series:
        return ""
    fig, (body, tail) = plt.subplots(1, 2, figsize=(10, 3.4))
    xs = [p[0] for *_, cdf in series for p in cdf if p[0] > 0]
    floor = 1.0
    for data, suffix, ls, env, cdf in series:
        n = data.cdf_runs.get(key, {}).get(env, 0)
        v = [p[0] for p in cdf]
        f = [p[1] for p in cdf]
        body.step(v, f, where="post", color=palette[env], linestyle=ls,
                  label=f"{data.label(env)}{suffix} ({n} run{'s' if n != 1 else ''})")
        pts = [(x, 1 - y) for x, y in cdf if 1 - y > 1e-9]
        if pts:
            tail.step([x for x, _ in pts], [y for _, y in pts], where="post",
                      color=palette[env], linestyle=ls)
            floor = min(floor, min(y for _, y in pts))
    for ax in (body, tail):
        if xs and max(xs) / min(xs) > 10:
            ax.set_xscale("log")
        ax.set_xlabel("µs" + (" (log scale)" if xs and max(xs) / min(xs) > 10 else ""))
    body.set_ylabel("fraction at or below")
    body.set_ylim(0, 1.02)
    tail.set_yscale("log")
    tail.set_ylim(max(floor / 2, 1e-6), 1)
    tail.set_ylabel("fraction above (1 - F, log)")
    for q in (1e-2, 1e-3, 1e-4):
        if q >= floor / 2:
            tail.axhline(q, color="grey", linewidth=0.4, linestyle=":")
    wl, pk, metric, label = key
    sweep = d.sweep_label.get((wl, pk), "")
    what = CDF_TITLES.get(label, label.removesuffix("_cdf_us"))
    direction = metric.split("_", 1)[0] if figure_hints(wl).cdf_direction else ""
    body.set_title(" ".join(p for p in (wl, sweep, direction, what) if p) + ": CDF",
                   fontsize=9)
    tail.set_title("tail: 1 - F", fontsize=9)
    tail.legend(*body.get_legend_handles_labels(), fontsize=7, loc="upper left",
                bbox_to_anchor=(1.01, 1))
    return to_svg(fig, tight_layout=True)


def phase_workloads(d: ReportData) -> list[str]:
    """The run's workloads that report the phases of a start (a startup figure each)."""
    return hinted(d, lambda h: h.phases)


def startup(d: ReportData, workload: str) -> str:
    """Stacked bars: the time from the request to each phase, per environment (the
    workload's hinted phases that are milestones, PHASES)."""
    hints = figure_hints(workload)
    order = hints.milestones or PHASES
    phases = [p for p in order if p in hints.phases and any(
        r.workload == workload and r.metric == f"{p}_ms" for r in d.rows)]
    if not phases:
        return ""
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(d.columns) + 1.2))
    for i, env in enumerate(d.columns):
        left = 0.0
        for phase, color in zip(phases, colors(len(phases)), strict=True):
            row = next((r for r in d.rows if r.workload == workload
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
    return to_svg(fig)


def density(curves: Mapping[str, Sequence[Mapping[str, Any]]], labels: Mapping[str, str]
            ) -> str:
    """Host memory against the number of instances side by side, per environment."""
    if not curves:
        return ""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    palette = dict(zip(labels, colors(len(labels)), strict=True))  # labels: column order
    for env, curve in curves.items():
        color = palette.get(env, "black")
        pts = [(c["instances"], c["total_mib"]) for c in curve
               if "instances" in c and "total_mib" in c]
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", color=color,
                    label=labels.get(env, env))
    tops = [float(c["total_mib"]) for curve in curves.values() for c in curve
            if float(c.get("total_mib", 0) or 0) > 0]
    if tops and max(tops) / min(tops) > 50:  # VMs next to containers: both visible
        ax.set_yscale("log")
    ax.set_xlabel("instances running")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("host memory of the instances (MiB)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return to_svg(fig)


def cost(d: ReportData) -> str:
    """Per workload point, CPU per unit of work in the environment and hidden on the host."""
    points = d.in_row_order((wl, pk) for _, wl, pk in d.explained)
    if not points:
        return ""
    cols = 3
    nrows = math.ceil(len(points) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(10, 2.4 * nrows), squeeze=False)
    marked = 0
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
            ax.set_ylim(bottom=min(totals) / 3)  # the smallest bar stays visible
        # What the log axis's floor hides: a part in the environment below it (an emulated
        # VM's guest accounts little of what QEMU burns), or anything past the top.
        marked += mark_clipped(ax, [
            *((j, v, f"in env {v:.3g}") for j, v in enumerate(inside) if v > 0),
            *((j, i + h, f"total {i + h:.3g}") for j, (i, h) in
              enumerate(zip(inside, hidden, strict=True)))], first=marked)
        if k == 0:
            ax.legend(fontsize=7)
    for k in range(len(points), nrows * cols):
        axes[k // cols][k % cols].axis("off")
    clip_note(fig, marked)  # a figure text: tight_layout places the axes only
    return to_svg(fig, tight_layout=True)
