"""The self-contained HTML form of a fleet side by side (isotax fleet report): like the run
report, one offline file with inline SVG and CSS and no script.

Contents: the hosts in a line each, per headline metric a figure of every environment's tax
on every host (grouped bars, 95% intervals, a line at 1.0), then the Markdown's own sections
(isotax.report.fleet_md's blocks: the summary, the hosts, the tax per environment and host,
the fingerprint facts that differ, the hosts that failed), with a table of contents. Every
string from a host, an inventory, a plan or a tool is escaped."""

from __future__ import annotations

from isotax.analysis.fleet import Fleet
from isotax.report import fleet_figures, fleet_md
from isotax.report.html import CSS, esc, html_figure, page, section_ids, sections_of


def render(f: Fleet) -> str:
    plans = sorted({d.run.plan_name for d in f.data.values()})
    head = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width, initial-scale=1">',
        f"<title>isotax fleet report {esc(f.fleet_id)}</title><style>{CSS}</style></head>"
        "<body>",
        f"<h1>isotax fleet report: {esc(f.fleet_id)}</h1>",
        f"<p>Plan <b>{esc(', '.join(plans))}</b>, baseline <b>{esc(f.baseline)}</b>, "
        f"{len(f.hosts)} host(s), {len(f.compared)} with a run, reference host "
        f"<b>{esc(f.reference)}</b>.</p>",
    ]
    if len(f.plans) > 1:
        head.append("<div class=warn><b>The hosts ran different plans</b> (put side by side "
                    "anyway, with --force): see Plans differ.</div>")
    missing = [h.name for h in f.troubled]
    if missing:
        head.append(f"<div class=warn>Failed or unfinished: {esc(', '.join(missing))} (see "
                    "Hosts that failed or did not finish).</div>")
    sections = sections_of(fleet_md.blocks(f))
    figs = [html_figure(fleet_figures.tax_bars(f, p), f"{p[0]} {p[2]}: each environment's tax "
                    f"on every host (ratio to {f.baseline} there), with 95% intervals; dashed: "
                    f"1.0, no tax; hollow: equivalent; ≠: differs beyond the margin from "
                    f"{f.reference}.") for p in f.headline_points()]
    figs = [x for x in figs if x]
    if figs:
        sections.insert(1, (2, "Figures", figs))
    return page(head, sections, section_ids(sections), "isotax fleet report")
