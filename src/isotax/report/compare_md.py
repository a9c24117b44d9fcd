"""The markdown form of a comparison of two runs (isotax.analysis.compare): per environment, every
metric both runs measured, run B's mean over run A's with its 95% interval and verdict."""

from __future__ import annotations

from isotax.analysis.compare import Comparison, Line, by_environment
from isotax.report.markdown import fmt_number, md_cell, md_table


def judged_ratio(x: Line) -> str:
    """B / A and the interval its verdict came from; the ratio of means where no log."""
    if x.judged is None:
        return f"{x.ratio.ratio:.3f}"
    return f"{x.judged.ratio:.3f} {x.judged.interval()}"


def verdict_words(x: Line) -> str:
    """'worse by 8.1%', 'equivalent within ±2.0%', 'undecided' (or why none)."""
    return x.judged.words() if x.judged else "not judged (a value is not positive)"


def render(c: Comparison) -> str:
    out = [f"# isotax comparison: {md_cell(c.b.id)} (B) against {md_cell(c.a.id)} (A)", "",
           f"A: plan **{md_cell(c.a.plan_name)}** on {md_cell(c.a.host.get('hostname', '?'))}, "
           f"kernel {md_cell(c.a.host.get('kernel', '?'))}. "
           f"B: plan **{md_cell(c.b.plan_name)}** on {md_cell(c.b.host.get('hostname', '?'))}, "
           f"kernel {md_cell(c.b.host.get('kernel', '?'))}.",
           "", "Each row: mean in A and in B, and B / A (of the geometric means) with its 95% "
           "interval from a confidence sequence on each run (valid however many repetitions "
           "each run chose), and the verdict against the margin: worse or better beyond it, "
           "equivalent within it, else undecided; ↑ higher is better, ↓ lower is better.", ""]
    if c.host_differences:
        out += ["**The hosts differ** (compared anyway, with --force): a difference below may "
                "be the host's, not the change under study:", ""]
        out += [f"- {md_cell(d)}" for d in c.host_differences] + [""]
    for env, lines in by_environment(c).items():
        out += ["", f"## {md_cell(env)}", ""]
        rows = []
        for x in lines:
            arrow = "↑" if x.higher_is_better else "↓"
            rows.append([x.workload, x.params_key, f"{x.metric} {arrow}", x.unit,
                         fmt_number(x.mean_a), fmt_number(x.mean_b), judged_ratio(x),
                         verdict_words(x)])
        out += md_table(["workload", "params", "metric", "unit", "A", "B", "B / A", "verdict"],
                      rows)
    if c.only_a or c.only_b:
        out += ["", "## Not in both runs", ""]
        out += [f"- only in A: {md_cell(p)}" for p in c.only_a]
        out += [f"- only in B: {md_cell(p)}" for p in c.only_b]
    if not c.lines:
        out += ["", "The runs have no environment x workload point x metric in common."]
    return "\n".join(out) + "\n"
