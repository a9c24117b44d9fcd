"""The section that attributes overhead to layers (isotax.analysis.attribution): per pair of
environments that differ in one setting, how many metrics that change moved beyond noise, and
those metrics with their ratio. Metrics within noise are counted, not listed: the section says
what a layer costs, where it costs something. Blocks, rendered by the Markdown and HTML
reports alike."""

from __future__ import annotations

from isotax.analysis.report_data import ReportData
from isotax.report.table import Block, Grid, Heading, Text


def blocks(d: ReportData) -> list[Block]:
    if not d.layers:
        return []
    out: list[Block] = [
        Heading(2, "Attribution to layers"),
        Text("Pairs of environments that differ in exactly one setting of the plan: the ratio "
             "is the second over the first, with its 95% bootstrap interval. Only metrics "
             "outside noise are listed.")]
    summary = []
    moved: list[list[str]] = []
    for layer in d.layers:
        ratios = [(row, r) for (lay, row), r in d.layer_ratios.items() if lay == layer]
        beyond = [(row, r) for row, r in ratios if r.has_ci and not r.within_noise]
        summary.append([layer.words(), f"{layer.before_env} → {layer.after_env}",
                        str(len(ratios)), str(len(beyond))])
        for row, r in beyond:
            moved.append([layer.words(), row.workload,
                          d.sweep_label.get((row.workload, row.params_key), ""), row.metric,
                          f"{r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] {r.verdict}"])
    out.append(Grid(["layer", "environments", "metrics compared", "beyond noise"], summary))
    if moved:
        out.append(Grid(["layer", "workload", "sweep", "metric", "ratio"], moved))
    return out
