"""The self-contained HTML report: one file that works offline (no CDN, no script at all; the
figures are inline SVG, the style is inline CSS), to open and to share.

Contents: the summary (each environment's headline ratio to the baseline per workload point as
a heat-map table with the interval its verdict came from, "within noise" and the suspected
limiter, and as a figure),
the warnings, the attribution to layers, the figures per workload (bars with deviations,
throughput vs concurrency with the loss against the baseline, throughput vs latency, MySQL
throughput vs CPU utilisation, latency CDFs with their tails, startup phases, memory vs
instances), the CPU per unit of work in and out of the environment, then every section of the
Markdown report (the results in the studies' Table 1 form with the ratios and the noise floor,
every result's verdict, cost and limiter, the repetitions, the environments' own host
processes, where the run's time went, the environments (emulated ones marked), the host and
its fingerprint, the tool versions, what did not apply, the outliers, the failures and the
exact plan), with a table of contents. Those sections are the Markdown's own blocks
(isotax.report.table), rendered here, so the two reports cannot drift apart. Every string that
comes from the host, the plan or a tool is escaped (html.escape); the SVG's own text is escaped
by matplotlib.
"""

from __future__ import annotations

import re
from html import escape

from isotax.analysis.report_data import ReportData
from isotax.analysis.report_warnings import folds, whom
from isotax.analysis.stats import Ratio
from isotax.analysis.verdicts import RatioVerdict
from isotax.report import (
    claims_figure,
    claims_section,
    decisions,
    drawing,
    emulation,
    figures,
    hostcpu,
    layers,
    markdown,
    phases_section,
    verdicts_section,
    warmups_section,
)
from isotax.report.table import Block, Code, Details, Gap, Grid, Heading, Items, Text

# The reports' one style sheet (the run's, the comparison's and the fleet's pages).
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:1.5em auto;max-width:
1200px;color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
td,th{border:1px solid #ddd;padding:.25em .5em;vertical-align:top;text-align:left}
th{background:#f4f4f4}td.num{text-align:right;white-space:nowrap}
.better{background:#d9f2d9}.worse{background:#f8d7d7}.noise{background:#eee;color:#555}
.small{font-size:.8em;color:#555}.warn{background:#fff4d6;border-left:4px solid #e0a800;
padding:.4em .8em;margin:.3em 0}.emulated{color:#b00;font-weight:bold}
pre{background:#f7f7f7;padding:.8em;overflow-x:auto;font-size:.85em}
figure{margin:1em 0}svg{max-width:100%;height:auto}
nav.toc{margin:.5em 0 1em;line-height:1.8}h3{margin-top:1.4em}
code{background:#f4f4f4;padding:0 .2em}details{margin:.4em 0}summary{cursor:pointer}
.claim-holds{background:#c8e6c9}.claim-fails{background:#ffcdd2}
.claim-undecided{background:#ffe0b2}.claim-nothere{background:#e0e0e0;color:#555}
table.claims td{max-width:22em;overflow-wrap:break-word}
"""


_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def esc(x: object) -> str:
    """Escaped text; a terminal's colour codes (a console tail, a tool's output) are dropped
    and any other control character shows as U+FFFD, not as nothing."""
    return escape(_CONTROL.sub("\ufffd", _ANSI.sub("", str(x))), quote=True)


def html_table(header: list[str], rows: list[list[str]], raw: bool = False) -> str:
    """An HTML table; cells are escaped unless raw (already markup built here)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c if raw else esc(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_figure(svg: str, caption: str) -> str:
    """A drawn figure with its caption; "" where nothing was drawn."""
    return f"<figure>{svg}<figcaption class=small>{esc(caption)}</figcaption></figure>" \
        if svg else ""


_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")


def _markup(escaped: str) -> str:
    """The inline markup the shared blocks use (**bold**, `code`) on already escaped text."""
    return _BOLD.sub(r"<b>\1</b>", _CODE.sub(r"<code>\1</code>", escaped))


def _inline(md: str) -> str:
    """A block's text (markdown's inline form, a pipe escaped for its tables) as HTML."""
    return _markup(esc(md.replace("\\|", "|")))


def _block(b: Block, prefix: str) -> str:
    """One shared block as HTML; a heading's id is prefixed by its section's."""
    if isinstance(b, Heading):
        return f"<h{b.level} id={prefix}-{_anchor(b.title)}>{_inline(b.title)}</h{b.level}>"
    if isinstance(b, Text):
        return f"<p>{_inline(b.text)}</p>"
    if isinstance(b, Grid):
        return html_table(b.header, [[_markup(esc(c)) for c in r] for r in b.rows], raw=True)
    if isinstance(b, Items):
        return "<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, Code):
        return f"<pre>{esc(b.text)}</pre>"
    if isinstance(b, Details):
        body = "".join(_block(x, prefix) for x in b.body)
        return f"<details><summary>{_inline(b.summary)}</summary>{body}</details>"
    assert isinstance(b, Gap)
    return ""


def sections_of(blocks: list[Block]) -> list[tuple[int, str, list[str]]]:
    """Blocks of the Markdown report as sections: each level-2 heading opens one."""
    out: list[tuple[int, str, list[str]]] = []
    for b in blocks:
        if isinstance(b, Heading) and b.level == 2:
            out.append((2, b.title.replace("\\|", "|"), []))
        elif out:
            out[-1][2].append(_block(b, _anchor(out[-1][1])))
    return out


def ratio_cell(rr: Ratio, verdict: RatioVerdict | None = None) -> str:
    """A ratio coloured by its verdict (grey and ≈ within noise, ? undecided), with the
    interval its verdict came from (the confidence sequence) where it has a verdict, else
    its bootstrap interval marked "bootstrap": the two differ, and only the first decides, so
    a bootstrap interval that excludes 1 must not stand unlabelled beside "undecided"."""
    cls = "noise" if rr.within_noise else (rr.verdict if rr.verdict in ("better", "worse")
                                           else "")
    text = f"{rr.ratio:.3f}"
    if rr.within_noise:
        text += " ≈"
    elif rr.decided == "undecided":
        text += " ?"
    if verdict is not None:
        text += f" <span class=small>{esc(verdict.interval())}</span>"
    elif rr.has_ci:
        text += (f" <span class=small>{decisions.BOOTSTRAP} [{rr.ci_low:.3f}, "
                 f"{rr.ci_high:.3f}]</span>")
    return f'<div class="{cls}">{text}</div>'


_SEE = re.compile(r"\bsee ([A-Z][\w ]*?)(?=[).,;])")


def _warning(text: str, sections: dict[str, str]) -> str:
    """A warning as HTML: its `code` as code, its "see Outliers" a link to that section."""
    return _SEE.sub(lambda m: f"see <a href=#{sections[m[1]]}>{m[1]}</a>"
                    if m[1] in sections else m[0], _markup(esc(text)))


def summary_table(d: ReportData) -> str:
    """Headline ratio per point (rows) and environment (columns): colour says better, worse
    or within noise; the limiter's kind under it."""
    envs = [e for e in d.columns if e != d.baseline]
    rows = []
    for r in d.headline_rows():
        arrow = "↑" if r.higher_is_better else "↓"
        line = [f"{esc(r.workload)} <span class=small>"
                f"{esc(d.sweep_label.get((r.workload, r.params_key), ''))}</span><br>"
                f"<span class=small>{esc(r.metric)} ({esc(r.unit)}) {arrow}</span>"]
        for env in envs:
            cell = d.cells.get((r, env))
            ex = d.explained.get((env, r.workload, r.params_key))
            lim = f"<br><span class=small>{esc(ex.limiter.limiter.value)}</span>" if ex else ""
            if cell is None or cell.ratio is None:
                why = d.na_reason(env, r)
                line.append(f"<span class=small>{'n/a' if why else '—'}</span>{lim}")
                continue
            line.append(ratio_cell(cell.ratio, decisions.verdict_of(d, r, env)) + lim)
        rows.append(line)
    header = ["workload point"] + [d.label(e) for e in envs]
    return html_table(header, rows, raw=True)


def _cost_table(d: ReportData) -> str:
    rows = []
    for (env, wl, pk), ex in sorted(d.explained.items(),
                                    key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        c = ex.cost
        if c is None:
            continue
        rows.append([d.label(env), f"{wl} {d.sweep_label.get((wl, pk), '')}".strip(), c.unit,
                     f"{c.inside:.4g}", f"{c.hidden:.4g}", f"{c.total:.4g}",
                     "-" if c.loadgen is None else f"{c.loadgen:.4g}",
                     ex.limiter.words])
    return html_table(["environment", "workload point", "per", "CPU-s in env",
                   "CPU-s hidden on host", "total", "load generator", "suspected limiter"],
                  rows)


def _environments(d: ReportData) -> str:
    rows = []
    for e in d.environments:
        desc = e.describe.lines()
        emu = "<span class=emulated>EMULATED (TCG)</span> " if d.emulated(e.name) else ""
        status = "ran" if e.available else f"not run: {e.reason}"
        details = "<br>".join(f"<b>{esc(k)}</b>: {esc(v)}" for k, v in desc.items())
        tools = ", ".join(f"{esc(k)} {esc(v)}" for k, v in e.tools.items())
        ready = e.milestones.get("ready")
        rows.append([esc(e.name), esc(e.kind), emu + esc(status),
                     f"{ready:.2f}" if isinstance(ready, int | float) else "-",
                     f"<span class=small>{details}</span>",
                     f"<span class=small>{tools}</span>"])
    return html_table(["environment", "kind", "status", "ready (s)", "description",
                   "tool versions"], rows, raw=True)


def _figures(d: ReportData) -> list[tuple[str, list[str]]]:
    """The per-workload figures, grouped under titles; empty groups are dropped later."""
    curves = {e: d.density_curves[e] for e in d.columns if e in d.density_curves}
    return [
        ("CPU, memory, network and disk", [
            html_figure(figures.bars(d), "Mean ± standard deviation of each point's headline "
                                     "metric.")]),
        ("Throughput vs concurrency", [
            html_figure(figures.concurrency(d, wl, knob), f"{wl}: throughput against {knob} per "
                    f"environment; dotted, right axis: the change against {d.baseline}.")
            for wl, knob in figures.sweep_knobs(d)]),
        ("Throughput vs latency", [
            html_figure(figures.throughput_latency(d, wl), f"{wl}: latency against throughput "
                    "along the concurrency sweep (each point labelled with its concurrency), "
                    "means over the repetitions.")
            for wl in figures.latency_workloads(d)]),
        ("Throughput vs CPU utilisation", [
            html_figure(figures.cpu_curve(d, wl), f"{c.title}: {c.label} against the host's CPU "
                    f"utilisation during {c.client}'s run (means over the repetitions, ± sd).")
            for wl, c in figures.cpu_curves(d)]),
        ("Latency distributions", [
            html_figure(figures.latency_cdf(d, key), "Every latency the tool recorded, pooled over "
                    "the repetitions (each weighs the same): the CDF, and its tail on a log "
                    "axis.")
            for key in d.latency_cdfs]),
        ("Startup", [html_figure(figures.startup(d, wl), "Startup phases: time from the request "
                                                     "to each milestone.")
                     for wl in figures.phase_workloads(d)]),
        ("Density", [html_figure(figures.density(curves, {e: d.label(e) for e in d.columns}),
                             "Host memory of N idle instances side by side.")]),
    ]


def _anchor(title: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in title.lower()).strip("-")


def render(d: ReportData) -> str:
    """The HTML report, its figures drawn by all CPUs (report.drawing): the same text."""
    return drawing.drawn_in_parallel(lambda: _render(d))


def _render(d: ReportData) -> str:
    run, host = d.run, d.run.host
    head = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width, initial-scale=1">',
        f"<title>isotax report {esc(run.id)}</title><style>{CSS}</style></head><body>",
        f"<h1>isotax report: run {esc(run.id)}</h1>",
        f"<p>Plan <b>{esc(run.plan_name)}</b>, status <b>{esc(run.status)}</b>, seed "
        f"{esc(run.seed)}, baseline <b>{esc(d.baseline)}</b>. Host {esc(host.get('hostname', '?'))}"
        f", {esc(host.get('cpu_model', '?'))}, {esc(host.get('cpus', '?'))} CPUs, kernel "
        f"{esc(host.get('kernel', '?'))}.</p>",
    ]
    if d.meta.image is not None and d.meta.image.line():
        head.append(f"<p>{esc(d.meta.image.line())}</p>")
    if emulation.note(d):  # the one explanation; Warnings points back to it
        head.append(f"<p class=emulated>{_inline(emulation.note(d))}</p>")
    # (level, title, body): a section without a body is left out, and so is its link.
    sections: list[tuple[int, str, list[str]]] = []
    summary: list[str] = []
    if decisions.counts_line(d):
        summary.append(f"<p><b>{esc(decisions.counts_line(d))}</b> (see Verdicts)</p>")
        summary += [f"<p>{esc(line)}</p>" for line in decisions.context_lines(d)]
    if d.rows and len(d.columns) > 1:
        summary += [f"<p class=small>Headline metric of every workload point: ratio of "
                    f"means to {esc(d.baseline)}; in brackets {decisions.SEQUENCE} (on the "
                    "ratio of geometric means of the round pairs, see Verdicts), wider than "
                    "the 95% bootstrap interval of Results, which decides nothing; a ratio "
                    "without a verdict shows its 95% bootstrap interval, marked so. Green "
                    "decided better, red decided worse, grey ≈ decided equivalent within its "
                    "margin, uncoloured ? undecided; under it the suspected limiter.</p>",
                    summary_table(d),
                    html_figure(figures.summary(d), "Ratio to the baseline per headline metric "
                            f"(log scale); line: {decisions.SEQUENCE}, none while it is "
                            "unbounded (a ratio without a verdict: its 95% bootstrap "
                            "interval).")]
    else:
        summary.append("<p>No ratios: the run has no results or only the baseline.</p>")
    sections.append((2, "Summary", summary))
    # Drawn once every section has its id, to link to them.
    warnings = emulation.report_warnings(d)
    sections.append((2, "Warnings", warnings))
    sections.append((2, claims_section.TITLE, _claims(d)))
    sections += sections_of(layers.blocks(d))  # the studies' key finding: what each layer costs
    groups = [(t, [f for f in figs if f]) for t, figs in _figures(d)]
    sections.append((2, "Figures", [""] if any(f for _, f in groups) else []))
    sections += [(3, t, figs) for t, figs in groups]
    if d.explained:
        sections.append((2, "CPU per unit of work", [
            "<p class=small>In the environment: what it accounted itself (its cgroup, or the "
            "guest's own /proc/stat). Hidden on the host: host-wide busy time less that, the "
            "load generator, isotax and other tenants (QEMU's emulation, gVisor's Sentry and "
            "Gofer, shims, the kernel outside any process).</p>",
            html_figure(figures.cost(d), "CPU seconds per unit of work, stacked: in the "
                                     "environment and hidden on the host."),
            _cost_table(d)]))
    # The rest is the Markdown report's own sections, from the same blocks.
    sections += sections_of(markdown.results_blocks(d) + verdicts_section.blocks(d)
                        + decisions.blocks(d) + warmups_section.blocks(d) + hostcpu.blocks(d)
                        + phases_section.blocks(d))
    sections.append((2, "Environments", [_environments(d)]))
    sections += sections_of(markdown.host_blocks(d) + markdown.loadgen_blocks(d)
                        + markdown.tool_versions_blocks(d)
                        + markdown.not_applicable_blocks(d) + markdown.outliers_blocks(d)
                        + markdown.failures_blocks(d))
    sections.append((2, "Plan (exact)", [f"<pre>{esc(run.plan_toml)}</pre>"]))
    kept = [(lvl, t, body) for lvl, t, body in sections if body]
    ids = section_ids(kept)
    h2 = {t: a for (lvl, t, _), a in zip(kept, ids, strict=True) if lvl == 2}
    warnings[:] = warning_blocks(warnings, h2)
    return page(head, kept, ids, "isotax")


def warning_blocks(warnings: list[str], sections: dict[str, str]) -> list[str]:
    """The warnings, most important kind first: a kind said of one environment or of the run
    whole, in full; a kind said of several environments (outliers, variance), one block with
    its title and those environments, each one's words under it, so that one noisy host's
    six alike lines do not bury the rest."""
    out = []
    for kind, said in folds(warnings):
        if kind is None:
            out.append(f"<div class=warn>{_warning(said[0], sections)}</div>")
            continue
        out.append(f"<div class=warn><details><summary><b>{esc(kind.title)}</b>{esc(whom(said))} "
                   "(open for each one's words)</summary>"
                   + "".join(f"<p>{_warning(w, sections)}</p>" for w in said)
                   + "</details></div>")
    return out


def _claims(d: ReportData) -> list[str]:
    """The studies' claims judged on this run: the words, the figure, and the table with
    each verdict's cell coloured by its outcome (and worded, for a reader without colour)."""
    shown = claims_section.verdicts(d)
    if not shown:
        return []
    col = claims_section.VERDICT_COLUMN
    rows = ["<tr>" + "".join(
        f"<td class=claim-{claims_section.OUTCOME_CLASS[v.outcome]}>{esc(c)}</td>" if i == col
        else f"<td>{esc(c)}</td>" for i, c in enumerate(claims_section.row(v))) + "</tr>"
        for v in shown]
    head = "".join(f"<th>{esc(h)}</th>" for h in claims_section.HEADER)
    return [f"<p>{_inline(claims_section.intro(d, shown))}</p>",
            html_figure(claims_figure.source_beside_host(shown),
                        "Each claim's source ratio (hollow diamond) beside this host's ratio "
                        "and its 95% confidence sequence, coloured by the verdict (log scale)."),
            f"<table class=claims><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}"
            "</tbody></table>"]


Section = tuple[int, str, list[str]]  # (heading level, title, body)


def section_ids(sections: list[Section]) -> list[str]:
    """One anchor per section, even where two titles make the same."""
    ids: list[str] = []
    for _, t, _ in sections:
        a, k = _anchor(t), 1
        while a in ids:
            k += 1
            a = f"{_anchor(t)}-{k}"
        ids.append(a)
    return ids


def page(head: list[str], sections: list[Section], ids: list[str], writer: str) -> str:
    """The document: head, the contents (level-2 titles, smaller ones small), every section
    under its heading, and the footer naming the `writer` ("isotax", "isotax fleet report")."""
    nav = " · ".join(f"<a href=#{a}>{esc(t)}</a>" if lvl == 2 else
                     f"<a class=small href=#{a}>{esc(t)}</a>"
                     for (lvl, t, _), a in zip(sections, ids, strict=True))
    parts = [*head, f"<nav class=toc>{nav}</nav>"]
    for (lvl, t, body), a in zip(sections, ids, strict=True):
        parts += [f"<h{lvl} id={a}>{esc(t)}</h{lvl}>", *body]
    parts.append(f"<p class=small>Written by {writer} from the result store; no external "
                 "resources.</p></body></html>")
    return "\n".join(p for p in parts if p) + "\n"
