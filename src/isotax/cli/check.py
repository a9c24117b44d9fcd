"""`isotax check RUN --bounds FILE`: the CI gate. Exit 0 when every ratio is within its
bounds, 1 on any decided violation (one FAIL line each), 2 on bad input (one line, fail()).
The judging is isotax.analysis.gate's; this only opens the runs and prints. Registered on
isotax.cli.main by that package; imports inside the function as the other
commands do (isotax.cli's docstring says why)."""

from __future__ import annotations

import sys
from contextlib import ExitStack
from pathlib import Path

import click

from isotax.cli.common import fail, open_results_store, open_run, results_option


def _reference(ref: str, where: str, bounds_path: Path, results_dir: Path,
               stack: ExitStack):  # type: ignore[no-untyped-def]
    """(store, run id) of a no_worse_than run: a bundle beside the bounds file or where the
    command stands, else a run id in the store; a bad one fails naming the bound."""
    from isotax.store.base import StoreError

    beside = bounds_path.parent / ref
    if beside.is_file():  # a bundle kept in the repository next to its bounds
        return open_run(str(beside), results_dir, stack)
    if Path(ref).is_file():
        return open_run(ref, results_dir, stack)
    store = open_results_store(results_dir)
    try:
        return store, store.get_run(ref).id
    except StoreError as e:
        fail(f"{where}: no_worse_than = {ref!r}: {e}")


@click.command("check")
@click.argument("run_id", metavar="RUN", required=False)
@click.option("--bounds", "bounds_path", required=True, metavar="FILE",
              type=click.Path(path_type=Path, dir_okay=False),
              help="The bounds: a claims file (its claims marked gate = true fail when they "
                   "do not hold; docs/studies.md) or a TOML file of [[bound]] tables "
                   "(docs/ci-gate.md).")
@results_option
@click.option("--json", "as_json", is_flag=True,
              help="Print the findings and the summary as one JSON document instead.")
def check_cmd(run_id: str | None, bounds_path: Path, results_dir: Path, as_json: bool) -> None:
    """Check RUN's ratios to its baseline against the bounds in FILE, for CI: exit 1 when a
    decided ratio lies beyond a bound (one FAIL line per violation), 0 when none does,
    2 on bad input. Undecided and within-noise ratios never fail (NOTE lines); a bound that
    matches nothing is a WARN line. RUN is an id in the store or a bundle file; the latest
    run in the store by default (as `isotax report`: give a CI job its own --results)."""
    import json

    from isotax.analysis.claim_verdicts import judge
    from isotax.analysis.gate import (
        Bounds,
        BoundsError,
        claim_findings,
        evaluate,
        format_lines,
        parse_bounds,
    )
    from isotax.analysis.report_data import analyze

    try:
        text = bounds_path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        fail(f"bounds file {bounds_path} not found; give the TOML file of [[bound]] tables "
             "(docs/ci-gate.md)")
    except UnicodeDecodeError:
        fail(f"{bounds_path}: not UTF-8 text; save the bounds file as UTF-8")
    except OSError as e:
        fail(f"{bounds_path}: cannot be read ({e.strerror}); give a readable TOML file")
    # A claims file (its [[claim]] tables, docs/studies.md) is the one format; a bounds file
    # ([[bound]] tables: claims without provenance, from before there were claims) still reads.
    from isotax.analysis.claims import CLAIM_HEADER, ClaimsError, parse_claims

    claims = None
    if CLAIM_HEADER.search(text):
        try:
            claims = parse_claims(text, str(bounds_path))
        except ClaimsError as e:
            fail(str(e))
        bounds = Bounds(str(bounds_path), ())
    else:
        try:
            bounds = parse_bounds(text, str(bounds_path))
        except BoundsError as e:
            fail(str(e))
    with ExitStack() as stack:
        if run_id is None:
            store = open_results_store(results_dir)
            runs = store.list_runs()
            if not runs:
                fail(f"no runs in {results_dir}; run a plan first (`isotax run PLAN`) or give "
                     "--results DIR where the run is")
            rid = runs[-1].id
        else:
            store, rid = open_run(run_id, results_dir, stack)
        refs = {}
        for ref, where in bounds.references():
            s, r = _reference(ref, where, bounds_path, results_dir, stack)
            refs[ref] = analyze(s, r)
        data = analyze(store, rid)
        result = evaluate(bounds, data, refs)
        if claims is not None:
            verdicts = judge(claims, data)
            result.findings += claim_findings(verdicts)
            result.checked += len(verdicts)
            result.bounds = len(claims)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2))
    else:
        for line in format_lines(result):
            click.echo(line)
    sys.exit(result.exit_status)
