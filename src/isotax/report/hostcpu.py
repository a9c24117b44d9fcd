"""The section on what each environment's own host processes cost in CPU while the
workloads ran (isotax.telemetry.envcpu): per workload point the CPU-s per run, then per environment
which programs used it (the Sentry and Gofer, QEMU, an engine's shim and proxy, ...). Blocks,
rendered by the Markdown and HTML reports alike."""

from __future__ import annotations

from collections import defaultdict

from isotax.analysis.report_data import ReportData
from isotax.report.table import Block, Grid, Heading, Text


def _secs(x: float) -> str:
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def blocks(d: ReportData) -> list[Block]:
    if not d.env_cpu:
        return []
    envs = [c for c in d.columns if any(k[0] == c for k in d.env_cpu)]
    points = d.in_row_order((wl, pkey) for _, wl, pkey in d.env_cpu)
    out: list[Block] = [
        Heading(2, "CPU of the environments' own host processes"),
        Text("CPU seconds per measured run used by the host processes that make up each "
             "environment, and their descendants: a sandbox's kernel and file server (gVisor's "
             "Sentry and Gofer, which also run the workload), a VM's QEMU (vCPUs and device "
             "emulation), an engine's shim and proxy, the container's init and whatever else of "
             "it runs through the whole run. Commands that end within the run are not counted "
             "anywhere (their reaper differs by kind: runc on the host, docker's shim, conmon), "
             "so in containers this is the machinery's cost, not the workload's. Natively only "
             "the idle holder is counted. Mean [sd] per run.")]
    rows = []
    for wl, pkey in points:
        line = [wl, d.sweep_label.get((wl, pkey), "")]
        for env in envs:
            c = d.env_cpu.get((env, wl, pkey))
            line.append(f"{_secs(c.summary.mean)} [{_secs(c.summary.sd)}]" if c else "—")
        rows.append(line)
    out.append(Grid(["workload", "sweep"] + [d.label(e) for e in envs], rows))
    # Which programs used it, over every point of the run.
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for (env, _, _), c in d.env_cpu.items():
        for name, secs in c.by_program.items():
            totals[env][name] += secs * c.summary.n
    split = []
    for env in envs:
        progs = totals.get(env, {})
        whole = sum(progs.values())
        if whole <= 0:
            split.append([env, "0", "no CPU used by its own processes"])
            continue
        top = sorted(progs.items(), key=lambda kv: -kv[1])
        words = ", ".join(f"{name} {secs / whole:.0%}" for name, secs in top[:5])
        if len(top) > 5:
            words += f", {len(top) - 5} more"
        split.append([env, _secs(whole), words])
    out.append(Grid(["environment", "CPU-s over all runs", "by program"], split))
    return out
