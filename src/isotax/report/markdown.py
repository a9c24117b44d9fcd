"""Markdown: the studies' Table 1 form, `mean (Δ% vs native) [sd]`, with the header a reader
needs to trust it (host, environments, versions, accelerator, exact plan).

Every section is built as blocks (isotax.report.table) by a function here or by its own module
(lifecycle, verdicts, decisions, layers, hostcpu, phases); the HTML report renders the
same blocks, so the two reports carry the same sections with the same content."""

from __future__ import annotations

import datetime as dt
import math

from isotax.analysis.report_data import ReportData
from isotax.analysis.report_warnings import folds, whom
from isotax.host.facts import versions
from isotax.host.facts.fingerprint import show_rows
from isotax.report import (
    claims_section,
    decisions,
    emulation,
    hostcpu,
    layers,
    lifecycle,
    phases_section,
    verdicts_section,
    warmups_section,
)
from isotax.report.table import Block, Code, Details, Grid, Heading, Items, Text, to_markdown


def md_cell(text: object) -> str:
    """Table cells must not break the table: escape pipes, flatten newlines."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def fmt_number(x: float) -> str:
    """A number with three significant digits (at most six decimals), thousands separated."""
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:,.{min(digits, 6)}f}"


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table's lines, every cell escaped (md_cell)."""
    out = ["| " + " | ".join(md_cell(h) for h in header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]
    return out

def table1_rows(d: ReportData) -> tuple[list[str], list[list[str]]]:
    """Table 1's header and rows as plain text (markdown and HTML render them)."""
    header = ["workload", "sweep", "metric", "unit"] + [d.label(c) for c in d.columns]
    rows = []
    for row in d.rows:
        arrow = "↑" if row.higher_is_better else "↓"
        line = [row.workload, d.sweep_label.get((row.workload, row.params_key), ""),
                f"{row.metric} {arrow}", row.unit]
        for env in d.columns:
            cell = d.cells.get((row, env))
            if cell is None:
                line.append("n/a" if d.na_reason(env, row) else "—")
                continue
            s = cell.summary
            text = fmt_number(s.mean)
            if cell.ratio is not None:
                text += f" ({cell.ratio.delta_pct:+.1f}%)"
            text += f" [{fmt_number(s.sd)}]"
            if cell.ratio is not None and cell.ratio.within_noise:
                text += " ≈"
            elif cell.ratio is not None and cell.ratio.decided == "undecided":
                text += " ?"
            line.append(text)
        rows.append(line)
    return header, rows


def ratios_rows(d: ReportData) -> tuple[list[str], list[list[str]]]:
    """Every ratio to the baseline with its interval and verdict: header and rows."""
    others = [c for c in d.columns if c != d.baseline]
    header = ["workload", "sweep", "metric"] + [d.label(c) for c in others]
    rows = []
    for row in d.rows:
        line = [row.workload, d.sweep_label.get((row.workload, row.params_key), ""), row.metric]
        for env in others:
            cell = d.cells.get((row, env))
            r = cell.ratio if cell else None
            if r is None:
                line.append("n/a" if cell is None and d.na_reason(env, row) else "—")
            elif r.has_ci:
                line.append(f"{r.ratio:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] {r.verdict}")
            else:
                line.append(f"{r.ratio:.3f} ({r.verdict})")
        rows.append(line)
    return header, rows

def noise_floor_blocks(d: ReportData) -> list[Block]:
    """The A/A section: per metric, how far apart two identical environments came."""
    if not d.aa_env:
        return []
    out: list[Block] = [
        Heading(3, f"Noise floor (A/A: {md_cell(d.baseline)} against {md_cell(d.aa_env)})"),
        Text("The baseline ran twice, interleaved like every other environment. The largest "
             "distance from 1 inside that A/A ratio's 95% interval is the smallest difference "
             "this host can show for the metric; any environment's ratio closer to 1 than "
             "that is reported as within noise.")]
    if not d.noise_floor:
        return [*out, Text("No A/A ratio had an interval (it needs 2 or more repetitions).")]
    out.append(Grid(["workload", "sweep", "metric", "noise floor"],
                    [[r.workload, d.sweep_label.get((r.workload, r.params_key), ""), r.metric,
                      f"±{f * 100:.1f}%"] for r, f in d.noise_floor.items()]))
    return out

def not_applicable_blocks(d: ReportData) -> list[Block]:
    """What did not apply where, and why: one line per environment, workload and reason (the
    parameters it covers listed together)."""
    if not d.not_applicable and not d.not_measured:
        return []
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for (env, wl, pkey), why in d.not_applicable.items():
        grouped.setdefault((env, wl, why), []).append(pkey)
    for (env, wl, pkey, metric), why in d.not_measured.items():  # one metric, not the point
        grouped.setdefault((env, f"{wl} ({metric} only)", why), []).append(pkey)
    return [Heading(2, "Not applicable"),
            Text("These points, or single metrics of a point, were not run: they do not apply "
                 "to the environment (marked n/a above). That is not a failure, and rerunning "
                 "will not change it."),
            Grid(["environment", "workload", "parameters", "why"],
                 [[env, wl, "; ".join(keys), why] for (env, wl, why), keys in grouped.items()])]

def host_blocks(d: ReportData) -> list[Block]:
    """The host: its main facts, the runtimes, and the whole fingerprint folded away."""
    host = d.run.host
    runtimes = host.get("runtimes", {})
    out: list[Block] = [
        Heading(2, "Host"),
        Grid(["host", "kernel", "distribution", "CPU model", "CPUs", "NUMA nodes", "memory",
              "cgroups"],
             [[host.get("hostname", "?"), host.get("kernel", "?"), host.get("distro", "?"),
               host.get("cpu_model", "?"), str(host.get("cpus", "?")),
               str(host.get("numa_nodes", "?")), f"{host.get('memory_mib', 0)} MiB",
               host.get("cgroup", "?")]]),
        Text("Runtimes: " + "; ".join(f"{k}: {md_cell(v)}" for k, v in runtimes.items()))]
    if "smt" in host:  # runs recorded before the full fingerprint have only the line above
        out.append(Details("Host fingerprint (what a comparison of runs checks)",
                           (Grid(["what", "value"], [list(r) for r in show_rows(host)]),)))
    return out + versions_blocks(d)


def versions_blocks(d: ReportData) -> list[Block]:
    """The Python and host tool versions the run recorded (isotax.host.facts.versions), the
    report-shaping packages in one line; which of those differ here when the report is
    regenerated elsewhere. Nothing for a run made before they were recorded."""
    rec = d.meta.versions
    if rec is None:
        return []
    pkgs, tools = rec.python_packages, rec.host_tools
    out: list[Block] = [Text(f"Python {md_cell(rec.python)}; the report's packages: "
                             + md_cell(versions.show(versions.report_packages(pkgs).items())))]
    diffs = versions.report_differences(d.meta.raw.get(versions.META_KEY),
                                        versions.installed(versions.REPORT_PACKAGES))
    if diffs:
        out.append(Items([md_cell(x) for x in diffs]))
    out.append(Details("Python packages and host tools the run recorded",
                       (Grid(["what", "version"],
                             [[n, md_cell(v)] for n, v in pkgs.items()]
                             + [[f"{n} (host tool)", md_cell(v)] for n, v in tools.items()]),)))
    return out


def loadgen_blocks(d: ReportData) -> list[Block]:
    """Where the network clients ran: the load generator the run recorded (none: the run had
    no network workload, or was recorded before load generators were)."""
    lg = d.meta.loadgen
    if lg is None or not lg.kind:
        return []
    if lg.kind != "ssh":
        where = md_cell(lg.where or "a network namespace on this host")
        return [Heading(2, "Load generator"),
                Text(f"The clients ran in {where} ({md_cell(lg.netns or '?')}, veth MTU "
                     f"{md_cell(lg.mtu or '?')}): they share this host's CPUs, and the path "
                     "never leaves its kernel.")]
    rows = [[k, md_cell(v)] for k, v in lg.listed()]
    out: list[Block] = [Heading(2, "Load generator"),
                        Text(f"The clients ran on {md_cell(lg.where or '?')}, reaching each "
                             "environment over the link below (each result's path says how)."),
                        Grid(["what", "value"], rows)]
    if lg.same_machine:
        out.append(Text("**The load generator is this same machine** (another network "
                        "namespace of it: same machine-id and boot): its clients share this "
                        "host's CPUs, as with the local load generator."))
    return out


def environments_blocks(d: ReportData) -> list[Block]:
    env_rows = []
    for e in d.environments:
        desc = e.describe.lines()
        accel = desc.get("accelerator", "")
        if d.emulated(e.name):
            accel = f"**{accel or 'tcg'}: EMULATED**"
        details = ", ".join(f"{k}={v}" for k, v in desc.items()
                            if k not in ("kind", "accelerator", "emulated", "command_line"))
        ready = e.milestones.get("ready")
        env_rows.append([
            e.name, e.kind, "ran" if e.available else f"not run: {e.reason}",
            accel or "-", f"{ready:.2f}" if isinstance(ready, int | float) else "-", details,
        ])
    return [Heading(2, "Environments"),
            Grid(["environment", "kind", "status", "accelerator", "ready (s)", "details"],
                 env_rows)]


# Said where bootstrap intervals stand beside verdict words: a reader sees an interval that
# excludes 1 next to "undecided" and must know why that is no contradiction.
BOOTSTRAP_IS_NOT_THE_VERDICT = (
    "Every interval in this table is the 95% bootstrap interval of the ratio of means. Every "
    "verdict word (worse, better, equivalent, undecided) comes from the ratio's own, wider "
    "95% confidence sequence on the ratio of geometric means of the round pairs, against its "
    "margin (a headline's: see Verdicts; another metric's on the rounds it has), not from "
    "this interval: a bootstrap interval that excludes 1 beside \"undecided\" is no "
    "contradiction.")


def results_blocks(d: ReportData) -> list[Block]:
    """Table 1, the repetitions and parameters behind it, startup and density, the ratios
    with their intervals and the noise floor."""
    out: list[Block] = [
        Heading(2, "Results"),
        Text(f"Each cell: mean (Δ% vs {md_cell(d.baseline)}) [standard deviation]; ↑ higher is "
             "better, ↓ lower is better; ≈ marks a headline ratio decided equivalent within its "
             "margin, ? one still undecided (see Verdicts). Warm-ups are excluded."),
        Grid(*table1_rows(d)) if d.rows else Text("No results: every cell failed or none ran.")]
    ns = sorted({c.summary.n for c in d.cells.values()})
    if ns:
        out.append(Text("Measured repetitions per cell (n): " + ", ".join(map(str, ns)) + "."))
    if d.common_params:
        out += [Text("Parameters of every point (the sweep column shows the ones that vary):"),
                Items([f"{md_cell(wl)}: " + ", ".join(f"{k}={v}" for k, v in p.items())
                       for wl, p in d.common_params.items()])]
    out += lifecycle.startup_blocks(d) + lifecycle.density_blocks(d)
    if d.rows and len(d.columns) > 1:
        out += [Heading(3, f"Ratio to {md_cell(d.baseline)}, with 95% bootstrap interval"),
                Text(BOOTSTRAP_IS_NOT_THE_VERDICT), Grid(*ratios_rows(d))]
    return out + noise_floor_blocks(d)


def tool_versions_blocks(d: ReportData) -> list[Block]:
    tools = sorted({t for e in d.environments for t in e.tools})
    avail = [e for e in d.environments if e.available]
    return [Heading(2, "Tool versions"),
            Grid(["tool"] + [e.name for e in avail],
                 [[t] + [e.tools.get(t, "—") for e in avail] for t in tools])]


def outliers_blocks(d: ReportData) -> list[Block]:
    if not d.outliers:
        return []
    return [Heading(2, "Outliers"),
            Text("Values whose modified z-score (Iglewicz and Hoaglin) is beyond 3.5 among "
                 "their cell's repetitions. They are kept in every mean and interval above."),
            Grid(["environment", "workload", "sweep", "metric", "repetition", "value",
                  "modified z"],
                 [[env, r.workload, d.sweep_label.get((r.workload, r.params_key), ""),
                   r.metric, str(rep), f"{fmt_number(v)} {r.unit}", f"{z:+.1f}"]
                  for r, env, rep, v, z in d.outliers])]


def failures_blocks(d: ReportData) -> list[Block]:
    if not d.failures:
        return []
    return [Heading(2, "Failures"), Text("Failed runs store their reason, never a number."),
            Grid(["environment", "workload", "parameters", "run", "reason"],
                 [[c.key.environment, c.key.workload, c.key.params_key,
                   ("warm-up " if c.key.warmup else "rep ") + str(c.key.repetition),
                   c.reason] for c in d.failures])]


def warnings_blocks(d: ReportData) -> list[Block]:
    """The warnings, most important kind first, as the HTML report has them: a kind said of
    several environments (outliers, variance) folded under one line naming them."""
    if not d.warnings:
        return []
    listed = folds(emulation.report_warnings(d))
    whole = [md_cell(said[0]) for kind, said in listed if kind is None]
    folded: list[Block] = [Details(f"<b>{kind.title}</b>{md_cell(whom(said))}",
                                   (Items([md_cell(w) for w in said]),))
                           for kind, said in listed if kind is not None]
    return [Heading(2, "Warnings"), *([Items(whole)] if whole else []), *folded]


def plan_blocks(d: ReportData) -> list[Block]:
    return [Heading(2, "Plan (exact)"), Code("toml", d.run.plan_toml)]


def report_blocks(d: ReportData) -> list[Block]:
    """Every section of the report, in the Markdown's order."""
    return [*host_blocks(d), *loadgen_blocks(d), *environments_blocks(d), *results_blocks(d),
            *verdicts_section.blocks(d), *decisions.blocks(d), *warmups_section.blocks(d),
            *claims_section.blocks(d), *layers.blocks(d), *hostcpu.blocks(d),
            *phases_section.blocks(d), *tool_versions_blocks(d), *not_applicable_blocks(d),
            *outliers_blocks(d), *failures_blocks(d), *warnings_blocks(d), *plan_blocks(d)]


def render(d: ReportData) -> str:
    out = [f"# isotax report: run {d.run.id}", "",
           f"Plan **{md_cell(d.run.plan_name)}**, status **{d.run.status}**, started "
           f"{_when(d.run.created)}, finished {_when(d.run.finished)}, seed {d.run.seed}, "
           f"baseline **{md_cell(d.baseline)}**. Results format {d.run.format_version}."]
    if d.meta.image is not None and d.meta.image.line():
        out += ["", md_cell(d.meta.image.line())]
    if decisions.counts_line(d):  # the first thing a reader wants: what is decided
        out += ["", f"**{md_cell(decisions.counts_line(d))}** (see Verdicts)"]
        for line in decisions.context_lines(d):
            out += ["", md_cell(line)]
    if emulation.note(d):  # before the first table that marks an environment emulated
        out += ["", md_cell(emulation.note(d))]
    out += to_markdown(report_blocks(d), md_table)
    return "\n".join([*out, ""])
