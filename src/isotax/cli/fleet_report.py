"""`isotax fleet report`: a fleet's isolation tax per host side by side (fleet.md, fleet.html,
fleet.json) and a short summary on the terminal. isotax.cli.fleet adds it to its `fleet` group
(this module imports no other command module); the command imports the stages it uses
inside its own function, for start-up speed (isotax.cli's docstring says why)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from isotax.cli.common import console, fail, open_results_store, results_option

if TYPE_CHECKING:
    from isotax.analysis.fleet import Fleet

FILES = ("fleet.md", "fleet.html", "fleet.json")


def _state(results_dir: Path, fleet_id: str) -> dict[str, Any] | None:
    """The fleet's state file (<results>/fleets/<id>.json), if there is a readable one."""
    try:
        doc = json.loads((results_dir / "fleets" / f"{fleet_id}.json").read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _write(where: Path, texts: dict[str, str]) -> list[Path]:
    """Each file whole or not at all (a reader never sees half a report)."""
    where.mkdir(parents=True, exist_ok=True)
    out = []
    for name, text in texts.items():
        path = where / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        try:
            tmp.write_text(text)
            tmp.replace(path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            e.filename = e.filename or str(path)
            raise
        out.append(path)
    return out


def _summary(f: Fleet) -> None:
    """Per environment: its hosts and how many metrics differ beyond the margin; the hosts that
    are one machine and what each run flagged; the hosts that failed; the fingerprint facts
    that differ."""
    from isotax.report.fleet_md import env_counts, same_machine_words

    click.echo(f"fleet {f.fleet_id}: {len(f.hosts)} host(s), {len(f.compared)} with a run, "
               f"reference {f.reference}, ratios to {f.baseline}")
    for env in f.environments:
        n_hosts, n_rows, n_diff, per_host = env_counts(f, env)
        which = ", ".join(f"{h}: {n}" for h, n in per_host.items())
        click.echo(f"  {env}: {n_hosts} host(s), {n_diff} of {n_rows} metric(s) differ "
                   f"beyond the margin" + (f" ({which})" if which else ""))
    for g in f.same_machines:
        click.echo(same_machine_words(g))
    for name, flagged in f.flagged.items():
        for w in flagged:
            console.print(f"[yellow]{escape(name)} flagged:[/] {escape(w)}")
    for h in f.troubled:
        console.print(f"[yellow]host {escape(h.name)}:[/] {escape(h.status or 'no run')}"
                      + (f": {escape(h.reason)}" if h.reason else ""))
    for name, diffs in f.host_differences.items():
        if diffs:
            console.print(f"[dim]{escape(name)} differs from {escape(f.reference)}:[/] "
                          f"{escape('; '.join(diffs))}")


@click.command("report")
@click.argument("fleet_id", metavar="[FLEET_ID]", required=False)
@results_option
@click.option("--runs", "run_list", metavar="RUN1,RUN2,...",
              help="Put these runs side by side instead of a fleet's (each host named by its "
                   "fleet meta, else its fingerprint's hostname).")
@click.option("--out", type=click.Path(path_type=Path),
              help="Directory for fleet.md, fleet.html, fleet.json "
                   "[default: RESULTS/fleets/FLEET_ID].")
@click.option("--reference", metavar="HOST",
              help="The host every other is compared with [default: the first in inventory "
                   "order].")
@click.option("--force", is_flag=True,
              help="Put runs of different plans side by side anyway (the report lists them).")
def report(fleet_id: str | None, results_dir: Path, run_list: str | None, out: Path | None,
           reference: str | None, force: bool) -> None:
    """Each environment's isolation tax per host of fleet FLEET_ID side by side: which hosts
    differ beyond the margin, and the fingerprint facts that differ."""
    from isotax.analysis.fleet import (
        FleetError,
        fleet_hosts,
        hosts_of_runs,
        known_fleets,
        side_by_side,
        to_json,
    )
    from isotax.analysis.report_data import analyze
    from isotax.report import fleet_html, fleet_md
    from isotax.store.base import StoreError

    if not fleet_id and not run_list:
        fail("give a FLEET_ID (`isotax fleet report FLEET_ID`), or --runs RUN1,RUN2,... for "
             "any runs side by side")
    if fleet_id and (fleet_id in (".", "..") or "/" in fleet_id or "\\" in fleet_id):
        fail(f"fleet id {fleet_id!r} is not a name; give the id the fleet's runs carry")
    store = open_results_store(results_dir)
    if run_list:
        ids = [r.strip() for r in run_list.split(",") if r.strip()]
        if len(ids) < 2:
            fail("--runs needs two or more run ids, separated by commas")
        try:
            hosts = hosts_of_runs(store, ids)
        except StoreError as e:
            fail(str(e))
        label = fleet_id or "runs-" + hashlib.sha256(",".join(ids).encode()).hexdigest()[:8]
    else:
        assert fleet_id is not None
        label = fleet_id
        hosts = fleet_hosts(store, fleet_id, _state(results_dir, fleet_id))
        if not hosts:
            known = ", ".join(known_fleets(store)[-5:]) or "none yet"
            fail(f"fleet {fleet_id!r} has no runs in the store and no state file under "
                 f"{results_dir / 'fleets'} (fleets there: {known}); give a fleet id its runs "
                 "carry, or --runs RUN1,RUN2 to put any runs side by side")
    try:
        data = {h.name: analyze(store, h.run_id) for h in hosts if h.run_id is not None}
        f = side_by_side(label, hosts, data, reference, force)
    except (FleetError, StoreError) as e:
        fail(str(e))
    where = out or results_dir / "fleets" / label
    paths = _write(where, {"fleet.md": fleet_md.render(f),
                           "fleet.json": json.dumps(to_json(f), indent=2) + "\n",
                           "fleet.html": fleet_html.render(f)})
    _summary(f)
    click.echo("fleet report: " + ", ".join(str(p) for p in paths if p.suffix != ".html"))
    click.echo(f"HTML fleet report: {where / 'fleet.html'}")
