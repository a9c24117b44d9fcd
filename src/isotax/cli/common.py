"""What the command modules share: the console, the --results and --store options, one-line
failures (`fail`: exit status 2), opening the store, a run or a bundle, the workload image,
and writing a run's report. Each command module imports these; none imports another command
module, and isotax.cli (the `main` group) adds their commands."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:  # imported lazily at run time: `isotax --help` stays fast
    from isotax.image.artifacts import ImageArtifacts
    from isotax.image.distribution import Choice
    from isotax.image.recipe import Recipe
    from isotax.plan import Plan
    from isotax.store.base import Store

# Output that is not a terminal (a pipe, a file, a CI log) gets whole lines: rich would wrap
# them at 80 columns in the middle of words, and its tables would fold to 80 columns.
PIPED_WIDTH = 160


def make_console(stderr: bool = False) -> Console:
    """A rich console on stdout (stderr), whole lines where the output is not a terminal."""
    c = Console(stderr=stderr, highlight=False)
    if c.is_terminal:
        return c
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=PIPED_WIDTH)


console = make_console(stderr=True)
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
# several hosts or runs share): kept here for open_results_store, so that every command that opens
# a store takes it without another parameter.
store_url: list[str | None] = [None]


def _remember_store(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    store_url[0] = value or None


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


def open_results_store(results_dir: Path, create: bool = False):
    """The store in results_dir. Only `isotax run` creates one (create=True): a command that
    reads finds no store and says where it looked instead of leaving an empty one behind."""
    from isotax.store.base import StoreError
    from isotax.store.sqlite import open_store

    try:
        if store_url[0] is not None:
            from isotax.store.postgres import PostgresStore, is_postgres_url

            if not is_postgres_url(store_url[0]):
                fail(f"--store {store_url[0]!r} is not a store URL; give "
                     "postgresql://USER@HOST/DATABASE, or leave it out for the SQLite store "
                     "under --results")
            return PostgresStore(store_url[0])
        return open_store(results_dir, create=create)
    except StoreError as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot open the store in {results_dir}: {e}; check the path and permissions")



def cells_to_commit(p: Plan, done: int) -> int:
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


def image_choice(requested: str | None = None, why: str = "option") -> Choice:
    """The image's Debian release: `requested` (a plan's [image] distribution, or
    --distribution; `why` says which), else this host's own, else the fallback."""
    from isotax.image.distribution import host_choice

    try:
        return host_choice(requested, why)
    except ValueError as e:
        fail(str(e))


def recipe_for(choice: Choice | None = None) -> Recipe:
    """The image's recipe: its base packages and every registered workload's (the image,
    below the registry, is told them here), on the chosen release (default: image_choice)."""
    from isotax.protocols import image_recipe

    return image_recipe((choice or image_choice()).codename)


def image_artifacts(choice: Choice | None = None) -> ImageArtifacts:
    """The workload image of the chosen release, built here when not cached; fail() when it
    cannot be."""
    from isotax.host.facts import diskspace
    from isotax.image.build import ImageError, ensure_image

    try:  # a build that would not fit in the cache is refused before it starts (exit 2)
        return ensure_image(recipe_for(choice), log=lambda m: console.print(f"[dim]image:[/] {m}"),
                            space=diskspace.check)
    except ImageError as e:
        fail(str(e))


def get_run(store, run_id: str):  # type: ignore[no-untyped-def]
    """The run's record; fail() when the id names none."""
    from isotax.store.base import StoreError

    try:
        return store.get_run(run_id)
    except StoreError as e:
        fail(str(e))


def store_report_time(store, run_id: str, seconds: float) -> None:
    """The report's writing time as run_meta["phases"]["report_s"] (isotax.analysis.phases):
    the runner's phases end with the run, the report is written after it."""
    phases = store.run_meta(run_id).get("phases")
    if isinstance(phases, dict):
        store.put_run_meta(run_id, "phases", {**phases, "report_s": round(seconds, 3)})


def write_report(store, run_id: str, out_dir: Path,  # type: ignore[no-untyped-def]
                 formats: tuple[str, ...] | None = None) -> None:
    """The run's reports into out_dir, its summary and warnings on the terminal, and last
    the path of the HTML report."""
    from isotax.analysis.report_data import analyze
    from isotax.report import FILENAMES, write_reports
    from isotax.report.terminal import print_summary, print_warnings

    data = analyze(store, run_id)
    paths = write_reports(data, out_dir, formats) if formats else write_reports(data, out_dir)
    # The summary on stdout, within 100 columns; colour only on a terminal that has it.
    print_summary(data, make_console())
    # One line per kind of warning, the important kinds first; the report has each in full.
    print_warnings(data, console)
    others = [p for p in paths if p.name != FILENAMES["html"]]
    if others:
        console.print("report: " + ", ".join(str(p) for p in others))
    # The last line: the file to open (one self-contained page, figures included).
    html_path = next((p for p in paths if p.name == FILENAMES["html"]), None)
    if html_path is not None:
        click.echo(f"HTML report: {html_path}")


def version_warnings(store: Store, rid: str) -> None:
    """One line per report-shaping package (matplotlib, numpy, ...) whose version here differs
    from the one the run was reported with: the regenerated report may differ in bytes."""
    from isotax.host.facts import versions

    recorded = store.run_meta(rid).get(versions.META_KEY)
    current = versions.installed(versions.REPORT_PACKAGES)
    for line in versions.report_differences(recorded, current):
        console.print(f"[yellow]warning:[/] {escape(line)}")


def open_run(ref: str, results_dir: Path, stack: ExitStack):  # type: ignore[no-untyped-def]
    """(store, run id) for a run id in the store under results_dir, or for a bundle file
    from `isotax export` (unpacked and open until the stack closes); a bad one: fail()."""
    if not Path(ref).is_file():
        store = open_results_store(results_dir)
        return store, get_run(store, ref).id
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
