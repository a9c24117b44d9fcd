"""`isotax run PLAN` and `isotax run --resume RUN`: the main job, as the pipeline reads it (the
plan or the stored run, this host's room for it, its turn to measure, the store, the image,
the Runner, the report). Registered on isotax.cli.main when that package is imported; each
command imports the stages it uses inside its own function (isotax.cli's docstring says
why)."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from isotax.cli.common import (
    DEFAULT_RESULTS,
    EXIT_DISK_FULL,
    cells_to_commit,
    console,
    fail,
    get_run,
    image_artifacts,
    image_choice,
    open_results_store,
    results_option,
    store_report_time,
    write_report,
)
from isotax.model import RunStatus

if TYPE_CHECKING:
    from isotax.image.artifacts import ImageArtifacts
    from isotax.image.distribution import Choice
    from isotax.plan import Plan
    from isotax.run.progress import LineProgress
    from isotax.store.base import Store


@click.command()
@click.argument("plan", required=False)
@click.option("--resume", "resume_id", metavar="RUN", help="Finish an interrupted run.")
@results_option
@click.option("--no-report", is_flag=True, help="Do not write the report at the end.")
@click.option("--force", is_flag=True,
              help="Resume even though the host's fingerprint changed (the report says so).")
@click.option("--beside", is_flag=True,
              help="Measure beside a run already measuring on this host instead of waiting "
                   "for it; results taken while both run carry a warning naming the other.")
@click.option("--budget", metavar="TIME",
              help="The run's wall time, e.g. 60m or 1h: the rounds added after the fixed "
                   "ones spend it where they decide most (sets [verdicts] deadline_s and "
                   "raises max_repetitions with it).")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), metavar="PATH",
              help="Run the plan's pods on the cluster this kubeconfig names, through its API "
                   "alone (not the local `isotax cluster up` one); needs --pod-image. A "
                   "resumed run keeps the one it started with.")
@click.option("--pod-image", metavar="REF",
              help="With --kubeconfig: the workload image's reference where the cluster's "
                   "nodes pull from (`isotax image oci-archive FILE` writes it; push FILE "
                   "there). Each pod's packages are checked against the image's.")
@click.option("--pull-secret", "pull_secrets", multiple=True, metavar="NAME|FILE",
              help="With --kubeconfig: credentials for the registry --pod-image is in, a "
                   "Secret's NAME (NAMESPACE/NAME; else the kubeconfig's namespace) or a "
                   "docker config.json, copied into each of isotax's namespaces there and "
                   "removed with them. Repeatable; a pod's options.pull_secret adds its own.")
# The run's id given by `isotax fleet run`, which follows each host's run by it in the store.
@click.option("--run-id", "given_id", hidden=True)
def run(plan: str | None, resume_id: str | None, results_dir: Path, no_report: bool,
        force: bool, beside: bool, budget: str | None, kubeconfig: str | None,
        pod_image: str | None, pull_secrets: tuple[str, ...], given_id: str | None) -> None:
    """Run PLAN (a TOML file, or a built-in plan: quick, full, layers, contrasts) and write
    its report.

    One run measures on a host at a time: a second waits for the first (or, with --beside,
    runs beside it). Before it starts, what a dead isotax process left behind (a run killed
    with SIGKILL, a reboot mid-run) is removed; what a live run owns is never touched."""
    from isotax.host import owners
    from isotax.plan import PlanError
    from isotax.run.runner import Runner

    _check_run_args(plan, resume_id, given_id)
    store = open_results_store(results_dir) if resume_id else None
    try:
        if store is not None and resume_id:
            p, text, run_id = _resumed(store, resume_id, budget, force)
        else:
            (p, text), run_id = _planned(plan or "", budget), ""
    except PlanError as e:
        fail(str(e))
    if os.geteuid() != 0:
        fail("isotax run needs root (containers, VMs, network namespaces); run it as root, "
             "or with sudo")
    # Room for the results, before anything is written or started (exit 2 if there is none).
    _check_run_space(p, results_dir, len(store.done_cells(run_id)) if store else 0,
                     not no_report)
    kube = _kubernetes_target(store, resume_id, kubeconfig, pod_image, pull_secrets)
    turn = _measuring_turn(resume_id, beside)  # its recovery sweeps the run's cluster too
    if store is None:
        store = open_results_store(results_dir, create=True)
    choice = image_choice(p.image.distribution, "plan")
    image = image_artifacts(choice)
    if not run_id:
        run_id = _create_run(store, p, text, given_id, budget)
    _record_image(store, run_id, p, choice, image)
    if kube:
        store.put_run_meta(run_id, "kubernetes", kube)
    console.print(f"run [bold]{run_id}[/] plan [bold]{p.name}[/] results {results_dir}")
    owners.claim(run_id, beside)  # `isotax runs` shows it live, with its PID
    with _full_disk_ends_run(store, p, run_id, results_dir, not no_report), \
            _progress(p) as progress:
        runner = Runner(p, text, store, image, log=progress.console.print, progress=progress)
        status = runner.run(run_id)
    turn.close()  # a run waiting for this one may start measuring now
    if status == RunStatus.REFUSED:
        fail(runner.refusal or "refused")
    if not no_report:
        with _full_disk_ends_run(store, p, run_id, results_dir, True, complete=True):
            started = time.monotonic()
            write_report(store, run_id, results_dir / run_id)
            store_report_time(store, run_id, time.monotonic() - started)
    if runner.lost:
        done = len(store.done_cells(run_id))
        click.echo(f"isotax: {runner.lost}; run {run_id} stopped, its {done} committed "
                   f"cell{'' if done == 1 else 's'} kept: once it answers again, "
                   f"`isotax run --resume {run_id}` finishes it", err=True)
        sys.exit(1)
    if status == RunStatus.INTERRUPTED:
        sys.exit(130)
    if status != RunStatus.COMPLETE:
        sys.exit(1)


def _kubernetes_target(store: Store | None, resume_id: str | None, kubeconfig: str | None,
                       pod_image: str | None, pull_secrets: tuple[str, ...] = ()
                       ) -> dict[str, object]:
    """Set the run's Kubernetes cluster (host.kubernetes.target): --kubeconfig's, or the one a
    resumed run started with; {} for the local one. What to record with the run."""
    from isotax.host.kubernetes import target

    if kubeconfig is None and store is not None and resume_id:
        stored = store.run_meta(resume_id).get("kubernetes") or {}
        kubeconfig, pod_image = stored.get("kubeconfig"), pod_image or stored.get("pod_image")
        pull_secrets = pull_secrets or tuple(stored.get("pull_secrets") or ())
    if kubeconfig is None:
        if pod_image or pull_secrets:
            fail(f"{'--pod-image' if pod_image else '--pull-secret'} goes with --kubeconfig: "
                 "the local cluster's nodes get the image from this host")
        target.choose(None, None)
        return {}
    try:
        target.choose(kubeconfig, pod_image, pull_secrets)
    except ValueError as e:
        fail(str(e))
    chosen = target.current()
    return {"kubeconfig": str(chosen.kubeconfig), "pod_image": pod_image or "",
            "pull_secrets": list(chosen.pull_secrets)}


def _check_run_args(plan: str | None, resume_id: str | None, given_id: str | None) -> None:
    if plan and resume_id:
        fail("give a PLAN or --resume RUN, not both: a resumed run uses its stored plan")
    if not plan and not resume_id:
        fail("give a PLAN (a TOML file, or `quick` / `full`), or --resume RUN")
    if given_id is not None and (resume_id or not re.fullmatch(r"[A-Za-z0-9_.-]+", given_id)):
        fail("--run-id takes a new run's id of letters, digits, '.', '_' and '-' (not with "
             "--resume)")


def _resumed(store: Store, resume_id: str, budget: str | None, force: bool
             ) -> tuple[Plan, str, str]:
    """(plan, its text, run id) of a stored run to go on with: its own plan and budget, on
    the host it was recorded on (or --force, and the report says so)."""
    from isotax.host.facts.fingerprint import fingerprint, fingerprint_differences
    from isotax.plan import parse_plan, with_budget
    from isotax.run import feasibility
    from isotax.store.run_meta import RunMeta

    record = get_run(store, resume_id)
    if record.status == RunStatus.COMPLETE:
        fail(f"run {record.id} is already complete; `isotax report {record.id}` shows it")
    p, text = parse_plan(record.plan_toml, f"stored plan of {record.id}"), record.plan_toml
    stored_budget = RunMeta(store.run_meta(record.id)).budget_s
    if budget is not None:
        fail("--budget is set when a run starts; a resumed run keeps its own")
    if stored_budget:
        p = with_budget(p, float(stored_budget))
    # What this host cannot give (memory, CPUs, a NUMA node, ...): one line, exit 2.
    feasibility.check(p, f"stored plan of {record.id}")
    # Samples from before and after the interruption are compared with each other: the host
    # must be the one they were recorded on (governor, THP, kernel, ...).
    changed = fingerprint_differences(record.host, fingerprint())
    if changed and not force:
        fail(f"run {record.id} was recorded on a host that differs now ({'; '.join(changed)}"
             "): restore the host's settings (`isotax system show`; `isotax system reset` if "
             "it was tuned since), or pass --force to mix them and have the report say so")
    if changed:
        store.put_run_meta(record.id, "fingerprint_forced", changed)
    return p, text, record.id


def _planned(plan: str, budget: str | None) -> tuple[Plan, str]:
    """A new run's plan (with --budget applied), checked against this host before the
    store, the image or any environment: one line, exit 2."""
    from isotax.plan import load_plan, parse_budget, plan_source, with_budget
    from isotax.run import feasibility

    p, text = load_plan(plan)
    if budget is not None:
        try:
            p = with_budget(p, parse_budget(budget))
        except ValueError as e:
            fail(str(e))
    feasibility.check(p, plan_source(plan))
    return p, text


def _record_image(store: Store, run_id: str, p: Plan, choice: Choice,
                  image: ImageArtifacts) -> None:
    """Say which Debian release the image is and why, and record it with the run (run meta
    "image", the first start's, as the versions are): the report's header names it. Where
    the plan measures on the host itself and the image is another release than the host's,
    one warning line: native's tools are not the image's versions (the report then names
    each tool that differs, with the same fix)."""
    from isotax import protocols

    console.print(f"[dim]image:[/] {image.recipe_hash}: {escape(choice.words())}")
    host_kinds = set(protocols.kinds_with(protocols.Isolation.HOST))
    differs = choice.native_differs()
    if differs and any(e.kind in host_kinds for e in p.run_environments):
        console.print(f"[yellow]warning:[/] {escape(differs)}")
    if "image" not in store.run_meta(run_id):
        store.put_run_meta(run_id, "image", {"hash": image.recipe_hash,
                                             "kernel": image.kernel_version(), **choice.meta()})


def _create_run(store: Store, p: Plan, text: str, given_id: str | None,
                budget: str | None) -> str:
    from isotax.host.facts.fingerprint import fingerprint
    from isotax.run.schedule import new_run_id

    run_id = given_id or new_run_id(p.name)
    if given_id and any(r.id == given_id for r in store.list_runs()):
        fail(f"run {given_id} is in the store already; resume it with --resume {given_id}")
    store.create_run(run_id, p.name, text, p.seed, fingerprint())
    if budget is not None:  # kept beside the plan's text: --resume applies it again
        store.put_run_meta(run_id, "budget_s", p.verdicts.deadline_s)
    return run_id


def _measuring_turn(resume_id: str | None, beside: bool) -> ExitStack:
    """This process's ledger (host.owners), its turn to measure (waiting for a run measuring
    now, unless beside), then the recovery of what dead isotax processes left. Returns the
    turn, to close once the run has measured."""
    from isotax.host import owners
    from isotax.run.measuring import measuring_turn
    from isotax.run.recovery import live_runs, recover

    owners.claim()
    live = next((lg for lg in live_runs() if lg.run_id == resume_id), None) if resume_id \
        else None
    if live is not None:
        fail(f"run {resume_id} is running now (PID {live.pid}); let it finish, or stop it "
             f"(kill -INT {live.pid}) and resume it then")
    turn = ExitStack()
    try:
        turn.enter_context(measuring_turn(beside, console.print))
    except KeyboardInterrupt:
        click.echo("isotax: interrupted while waiting for its turn; nothing was started",
                   err=True)
        sys.exit(130)
    recovered = recover()
    if recovered.summary():
        console.print(f"recovery: {recovered.summary()}")
    for lo, why in recovered.failed:
        console.print(f"[red]recovery: could not remove {lo.what}: {why}[/]")
    # One line per owner: a live cluster's supervisor alone owns a score of parts.
    kept: dict[str, list[str]] = {}
    for lo, why in recovered.kept:
        kept.setdefault(why, []).append(lo.what)
    for why, whats in kept.items() if len(kept) > 1 else ():  # one owner: the summary's
        more = f" and {len(whats) - 1} more" if len(whats) > 1 else ""
        console.print(f"[dim]recovery: kept {whats[0]}{more}: {why}[/]")
    return turn




def _check_run_space(p: Plan, results_dir: Path, done: int, report: bool) -> None:
    """Refuse, in one line and exit 2, a run whose results would not fit under results_dir:
    its cells still to commit, the store's journal and the report (host.diskspace)."""
    from isotax.host.facts import diskspace

    cells = cells_to_commit(p, done)
    what = (f"the results of plan {p.name} ({cells} cell{'' if cells == 1 else 's'} to "
            "commit, the store's journal"
            + (", the report)" if report else ")"))
    refusal = diskspace.check(results_dir, diskspace.run_bytes(cells, report), what,
                              "or give --results DIR on a larger disk, then run it again")
    if refusal:
        fail(refusal)


@contextmanager
def _full_disk_ends_run(store: Store, p: Plan, run_id: str, results_dir: Path, report: bool,
                        complete: bool = False) -> Iterator[None]:
    """A disk that fills inside the block ends `isotax run` in one line: where, what is free,
    what the rest needs, and the command that goes on once space is freed; exit
    EXIT_DISK_FULL. What was committed stands: the store rolled back the rest."""
    from isotax.host.facts import diskspace
    from isotax.store.base import DiskFull

    try:
        yield
    except DiskFull as e:
        done = len(store.done_cells(run_id))
        with suppress(Exception):  # SQLite drops its journal: the space left is then read
            store.close()
        default = Path(os.environ.get("ISOTAX_RESULTS") or DEFAULT_RESULTS)
        given = "" if results_dir == default else f" --results {results_dir}"
        if complete:
            what = f"writing {e.what}; run {run_id} is complete and stored"
            needed, then = diskspace.REPORT_BYTES, f"`isotax report {run_id}{given}`"
        else:
            what = (f"writing {e.what}; run {run_id} stopped, its {done} committed "
                    + ("cell is kept" if done == 1 else "cells are kept"))
            needed = diskspace.run_bytes(cells_to_commit(p, done), report)
            then = f"`isotax run --resume {run_id}{given}`"
        line = diskspace.filled(e.path, diskspace.free_bytes(e.path), needed, what, then)
        click.echo(f"isotax: {line}", err=True)
        sys.exit(EXIT_DISK_FULL)


def _progress(p: Plan) -> Progress | LineProgress:
    """A bar redrawn in place on a terminal; elsewhere a full progress line now and then.
    Both say how many headline ratios are decided so far."""
    vs = p.verdicts
    added = vs.max_repetitions is not None and vs.max_repetitions > p.repetitions
    if not console.is_terminal:
        from isotax.run.progress import LineProgress

        return LineProgress(console, vs.budget_s if added else None)
    columns = (TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
               TextColumn("{task.fields[verdicts]}"))
    return Progress(*columns, console=console, transient=False)
