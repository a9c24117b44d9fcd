"""isotax command line: report · export · compare · runs here; run in cli/run.py; envs ·
workloads · image · system · doctor in cli/host.py.

`main` reads as the pipeline: plan -> image -> environments -> cells -> store -> report.
Every user error is one line on stderr and exit status 2; a disk that fills while a command
writes is one line and exit status 75 (EX_TEMPFAIL: free space, then run it again).

Each command imports the stages it uses inside its own function, for start-up speed alone:
`isotax --help` takes 0.07 s so, against 1.3 s with every stage and plugin imported (numpy,
scipy, matplotlib, pyroute2, every environment and workload module; measured on the 2-core
development machine). That is the only reason for an import inside a function in isotax.
"""

from __future__ import annotations

import errno
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from isotax import __version__
from isotax.model import RunStatus

if TYPE_CHECKING:  # imported lazily at run time: `isotax --help` stays fast
    from isotax.image.artifacts import ImageArtifacts
    from isotax.image.distribution import Choice
    from isotax.image.recipe import Recipe
    from isotax.plan import Plan
    from isotax.store.base import Store

# Output that is not a terminal (a pipe, a file, a CI log) gets whole lines: rich would wrap
# them at 80 columns in the middle of words, and its tables would fold to 80 columns.
PIPED_WIDTH = 160


def _console(stderr: bool = False) -> Console:
    c = Console(stderr=stderr, highlight=False)
    if c.is_terminal:
        return c
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=PIPED_WIDTH)


console = _console(stderr=True)
# One place for the results whatever the current directory: a store is never made in the
# directory someone happened to stand in.
DEFAULT_RESULTS = Path("/var/lib/isotax/results")
# sysexits' EX_TEMPFAIL: a disk filled after the run started; free space, then resume it.
EXIT_DISK_FULL = 75
_results_dir_option = click.option(
    "--results", "results_dir", type=click.Path(path_type=Path),
    default=lambda: Path(os.environ.get("ISOTAX_RESULTS") or DEFAULT_RESULTS),
    show_default="$ISOTAX_RESULTS, else /var/lib/isotax/results, wherever isotax runs from",
    help="Directory of the reports, and of the result store (isotax.db) unless --store.",
)
# The store's URL when it is not the SQLite file under --results (a PostgreSQL store that
# several hosts or runs share): kept here for _open_store, so that every command that opens
# a store takes it without another parameter.
_store_url: list[str | None] = [None]


def _remember_store(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    _store_url[0] = value or None


_store_option = click.option(
    "--store", metavar="URL", envvar="ISOTAX_STORE", expose_value=False, is_eager=True,
    callback=_remember_store,
    help="The result store: postgresql://USER@HOST/DB (psycopg 3), shared by several runs "
         "or hosts; default: the SQLite file isotax.db under --results. Also $ISOTAX_STORE.")


def results_option(f):  # type: ignore[no-untyped-def]
    """--results DIR and --store URL, for every command that reads or writes results."""
    return _results_dir_option(_store_option(f))


def fail(message: str) -> NoReturn:
    """One clear line naming the problem and the fix; exit status 2."""
    click.echo(f"isotax: {message}", err=True)
    sys.exit(2)


def _open_store(results_dir: Path, create: bool = False):
    """The store in results_dir. Only `isotax run` creates one (create=True): a command that
    reads finds no store and says where it looked instead of leaving an empty one behind."""
    from isotax.store.base import StoreError
    from isotax.store.sqlite import open_store

    try:
        if _store_url[0] is not None:
            from isotax.store.postgres import PostgresStore, is_postgres_url

            if not is_postgres_url(_store_url[0]):
                fail(f"--store {_store_url[0]!r} is not a store URL; give "
                     "postgresql://USER@HOST/DATABASE, or leave it out for the SQLite store "
                     "under --results")
            return PostgresStore(_store_url[0])
        return open_store(results_dir, create=create)
    except StoreError as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot open the store in {results_dir}: {e}; check the path and permissions")


class _Commands(click.Group):
    """The commands. A disk that fills under any of them (a report, an export, a comparison)
    ends in one line naming where, not a traceback: exit status EXIT_DISK_FULL. `isotax run`
    says more (what the rest of the run needs, how to resume it)."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except OSError as e:  # DiskFull is a StoreError, caught below
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            where = Path(e.filename).parent if e.filename else Path.cwd()
            what = f"writing {e.filename}" if e.filename else e.strerror or "writing"
        except Exception as e:
            from isotax.store.base import DiskFull

            if not isinstance(e, DiskFull):
                raise
            where, what = e.path, f"writing {e.what}"
        from isotax.host import diskspace

        free = diskspace.free_bytes(where)
        click.echo(f"isotax: the disk under {where} is full ({what}): {diskspace.human(free)} "
                   "free; free space there, then run the command again", err=True)
        sys.exit(EXIT_DISK_FULL)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="isotax")
def main() -> None:
    """Measure the isolation tax: a workload in a container, sandbox or VM against native."""


def _cells_to_commit(p: Plan, done: int) -> int:
    """The cells a run of p still commits, `done` being committed: every scheduled one, and
    as many measured ones more as [verdicts] max_repetitions allows for added rounds."""
    from isotax.run.schedule import schedule

    envs = [e.name for e in p.run_environments]
    cells = len(schedule(p, envs))
    cap = p.verdicts.max_repetitions
    if cap is not None and cap > p.repetitions:
        points = len(envs) * sum(len(w.combinations()) for w in p.workloads)
        cells += points * (cap - p.repetitions)
    return max(0, cells - done)


def _image_choice(requested: str | None = None, why: str = "option") -> Choice:
    """The image's Debian release: `requested` (a plan's [image] distribution, or
    --distribution; `why` says which), else this host's own, else the fallback."""
    from isotax.image.distribution import host_choice

    try:
        return host_choice(requested, why)
    except ValueError as e:
        fail(str(e))


def _recipe(choice: Choice | None = None) -> Recipe:
    """The image's recipe: its base packages and every registered workload's (the image,
    below the registry, is told them here), on the chosen release (default: _image_choice)."""
    from isotax.protocols import image_recipe

    return image_recipe((choice or _image_choice()).codename)


def _image(choice: Choice | None = None) -> ImageArtifacts:
    from isotax.host import diskspace
    from isotax.image.build import ImageError, ensure_image

    try:  # a build that would not fit in the cache is refused before it starts (exit 2)
        return ensure_image(_recipe(choice), log=lambda m: console.print(f"[dim]image:[/] {m}"),
                            space=diskspace.check)
    except ImageError as e:
        fail(str(e))


def _get_run(store, run_id: str):
    from isotax.store.base import StoreError

    try:
        return store.get_run(run_id)
    except StoreError as e:
        fail(str(e))


def _store_report_time(store, run_id: str, seconds: float) -> None:
    """The report's writing time as run_meta["phases"]["report_s"] (isotax.analysis.phases):
    the runner's phases end with the run, the report is written after it."""
    phases = store.run_meta(run_id).get("phases")
    if isinstance(phases, dict):
        store.put_run_meta(run_id, "phases", {**phases, "report_s": round(seconds, 3)})


def _write_report(store, run_id: str, out_dir: Path,
                  formats: tuple[str, ...] | None = None) -> None:
    from isotax.analysis.report_data import analyze
    from isotax.report import FILENAMES, write_reports
    from isotax.report.terminal import print_summary, print_warnings

    data = analyze(store, run_id)
    paths = write_reports(data, out_dir, formats) if formats else write_reports(data, out_dir)
    # The summary on stdout, within 100 columns; colour only on a terminal that has it.
    print_summary(data, _console())
    # One line per kind of warning, the important kinds first; the report has each in full.
    print_warnings(data, console)
    others = [p for p in paths if p.name != FILENAMES["html"]]
    if others:
        console.print("report: " + ", ".join(str(p) for p in others))
    # The last line: the file to open (one self-contained page, figures included).
    html_path = next((p for p in paths if p.name == FILENAMES["html"]), None)
    if html_path is not None:
        click.echo(f"HTML report: {html_path}")


@main.command()
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
            store = _open_store(results_dir)
            runs = store.list_runs()
            if not runs:
                fail(f"no runs in {results_dir}; start one with `isotax run quick`")
            rid, home = runs[-1].id, results_dir
        else:
            store, rid = _open_run(run_id, results_dir, stack)
            # A bundle's report goes beside the bundle (maybe on another machine).
            home = Path(run_id).parent if Path(run_id).is_file() else results_dir
        _version_warnings(store, rid)
        _write_report(store, rid, out or home / rid, formats)


def _version_warnings(store: Store, rid: str) -> None:
    """One line per report-shaping package (matplotlib, numpy, ...) whose version here differs
    from the one the run was reported with: the regenerated report may differ in bytes."""
    from isotax.host import versions

    recorded = store.run_meta(rid).get(versions.META_KEY)
    current = versions.installed(versions.REPORT_PACKAGES)
    for line in versions.report_differences(recorded, current):
        console.print(f"[yellow]warning:[/] {escape(line)}")


def _open_run(ref: str, results_dir: Path, stack: ExitStack):  # type: ignore[no-untyped-def]
    """(store, run id) for a run id in the store under results_dir, or for a bundle file
    from `isotax export` (unpacked and open until the stack closes); a bad one: fail()."""
    if not Path(ref).is_file():
        store = _open_store(results_dir)
        return store, _get_run(store, ref).id
    import tempfile

    from isotax.host import owners
    from isotax.store.base import StoreError
    from isotax.store.bundle import open_bundle

    d = stack.enter_context(tempfile.TemporaryDirectory(prefix=owners.temp_prefix("bundle")))
    try:
        store, rid = open_bundle(Path(ref), Path(d))
    except StoreError as e:
        fail(str(e))
    stack.callback(store.close)
    return store, rid


@main.command()
@click.argument("run_id", metavar="RUN")
@results_option
@click.option("--format", "fmt",
              type=click.Choice(["bundle", "json", "csv", "long", "parquet"]),
              default="bundle", show_default=True,
              help="bundle: the run's store rows, plan and fingerprint, for `isotax report "
                   "BUNDLE` elsewhere; json: results.json (versioned, with a JSON Schema); "
                   "csv: results.csv, one row per point x metric x environment; long: CSV, "
                   "one row per cell x metric, a column per parameter; parquet: the long "
                   "format as Parquet (pip install 'isotax[data]').")
@click.option("--out", type=click.Path(path_type=Path),
              help="File to write [default: RESULTS/RUN.itx.tar.gz, RUN.json, RUN.csv, "
                   "RUN.long.csv or RUN.parquet].")
def export(run_id: str, results_dir: Path, fmt: str, out: Path | None) -> None:
    """Export RUN as a portable bundle, JSON, CSV, or the long format (CSV or Parquet)."""
    from isotax import data
    from isotax.analysis.report_data import analyze
    from isotax.report import RENDERERS
    from isotax.store.bundle import export_bundle

    store = _open_store(results_dir)
    record = _get_run(store, run_id)
    suffix = {"bundle": ".itx.tar.gz", "json": ".json", "csv": ".csv", "long": ".long.csv",
              "parquet": ".parquet"}[fmt]
    path = out or results_dir / f"{record.id}{suffix}"
    if fmt == "bundle":
        export_bundle(store, record.id, path)
    elif fmt == "parquet":
        try:  # pandas and pyarrow are an extra: without them, one line saying how (exit 2)
            data.write_parquet(data.table(store, record.id), path)
        except data.MissingExtra as e:
            fail(str(e))
    else:
        text = (data.to_csv(data.table(store, record.id)) if fmt == "long"
                else RENDERERS[fmt](analyze(store, record.id)))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                path.unlink(missing_ok=True)  # half a file is no export
                e.filename = str(path)  # a write names no file: _Commands says where
            raise
    click.echo(str(path))


@main.command("compare")
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
        (sa, ida), (sb, idb) = (_open_run(run_a, results_dir, stack),
                                _open_run(run_b, results_dir, stack))
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


@main.command("runs")
@results_option
def runs_cmd(results_dir: Path) -> None:
    """List the runs in the store."""
    from isotax.run.recovery import live_runs

    store = _open_store(results_dir)
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
    _console().print(t)


# The commands about the host rather than runs (envs, workloads, image, system, doctor) are in
# cli/host.py, those beyond one host (fleet, import) in cli/fleet.py, the CI gate (check) in
# cli/check.py, the local Kubernetes (cluster) in cli/cluster.py, `run` in cli/run.py;
# importing them registers them on `main`.
from isotax.cli import check as _check  # noqa: E402, F401
from isotax.cli import cluster as _cluster  # noqa: E402, F401
from isotax.cli import fleet as _fleet  # noqa: E402, F401
from isotax.cli import host as _host  # noqa: E402, F401
from isotax.cli import run as _run  # noqa: E402, F401
