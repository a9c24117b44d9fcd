"""`isotax claims [FILE...] --run RUN`: the studies' claims (or the user's own) judged against
a stored run, each as holds, does not hold, undecided or not measurable here
(isotax.analysis.claim_verdicts). Exit 0, or 1 with --gate when a claim marked gate = true
does not hold (one line naming it), or 2 on bad input (one line, fail()). Registered on
isotax.cli.main by that package; imports inside the function as the other commands do."""

from __future__ import annotations

import socket
import sys
from contextlib import ExitStack
from pathlib import Path

import click

from isotax.cli.common import fail, open_run, results_option


def _read(name: str) -> tuple[str, str]:
    """(text, how to name it) of a claims FILE: a path, else a built-in file's name."""
    from isotax.analysis.claims import builtin_files, builtin_source

    path = Path(name)
    if not path.exists():
        if name in builtin_files():
            return builtin_files()[name], builtin_source(name)
        fail(f"claims file {name} not found; give a TOML file of [[claim]] tables or a "
             f"built-in one ({', '.join(builtin_names())})")
    try:
        return path.read_bytes().decode("utf-8"), str(path)
    except UnicodeDecodeError:
        fail(f"{path}: not UTF-8 text; save the claims file as UTF-8")
    except OSError as e:
        fail(f"{path}: cannot be read ({e.strerror}); give a readable TOML file")


def builtin_names() -> list[str]:
    from isotax.analysis.claims import builtin_files

    return list(builtin_files())


def _host_can(probe: bool):  # type: ignore[no-untyped-def]
    """What this host gives the claims (KVM, NUMA nodes), and why it has no KVM ("" where it
    has, or where that cannot be told). probe: boot the image under /dev/kvm once if no probe
    is cached (before measuring); else only what is known without a boot."""
    from isotax.analysis.claims_plan import HostCan
    from isotax.environments.vm.qemu_accel import (
        current_image,
        expected_accelerator,
        proven_accelerator,
    )
    from isotax.host.facts.numa import nodes

    if probe:
        accel = proven_accelerator()
    else:
        image = current_image()
        accel = expected_accelerator(image.recipe_hash if image else None)
    kvm = accel.accel == "kvm"
    why = "" if kvm or accel.accel != "tcg" else accel.reason
    return HostCan(kvm, max(1, len(nodes()))), why


def _measure(placed, results_dir: Path, budget: str, host) -> str:  # type: ignore[no-untyped-def]
    """Run the plan the claims need (claims_plan) with the budget, as `isotax run` would,
    in a child process whose output is the user's; its run id."""
    import os
    import subprocess

    from isotax.analysis.claims_plan import claims_plan
    from isotax.cli.common import store_url
    from isotax.plan import PlanError, parse_budget, parse_plan
    from isotax.run.schedule import new_run_id

    try:
        parse_budget(budget)
    except ValueError as e:
        fail(f"--budget {budget!r}: {e}")
    name = "studies" if all(p.file.startswith("built-in ") for p in placed) else "claims"
    text = claims_plan(placed, host, name)
    try:
        parse_plan(text, "the claims' plan")
    except PlanError as e:
        fail(f"{e}; every claim here is left out, or names what no plan can run")
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}-plan.toml"
    path.write_text(text, encoding="utf-8")
    run_id = new_run_id(name)
    click.echo(f"claims: measuring what they need here: {path} (run {run_id}, budget {budget})")
    env = dict(os.environ)
    if store_url[0] is not None:
        env["ISOTAX_STORE"] = store_url[0]
    done = subprocess.run([sys.executable, "-m", "isotax", "run", str(path), "--budget", budget,
                           "--results", str(results_dir), "--run-id", run_id], env=env,
                          check=False)
    if done.returncode != 0:
        click.echo(f"isotax: the claims' run {run_id} ended with exit status "
                   f"{done.returncode}; its verdicts are not judged (resume it with "
                   f"`isotax run --resume {run_id}`, then `isotax claims --run {run_id}`)",
                   err=True)
        sys.exit(done.returncode)
    return run_id


@click.command("claims")
@click.argument("files", metavar="[FILE]...", nargs=-1)
@click.option("--run", "run_id", metavar="RUN",
              help="Judge them on this run (an id in the store or a bundle file) instead of "
                   "measuring what they need.")
@click.option("--budget", default="60m", show_default=True, metavar="TIME",
              help="Without --run: the wall time of the run that measures what the claims "
                   "need (60m, 1h, 900s).")
@results_option
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as one JSON document.")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path, dir_okay=False),
              metavar="PATH", help="Also write the verdicts as CSV to PATH.")
@click.option("--gate", is_flag=True,
              help="Exit 1 when a claim marked gate = true does not hold (for CI).")
def claims_cmd(files: tuple[str, ...], run_id: str | None, budget: str, results_dir: Path,
               as_json: bool, csv_path: Path | None, gate: bool) -> None:
    """Judge claims (the built-in studies' and runtimes' when no FILE is given): each claim
    holds, does not hold, is undecided (with the pairs that would decide it) or is not
    measurable here (with why). Without --run, first measure exactly what they need on this
    host within --budget. FILE is a claims TOML file or a built-in name (docs/studies.md)."""
    import json

    from isotax.analysis.claim_verdicts import counts, gate_failures, judge
    from isotax.analysis.claims import ClaimsError, parse_claims
    from isotax.analysis.report_data import analyze
    from isotax.report.claims_table import claims_csv, claims_lines

    placed = []
    texts: dict[str, str] = {}  # the user's files, kept with a run measured for them
    for name in files or tuple(builtin_names()):
        text, source = _read(name)
        try:
            placed += parse_claims(text, source)
        except ClaimsError as e:
            fail(str(e))
        if not source.startswith("built-in "):
            texts[source] = text
    seen: dict[str, str] = {}
    for p in placed:
        if p.id in seen and seen[p.id] != p.where:
            fail(f"{p.where}: id {p.id!r} is also the id of the claim at {seen[p.id]}; give "
                 "each claim its own id")
        seen[p.id] = p.where
    # A probe boot (minutes where KVM is not what it seems) only where a claim asks for KVM.
    host, no_kvm = _host_can(probe=run_id is None and any("kvm" in p.claim.requires
                                                         for p in placed))
    measured = run_id is None
    if run_id is None:
        run_id = _measure(placed, results_dir, budget, host)
    with ExitStack() as stack:
        store, rid = open_run(run_id, results_dir, stack)
        if measured:
            # The report judges the built-in claims always, a user's only where kept: keep
            # them with the run, and what this host lacks, then write its report again.
            store.put_run_meta(rid, "claims", {"files": texts, "no_kvm": no_kvm})
        data = analyze(store, rid)
    if measured:
        from isotax.report import write_reports

        write_reports(data, results_dir / rid)
    # This host's lack of KVM explains a KVM claim's missing VM only in a run made here.
    here = data.run.host.get("hostname") == socket.gethostname()
    try:
        verdicts = judge(placed, data, no_kvm if here else "")
    except ClaimsError as e:
        fail(str(e))
    failed = gate_failures(verdicts) if gate else []
    if csv_path is not None:
        csv_path.write_text(claims_csv(verdicts), encoding="utf-8")
    if as_json:
        click.echo(json.dumps({"run": rid, "counts": counts(verdicts),
                               "gate_failures": [v.placed.id for v in failed],
                               "claims": [v.to_json() for v in verdicts]}, indent=2))
    else:
        for line in claims_lines(verdicts, rid):
            click.echo(line)
    by_claim: dict[str, list] = {}
    for v in failed:  # one line per claim, however many of its points fail
        by_claim.setdefault(v.placed.id, []).append(v)
    for cid, vs in by_claim.items():
        more = f" (and {len(vs) - 1} more point(s))" if len(vs) > 1 else ""
        click.echo(f"FAIL claim {cid} ({vs[0].placed.where}) does not hold: {vs[0].why}{more}",
                   err=True)
    sys.exit(1 if failed else 0)
