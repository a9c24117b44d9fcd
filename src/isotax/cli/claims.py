"""`isotax claims [FILE...] --run RUN`: the studies' claims (or the user's own) judged against
a stored run, each as holds, does not hold, undecided or not measurable here
(isotax.analysis.claim_verdicts). Exit 0, or 1 with --gate when a claim marked gate = true
does not hold (one line naming it), or 2 on bad input (one line, fail()). Registered on
isotax.cli.main by that package; imports inside the function as the other commands do."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path

import click

from isotax.cli.common import fail, open_results_store, open_run, results_option


def _read(name: str) -> tuple[str, str]:
    """(text, how to name it) of a claims FILE: a path, else a built-in file's name."""
    from importlib import resources

    path = Path(name)
    if not path.exists():
        builtin = resources.files("isotax.claims").joinpath(f"{name}.toml")
        if builtin.is_file():
            return builtin.read_text(encoding="utf-8"), f"built-in {name}"
        fail(f"claims file {name} not found; give a TOML file of [[claim]] tables or a "
             f"built-in one ({', '.join(builtin_names())})")
    try:
        return path.read_bytes().decode("utf-8"), str(path)
    except UnicodeDecodeError:
        fail(f"{path}: not UTF-8 text; save the claims file as UTF-8")
    except OSError as e:
        fail(f"{path}: cannot be read ({e.strerror}); give a readable TOML file")


def builtin_names() -> list[str]:
    from importlib import resources

    return sorted(p.name.removesuffix(".toml") for p in resources.files("isotax.claims")
                  .iterdir() if p.name.endswith(".toml"))


@click.command("claims")
@click.argument("files", metavar="[FILE]...", nargs=-1)
@click.option("--run", "run_id", metavar="RUN",
              help="The run to judge them on: an id in the store or a bundle file (the "
                   "latest run in the store by default).")
@results_option
@click.option("--json", "as_json", is_flag=True, help="Print the verdicts as one JSON document.")
@click.option("--csv", "csv_path", type=click.Path(path_type=Path, dir_okay=False),
              metavar="PATH", help="Also write the verdicts as CSV to PATH.")
@click.option("--gate", is_flag=True,
              help="Exit 1 when a claim marked gate = true does not hold (for CI).")
def claims_cmd(files: tuple[str, ...], run_id: str | None, results_dir: Path, as_json: bool,
               csv_path: Path | None, gate: bool) -> None:
    """Judge claims (the built-in studies' and runtimes' when no FILE is given) against a
    run: each claim holds, does not hold, is undecided (with the pairs that would decide it)
    or is not measurable here (with why). FILE is a claims TOML file or a built-in name
    (docs/studies.md)."""
    import json

    from isotax.analysis.claim_verdicts import counts, gate_failures, judge
    from isotax.analysis.claims import ClaimsError, parse_claims
    from isotax.analysis.report_data import analyze
    from isotax.report.claims_table import claims_csv, claims_lines

    placed = []
    for name in files or tuple(builtin_names()):
        text, source = _read(name)
        try:
            placed += parse_claims(text, source)
        except ClaimsError as e:
            fail(str(e))
    seen: dict[str, str] = {}
    for p in placed:
        if p.id in seen and seen[p.id] != p.where:
            fail(f"{p.where}: id {p.id!r} is also the id of the claim at {seen[p.id]}; give "
                 "each claim its own id")
        seen[p.id] = p.where
    with ExitStack() as stack:
        if run_id is None:
            store = open_results_store(results_dir)
            runs = store.list_runs()
            if not runs:
                fail(f"no runs in {results_dir}; run a plan first (`isotax run PLAN`) or give "
                     "--run")
            rid = runs[-1].id
        else:
            store, rid = open_run(run_id, results_dir, stack)
        data = analyze(store, rid)
    try:
        verdicts = judge(placed, data)
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
    for v in failed:
        click.echo(f"FAIL claim {v.placed.id} ({v.placed.where}) does not hold: {v.why}",
                   err=True)
    sys.exit(1 if failed else 0)
