"""The self-contained HTML form of a comparison of two runs (isotax compare): like the run
report, one offline file with inline SVG and CSS and no script.

Contents: both runs and their hosts (each fingerprint difference first, when forced), run B
over run A per environment and headline metric as a coloured table and a figure, each
environment's ratio to the baseline in A and in B side by side (did the isolation tax move?),
the studies' figures with B dashed over A (throughput vs concurrency, throughput vs latency,
MySQL throughput vs CPU, latency CDFs), every metric's B / A, and the points only one run
has. Every string from a host, a plan or a tool is escaped."""

from __future__ import annotations

from isotax.analysis.compare import Comparison, by_environment
from isotax.analysis.report_data import ReportData
from isotax.report import compare_figures, figures
from isotax.report.compare_md import judged_ratio, verdict_words
from isotax.report.html import CSS, esc, html_figure, html_table, ratio_cell


def _head(c: Comparison) -> list[str]:
    out = []
    for tag, r in (("A", c.a), ("B", c.b)):
        h = r.host
        out.append(f"<li><b>{tag}</b>: run {esc(r.id)}, plan <b>{esc(r.plan_name)}</b>, "
                   f"status {esc(r.status)}, host {esc(h.get('hostname', '?'))}, "
                   f"{esc(h.get('cpu_model', '?'))}, {esc(h.get('cpus', '?'))} CPUs, kernel "
                   f"{esc(h.get('kernel', '?'))}</li>")
    return ["<ul>", *out, "</ul>"]


def _headline_table(c: Comparison, a: ReportData) -> str:
    envs = [e for e in a.columns
            if any(e in by_env for _, by_env in compare_figures.headline_lines(c, a))]
    rows = []
    for r, by_env in compare_figures.headline_lines(c, a):
        arrow = "↑" if r.higher_is_better else "↓"
        line = [f"{esc(r.workload)} <span class=small>"
                f"{esc(a.sweep_label.get((r.workload, r.params_key), ''))}</span><br>"
                f"<span class=small>{esc(r.metric)} ({esc(r.unit)}) {arrow}</span>"]
        for env in envs:
            x = by_env.get(env)
            if x is None:
                line.append("<span class=small>—</span>")
                continue
            line.append(f"{ratio_cell(x.ratio, x.judged)}<span class=small>{x.mean_a:.4g} → "
                        f"{x.mean_b:.4g} (n {x.n_a} / {x.n_b})</span>")
        rows.append(line)
    return html_table(["workload point"] + [a.label(e) for e in envs], rows, raw=True)


def _overlays(a: ReportData, b: ReportData) -> list[str]:
    names = ("A", "B")
    out = [html_figure(figures.concurrency(a, wl, knob, b, names), f"{wl}: throughput against "
                   f"{knob}; A solid, B dashed.") for wl, knob in figures.sweep_knobs(a)]
    out += [html_figure(figures.throughput_latency(a, wl, b, names), f"{wl}: latency against "
                    "throughput along the sweep; A solid, B dashed (thin: the second "
                    "latency).") for wl in figures.latency_workloads(a)]
    out += [html_figure(figures.cpu_curve(a, wl, b, names), f"{c.title}: {c.label} against the "
                    "host's CPU utilisation; A solid, B dashed.")
            for wl, c in figures.cpu_curves(a)]
    out += [html_figure(figures.latency_cdf(a, key, b, names), "Latency CDF and tail, pooled over "
                    "each run's repetitions; A solid, B dashed.")
            for key in a.latency_cdfs if key in b.latency_cdfs]
    return [f for f in out if f]


def render(c: Comparison, a: ReportData, b: ReportData) -> str:
    parts = ["<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
             '<meta name=viewport content="width=device-width, initial-scale=1">',
             f"<title>isotax comparison {esc(c.b.id)} vs {esc(c.a.id)}</title>"
             f"<style>{CSS}</style></head><body>",
             f"<h1>isotax comparison: B {esc(c.b.id)} against A {esc(c.a.id)}</h1>", *_head(c)]
    if c.host_differences:
        parts += ["<div class=warn><b>The hosts differ</b> (compared anyway, with --force): "
                  "a difference below may be the host's, not the change under study.<ul>",
                  *[f"<li>{esc(x)}</li>" for x in c.host_differences], "</ul></div>"]
    emulated = sorted({e.name for d in (a, b) for e in d.environments if d.emulated(e.name)})
    if emulated:
        parts.append(f"<p class=emulated>Emulated (TCG, not KVM) in a run: "
                     f"{esc(', '.join(emulated))}.</p>")
    if not c.lines:
        parts.append("<p>The runs have no environment x workload point x metric in common."
                     "</p>")
    else:
        parts += ["<h2>B / A, headline metrics</h2>",
                  "<p class=small>Run B's mean over run A's, per environment and workload "
                  "point; green better in B, red worse, grey ≈ equivalent, ? undecided (the "
                  "verdicts: a confidence sequence on each run, judged against the margin); "
                  "under it A's and B's means and their repetitions.</p>",
                  _headline_table(c, a),
                  html_figure(compare_figures.b_over_a(c, a), "Run B over run A (log scale) with "
                                                          "95% intervals.")]
        tax = compare_figures.tax_a_and_b(a, b)
        if tax:
            parts += ["<h2>The isolation tax in A and in B</h2>",
                      html_figure(tax, f"Each environment's ratio to {a.baseline} in A and in B: "
                                   "where they part, the tax itself changed.")]
        overlays = _overlays(a, b)
        if overlays:
            parts += ["<h2>The studies' figures, B over A</h2>", *overlays]
        parts.append("<h2>Every metric</h2>")
        for env, lines in by_environment(c).items():
            rows = []
            for x in lines:
                rows.append([f"{x.workload} {a.sweep_label.get((x.workload, x.params_key), '')}"
                             .strip(), f"{x.metric} {'↑' if x.higher_is_better else '↓'}",
                             x.unit, f"{x.mean_a:.4g}", f"{x.mean_b:.4g}", judged_ratio(x),
                             verdict_words(x)])
            parts += [f"<h3>{esc(a.label(env))}</h3>",
                      html_table(["workload point", "metric", "unit", "A", "B", "B / A",
                              "verdict"], rows)]
    if c.only_a or c.only_b:
        parts += ["<h2>Not in both runs</h2>", "<ul>",
                  *[f"<li>only in A: {esc(p)}</li>" for p in c.only_a],
                  *[f"<li>only in B: {esc(p)}</li>" for p in c.only_b], "</ul>"]
    parts.append("<p class=small>Written by isotax compare; no external resources.</p>"
                 "</body></html>")
    return "\n".join(p for p in parts if p) + "\n"
