"""The section on adaptive repetitions (plan [adaptive], isotax.analysis.adaptive): the target, the
budget, how the added rounds ended, and per ratio to the baseline the half-width of its 95%
interval reached, with how many repetitions, met or not. It renders what the runner stored in
run_meta["adaptive"]; the arithmetic is isotax.analysis.adaptive's. Blocks, rendered by the Markdown
and HTML reports alike."""

from __future__ import annotations

from typing import Any

from isotax.analysis.report_data import ReportData
from isotax.report.table import Block, Grid, Heading, Text


def _which(meta: dict[str, Any]) -> str:
    if meta.get("metrics", "all") == "headline":
        return "each point's headline metric, the first its workload reports"
    return "every metric"


def _budget(meta: dict[str, Any]) -> str:
    parts = []
    if meta.get("budget_s") is not None:
        parts.append(f"{meta['budget_s']:g} s for the added cells")
    if meta.get("max_repetitions") is not None:
        parts.append(f"at most {meta['max_repetitions']} measured repetitions per point")
    return " and ".join(parts)


def blocks(d: ReportData) -> list[Block]:
    meta = d.run_meta.get("adaptive")
    if not meta:
        return []
    target = float(meta["target"])
    ratios = meta.get("ratios", [])
    out: list[Block] = [
        Heading(2, "Repetitions"),
        Text(f"Adaptive repetitions: the plan asks for the 95% interval of every ratio to "
             f"{d.baseline} ({_which(meta)}) to be within ±{target:.1%} of the ratio, with at "
             f"least {meta.get('min_repetitions', 2)} passing repetitions on each side. After "
             f"the {meta['repetitions']} fixed rounds, interleaved rounds were added for the "
             f"points short of it (each with {d.baseline}'s same point), within a budget of "
             f"{_budget(meta)}.")]
    ended = meta.get("ended")
    if ended is None:
        words = ("**Not finished**: the run stopped during the added rounds; "
                 f"`isotax run --resume {d.run.id}` goes on from what is stored.")
    else:
        words = f"**Ended: {ended}.**"
    out.append(Text(words + f" {meta['rounds']} round(s) added, {meta['added_cells']} cell(s) "
                            f"in {meta['spent_s']:.0f} s; {meta['met']} of {len(ratios)} "
                            "ratios met the target."))
    if not ratios:
        return out
    rows = []
    # Those short of the target first: they are what a reader should not over-interpret.
    for r in sorted(ratios, key=lambda r: bool(r["met"])):
        hw = r["half_width"]
        rows.append([r["environment"], r["workload"],
                     d.sweep_label.get((r["workload"], r["params"]), r["params"]), r["metric"],
                     f"{r['ratio']:.3f}", "no interval" if hw is None else f"±{hw:.1%}",
                     f"{r['n']} / {r['n_baseline']}", "met" if r["met"] else "**not met**"])
    out.append(Grid(["environment", "workload", "sweep", "metric", "ratio", "half-width",
                     f"n (env / {d.baseline})", f"±{target:.1%}"], rows))
    return out
