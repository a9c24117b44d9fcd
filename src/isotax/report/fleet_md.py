"""The Markdown form of a fleet side by side (isotax.analysis.fleet): per environment, every
workload point and metric with each host's isolation tax, its interval and markers, and the
hosts whose tax differs beyond the margin from the reference host's; which hosts are one machine
and what each run flagged; the host fingerprint facts that differ; the hosts that failed or
did not finish.

Built as blocks (isotax.report.table) that fleet_html renders too, so the two cannot drift."""

from __future__ import annotations

from collections.abc import Sequence

from isotax.analysis.fleet import DIFFERS, Fleet, FleetRow, HostTax, apart
from isotax.report.markdown import md_cell, md_table
from isotax.report.table import Block, Grid, Heading, Items, Text, to_markdown

LEGEND = ("Each cell: the host's isolation tax, its environment's mean over its own {base}'s "
          "(×), with its interval; ↑ higher is better, ↓ lower is better. "
          "≈: equivalent to {base} on that host; **≠**: differs from the reference host's "
          "tax beyond the margin (the ratio of the two taxes judged by the verdicts' "
          "confidence sequences, 95%); ?: undecided; TCG: emulated on that host; —: not "
          "measured there. The last column names the hosts that differ, each with its tax "
          "over the reference's.")


def _fmt_ratio(r: float) -> str:
    return f"{r:.3f}" if 0.001 <= abs(r) < 1000 else f"{r:.3g}"


def tax_text(t: HostTax | None) -> str:
    """One host's cell: tax [interval] and its markers."""
    if t is None:
        return "—"
    if t.tax is None:
        text = "no ratio"
    else:
        r = t.tax
        text = f"{_fmt_ratio(r.ratio)}×"
        if r.has_ci:
            text += f" [{_fmt_ratio(r.ci_low)}, {_fmt_ratio(r.ci_high)}]"
        if r.within_noise:
            text += " ≈"
    if t.emulated:
        text += " TCG"
    vs = t.vs_reference
    if apart(vs):
        text += " **≠**"
    elif vs is not None and vs.verdict == "undecided":
        text += " ?"
    return text


def differs_text(row: FleetRow) -> str:
    """The last column: the hosts that differ, each with its tax over the reference's; else
    the row's verdict."""
    if row.verdict != DIFFERS:
        return row.verdict
    out = []
    for h in row.differs:
        vs = row.taxes[h].vs_reference
        assert vs is not None
        out.append(f"{h} ({_fmt_ratio(vs.ratio)}× {row.reference})")
    return ", ".join(out)


def point_text(row: FleetRow) -> str:
    return f"{row.workload} {row.sweep}".strip()


def env_grid(f: Fleet, env: str) -> Grid:
    hosts = f.compared
    header = ["workload point", "metric"] + [
        f"{h} (reference)" if h == f.reference else h for h in hosts] + [DIFFERS]
    rows = [[point_text(r), f"{r.metric} {'↑' if r.higher_is_better else '↓'}"]
            + [tax_text(r.taxes.get(h)) for h in hosts] + [differs_text(r)]
            for r in f.rows_of(env)]
    return Grid(header, rows)


def env_counts(f: Fleet, env: str) -> tuple[int, int, int, dict[str, int]]:
    """(hosts that measured env, its metrics, metrics that differ beyond the margin, per host
    how many of its metrics differ)."""
    rows = f.rows_of(env)
    hosts = {h for r in rows for h in r.taxes}
    per_host: dict[str, int] = {}
    for r in rows:
        for h in r.differs:
            per_host[h] = per_host.get(h, 0) + 1
    return len(hosts), len(rows), sum(1 for r in rows if r.verdict == DIFFERS), per_host


def summary_grid(f: Fleet) -> Grid:
    rows = []
    for env in f.environments:
        n_hosts, n_rows, n_diff, per_host = env_counts(f, env)
        rows.append([env, str(n_hosts), str(n_rows), str(n_diff),
                     ", ".join(f"{h} ({n})" for h, n in per_host.items()) or "none"])
    return Grid(["environment", "hosts", "metrics", "differ beyond the margin",
                 "hosts that differ (metrics)"], rows)


def hosts_grid(f: Fleet) -> Grid:
    rows = []
    for h in f.hosts:
        d = f.data.get(h.name)
        fp = d.run.host if d else {}
        rows.append([h.name + (" (reference)" if h.name == f.reference else ""),
                     h.address or "-", h.run_id or "-", h.status or "-",
                     str(fp.get("cpu_model", "-")), str(fp.get("cpus", "-")),
                     str(fp.get("kernel", "-"))])
    return Grid(["host", "address", "run", "status", "CPU model", "CPUs", "kernel"], rows)


def same_machine_words(hosts: Sequence[str]) -> str:
    """The line that says hosts are one machine (the report's and the terminal's)."""
    names = ", ".join(hosts[:-1]) + f" and {hosts[-1]}"
    return (f"{names} are the same machine (one machine-id, same boot): their runs ran one "
            "after the other there, so what differs between them is that machine's "
            "run-to-run variation, not a difference between machines.")


def blocks(f: Fleet) -> list[Block]:
    """Every section, in the Markdown's order (the HTML adds its figures before them)."""
    out: list[Block] = [Heading(2, "Summary"),
                        Text(f"Per environment: the hosts that measured it, its metrics, and "
                             f"how many differ beyond the margin from **{md_cell(f.reference)}** "
                             "(the reference host)."),
                        summary_grid(f), Heading(2, "Hosts"), hosts_grid(f)]
    out += [Text(same_machine_words(g)) for g in f.same_machines]
    flagged = [[h, w] for h, ws in f.flagged.items() for w in ws]
    out += [Heading(2, "What the runs flagged"),
            Text("Per host, what its own run flagged that makes its taxes differ for a reason "
                 "other than the machine (its report says more).")]
    out.append(Grid(["host", "flagged"], flagged) if flagged
               else Text("Nothing: no run flagged unequal resources, a changed host, tool "
                         "versions that differ or another run beside it."))
    if len(f.plans) > 1:
        out += [Heading(2, "Plans differ"),
                Text("**The hosts ran different plans** (put side by side anyway, with "
                     "--force): an environment of one name may be configured otherwise."),
                Items([f"plan {p}: {md_cell(', '.join(hs))}" for p, hs in f.plans.items()])]
    out += [Heading(2, "Isolation tax per host"), Text(LEGEND.format(base=md_cell(f.baseline)))]
    for env in f.environments:
        out += [Heading(3, md_cell(env)), env_grid(f, env)]
    if not f.environments:
        out.append(Text(f"No environment besides {md_cell(f.baseline)} has results."))
    out += [Heading(2, "Fingerprint facts that differ"),
            Text(f"Each host's fingerprint against the reference host "
                 f"**{md_cell(f.reference)}**'s: the facts that make runs of two hosts "
                 "incomparable on their own (host.fingerprint), here the reason to compare.")]
    diffs = [[h, d] for h, ds in f.host_differences.items() for d in ds]
    out.append(Grid(["host", f"differs from {f.reference}"], diffs) if diffs
               else Text("None: every host's fingerprint matches the reference's."))
    if f.troubled:
        out += [Heading(2, "Hosts that failed or did not finish"),
                Text("A host without a run is not in the tables; an unfinished run's tables "
                     "cover what it measured."),
                Grid(["host", "address", "status", "run", "reason"],
                     [[h.name, h.address or "-", h.status or "-", h.run_id or "-",
                       h.reason or "-"] for h in f.troubled])]
    return out


def render(f: Fleet) -> str:
    plans = sorted({d.run.plan_name for d in f.data.values()})
    out = [f"# isotax fleet report: {md_cell(f.fleet_id)}", "",
           f"Plan **{md_cell(', '.join(plans))}**, baseline **{md_cell(f.baseline)}**, "
           f"{len(f.hosts)} host(s), {len(f.compared)} with a run, reference host "
           f"**{md_cell(f.reference)}**."]
    out += to_markdown(blocks(f), md_table)
    return "\n".join([*out, ""])
