"""The commands about stored runs: report · export · compare · runs."""

from __future__ import annotations

import errno
import json
from contextlib import ExitStack
from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from isotax.cli.common import (
    console,
    fail,
    get_run,
    make_console,
    open_results_store,
    open_run,
    results_option,
    version_warnings,
    write_report,
)
from isotax.model import RunStatus


@click.command()
@click.argument("run_id", metavar="RUN", required=False)
@results_option
@click.option("--out", type=click.Path(path_type=Path), help="Directory for the report files.")
@click.option("--html", "html_only", is_flag=True,
              help="Write only the self-contained HTML report (report.html).")
def report(run_id: str | None, results_dir: Path, out: Path | None, html_only: bool) -> None:
    """Write RUN's report (HTML, Markdown, CSV, JSON) from the store; the latest run by
    default."""
    formats = ("html",) if html_only else None
    with ExitStack() as stack:
        if run_id is None:
            store = open_results_store(results_dir)
            runs = store.list_runs()
            if not runs:
                fail(f"no runs in {results_dir}; start one with `isotax run quick`")
            rid, home = runs[-1].id, results_dir
        else:
            store, rid = open_run(run_id, results_dir, stack)
            # A bundle's report goes beside the bundle (maybe on another machine).
            home = Path(run_id).parent if Path(run_id).is_file() else results_dir
        version_warnings(store, rid)
        write_report(store, rid, out or home / rid, formats)


@click.command()
@click.argument("run_id", metavar="RUN")
@results_option
@click.option("--format", "fmt",
              type=click.Choice(["bundle", "json", "csv", "long", "parquet", "kube-burner"]),
              default="bundle", show_default=True,
              help="bundle: the run's store rows, plan and fingerprint, for `isotax report "
                   "BUNDLE` elsewhere; json: results.json (versioned, with a JSON Schema); "
                   "csv: results.csv, one row per point x metric x environment; long: CSV, "
                   "one row per cell x metric, a column per parameter; parquet: the long "
                   "format as Parquet (pip install 'isotax[data]'); kube-burner: the pods' "
                   "start-ups (pod_startup) as kube-burner's podLatency documents.")
@click.option("--out", type=click.Path(path_type=Path),
              help="File to write [default: RESULTS/RUN.itx.tar.gz, RUN.json, RUN.csv, "
                   "RUN.long.csv, RUN.parquet or RUN.podLatency.json].")
def export(run_id: str, results_dir: Path, fmt: str, out: Path | None) -> None:
    """Export RUN as a portable bundle, JSON, CSV, the long format (CSV or Parquet), or its pod
    start-ups as kube-burner's podLatency documents."""
    from isotax import data
    from isotax.analysis import kube_burner
    from isotax.analysis.report_data import analyze
    from isotax.report import RENDERERS
    from isotax.store.bundle import export_bundle

    store = open_results_store(results_dir)
    record = get_run(store, run_id)
    suffix = {"bundle": ".itx.tar.gz", "json": ".json", "csv": ".csv", "long": ".long.csv",
              "parquet": ".parquet", "kube-burner": ".podLatency.json"}[fmt]
    path = out or results_dir / f"{record.id}{suffix}"
    if fmt == "bundle":
        export_bundle(store, record.id, path)
    elif fmt == "parquet":
        try:  # pandas and pyarrow are an extra: without them, one line saying how (exit 2)
            data.write_parquet(data.table(store, record.id), path)
        except data.MissingExtra as e:
            fail(str(e))
    else:
        if fmt == "kube-burner":
            docs = kube_burner.documents(record.id, store.cells(record.id), record.plan_toml)
            if not docs:
                fail(f"run {record.id} has no pod start-ups to export (the pod_startup "
                     "workload on a pod environment); run a plan that has them, e.g. "
                     "`isotax run kubernetes`")
            text = json.dumps(docs, indent=2) + "\n"
        elif fmt == "long":
            text = data.to_csv(data.table(store, record.id))
        else:
            text = RENDERERS[fmt](analyze(store, record.id))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                path.unlink(missing_ok=True)  # half a file is no export
                e.filename = str(path)  # a write names no file: _Commands says where
            raise
    click.echo(str(path))


@click.command("compare")
@click.argument("run_a", metavar="RUN_A")
@click.argument("run_b", metavar="RUN_B")
@results_option
@click.option("--force", is_flag=True,
              help="Compare even though the runs' host fingerprints differ (listed first).")
@click.option("--out", type=click.Path(path_type=Path),
              help="Directory for compare.md and compare.json [default: RESULTS/compare-A-B].")
@click.option("--margin", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.02,
              show_default=True,
              help="Equivalence margin on B / A, a fraction: within it 'equivalent', beyond "
                   "it 'worse' or 'better' (where the 95% interval says so).")
def compare_cmd(run_a: str, run_b: str, results_dir: Path, force: bool,
                out: Path | None, margin: float) -> None:
    """Compare run B against run A (two hosts, kernels, before/after a tuning): B / A with
    intervals per environment, workload point and metric. A run is an id in the store or a
    bundle file; the same run on both sides is refused."""
    import json

    from isotax.analysis.compare import NotComparable, compare, to_json
    from isotax.analysis.report_data import analyze
    from isotax.report import compare_html, compare_md

    with ExitStack() as stack:
        (sa, ida), (sb, idb) = (open_run(run_a, results_dir, stack),
                                open_run(run_b, results_dir, stack))
        a, cells_a, b, cells_b = sa.get_run(ida), sa.cells(ida), sb.get_run(idb), sb.cells(idb)
        try:
            c = compare(a, cells_a, b, cells_b, force, margin)
        except NotComparable as e:
            fail(str(e))
        data_a, data_b = analyze(sa, ida), analyze(sb, idb)
    where = out or results_dir / f"compare-{a.id}-{b.id}"
    where.mkdir(parents=True, exist_ok=True)
    (where / "compare.md").write_text(compare_md.render(c))
    (where / "compare.json").write_text(json.dumps(to_json(c), indent=2) + "\n")
    (where / "compare.html").write_text(compare_html.render(c, data_a, data_b))
    for d in c.host_differences:
        console.print(f"[yellow]host differs:[/] {escape(d)}")
    worse = sum(1 for x in c.lines if x.ratio.verdict == "worse")
    better = sum(1 for x in c.lines if x.ratio.verdict == "better")
    same = sum(1 for x in c.lines if x.ratio.verdict == "equivalent")
    click.echo(f"{len(c.lines)} metrics in both runs: {better} better, {worse} worse in B, "
               f"{same} equivalent within ±{margin:.1%}, the rest undecided (95% confidence "
               f"sequences on each run)")
    click.echo(f"comparison: {where / 'compare.md'}")
    click.echo(f"HTML comparison: {where / 'compare.html'}")


@click.command("runs")
@results_option
def runs_cmd(results_dir: Path) -> None:
    """List the runs in the store."""
    from isotax.run.recovery import live_runs

    store = open_results_store(results_dir)
    live = {lg.run_id: lg for lg in live_runs()}
    t = Table("run", "plan", "status", "cells", "live")
    for r in store.list_runs():
        lg = live.get(r.id)
        if lg is not None:
            now = f"measuring, PID {lg.pid}" + (" (beside)" if lg.beside else "")
        elif r.status == RunStatus.RUNNING:
            now = "no: its process is gone (`isotax run --resume` finishes it)"
        else:
            now = ""
        t.add_row(r.id, r.plan_name, r.status, str(len(store.done_cells(r.id))), now)
    make_console().print(t)
