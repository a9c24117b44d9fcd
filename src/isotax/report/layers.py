"""The section that attributes overhead to layers (isotax.analysis.attribution): per pair of
environments that differ in one setting, how many metrics that change made worse or better,
how many it left equivalent, and the worse and better ones with their ratio. The words are the
verdicts' (a confidence sequence on the rounds' pairs, the row's margin), so a layer that its
workload cannot touch comes out equivalent or undecided unless the run shows otherwise at
95%. Blocks, rendered by the Markdown and HTML reports alike."""

from __future__ import annotations

from isotax.analysis.report_data import ReportData
from isotax.analysis.verdicts import Verdict
from isotax.report.table import Block, Grid, Heading, Text


def blocks(d: ReportData) -> list[Block]:
    if not d.layers:
        return []
    out: list[Block] = [
        Heading(2, "Attribution to layers"),
        Text("Pairs of environments that differ in exactly one setting of the plan: the ratio "
             "is the second over the first, from the rounds both ran, with its 95% confidence "
             "sequence and the verdict against the row's margin, as for every ratio to the "
             "baseline. Only metrics made worse or better are listed.")]
    summary = []
    moved: list[list[str]] = []
    for layer in d.layers:
        ratios = [(row, r) for (lay, row), r in d.layer_ratios.items() if lay == layer]
        beyond = [(row, r) for row, r in ratios
                  if r.verdict in (Verdict.WORSE, Verdict.BETTER)]
        same = sum(1 for _, r in ratios if r.verdict is Verdict.EQUIVALENT)
        summary.append([layer.words(), f"{layer.before_env} → {layer.after_env}",
                        str(len(ratios)), str(len(beyond)), str(same),
                        str(len(ratios) - len(beyond) - same)])
        for row, r in beyond:
            # The pair named too: one setting may differ between several pairs (bridge →
            # host for runc and for docker), whose rows would otherwise read as repeats.
            moved.append([layer.words(), f"{layer.before_env} → {layer.after_env}",
                          row.workload,
                          d.sweep_label.get((row.workload, row.params_key), ""), row.metric,
                          f"{r.ratio:.3f} {r.interval()}", f"{r.words()} ({r.n} pairs)"])
    out.append(Grid(["layer", "environments", "metrics compared", "worse or better",
                     "equivalent", "undecided"], summary))
    if moved:
        out.append(Grid(["layer", "environments", "workload", "sweep", "metric", "ratio",
                         "verdict"], moved))
    return out
