"""The commands beyond one host: `isotax fleet run` (one plan on every host of an Ansible
inventory, into one store), the hidden `isotax fleet probe` the hosts answer the fleet's
polls with, and `isotax import` (bundles into the store: what the fleet does with a SQLite
store, and generally useful). Added to isotax.cli.main by that package;
each command imports the stages it uses inside its own function (isotax.cli's docstring says
why)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import click

from isotax.cli.common import (
    DEFAULT_RESULTS,
    cells_to_commit,
    console,
    fail,
    open_results_store,
    results_option,
    store_url,
)

if TYPE_CHECKING:
    from isotax.fleet.inventory import Host
    from isotax.fleet.state import FleetState


@click.group()
def fleet() -> None:
    """Run one plan on every host of an Ansible inventory, into one store."""


@fleet.command("run")
@click.argument("plan", required=False)
@click.option("--inventory", "-i", type=click.Path(path_type=Path), metavar="FILE",
              help="An Ansible inventory (INI, YAML, a directory): the hosts. Host vars: "
                   "isotax_dir (default /opt/isotax), isotax_results (default "
                   "/var/lib/isotax/results), isotax_store (the host's URL of a PostgreSQL "
                   "store), isotax_setup (default: bash scripts/setup.sh).")
@click.option("--resume", "resume_id", metavar="FLEET",
              help="Run the hosts of FLEET that did not complete (its inventory unless "
                   "--inventory).")
@click.option("--poll", "poll_s", type=click.IntRange(1, 3600), default=15, show_default=True,
              help="Seconds between two looks at a host's run (each costs the host about "
                   "0.1 s of CPU).")
@click.option("--force", is_flag=True,
              help="With --resume: resume each host's run even where that host's fingerprint "
                   "changed since the run started (each run's report says so), as "
                   "`isotax run --resume RUN --force` does on one host.")
@results_option
def fleet_run(plan: str | None, inventory: Path | None, resume_id: str | None, poll_s: int,
              force: bool, results_dir: Path) -> None:
    """Run PLAN on every host of --inventory: install isotax there from this checkout, run
    one run per host (hosts of one machine one after the other, machines in parallel), and
    bring every host's run into the store (--store postgresql://..., else the SQLite store
    under --results). Exit 0: every host complete; 1: some not (each named, with why)."""
    from isotax.fleet import ansible
    from isotax.fleet.checkout import CheckoutError, checkout_root
    from isotax.fleet.inventory import InventoryError, duplicate_refusal, read_inventory
    from isotax.fleet.orchestrate import Fleet, already_complete, run_fleet, summary, tidy
    from isotax.fleet.progress import FleetDisplay
    from isotax.fleet.state import (
        FleetState,
        HostState,
        StateError,
        load,
        new_fleet_id,
        new_run_id,
        save,
        state_path,
    )
    from isotax.plan import PlanError, load_plan, parse_plan

    if plan and resume_id:
        fail("give a PLAN or --resume FLEET, not both: a resumed fleet runs its stored plan")
    if not plan and not resume_id:
        fail("give a PLAN and --inventory FILE, or --resume FLEET")
    if force and not resume_id:
        fail("--force goes with --resume FLEET: it lets a host's interrupted run go on although "
             "the host changed; a new fleet's runs start on the hosts as they are")
    state: FleetState | None = None
    try:
        if resume_id:
            try:
                state = load(results_dir, resume_id)
            except StateError as e:
                fail(str(e))
            _resume_store(state)
            inv = inventory or Path(state.inventory)
            p, text = parse_plan(state.plan_toml, f"stored plan of {state.id}"), state.plan_toml
        else:
            if inventory is None:
                fail("give the hosts with --inventory FILE (an Ansible inventory, e.g. a line "
                     "`bench1 ansible_host=192.0.2.10` per host)")
            inv = inventory
            p, text = load_plan(plan or "")
    except PlanError as e:
        fail(str(e))
    inv = inv.resolve()
    try:
        hosts = read_inventory(inv, ansible.tool("ansible-inventory"))
    except InventoryError as e:
        fail(str(e))
    refusal = duplicate_refusal(str(inv), hosts)
    if refusal:
        fail(refusal)
    try:
        root = checkout_root()
    except CheckoutError as e:
        fail(str(e))
    url = store_url[0] or ""
    if state is None:
        state = FleetState(new_fleet_id(p.name), p.name, text, str(inv), _redacted(url),
                           str(results_dir.resolve()))
        for h in hosts:
            state.hosts[h.name] = HostState(h.name, h.address, h.port,
                                            run_id=new_run_id(p.name, h.name))
    else:
        _resume_hosts(state, hosts, inv)
    to_run = [h for h in hosts if h.name in state.hosts
              and state.hosts[h.name].status != "complete"]
    # Complete hosts whose run's files an earlier resume could not remove (not reached).
    untidy = [h.name for h in hosts if h.name in state.hosts
              and state.hosts[h.name].status == "complete" and state.hosts[h.name].leftovers]
    store = open_results_store(results_dir, create=True)
    path = state_path(results_dir, state.id)
    save(state, path)
    f = Fleet(state, path, to_run, inv, root, store, url, cells_to_commit(p, 0), poll_s,
              force=force)
    code = 0
    with FleetDisplay(console, [h.name for h in to_run], f.planned) as display:
        if resume_id:
            done = already_complete(f, display.log)
            f.hosts = [h for h in to_run if h.name not in done]
            tidy(f, [*untidy, *done], display.log)
        if f.hosts:
            code = run_fleet(f, display)
    for line in summary(state):
        click.echo(line)
    click.echo(_closing(state, results_dir, inv))
    sys.exit(code)


def _closing(state: FleetState, results_dir: Path, inv: Path) -> str:
    """The fleet's last line: how many hosts completed and, for the others, the command that
    gets them further from here: --resume for a run that can go on (with --force where a
    host's line asks for it), a new fleet where a host refused the plan (a resumed fleet
    runs the plan it stored)."""
    complete = len(state.hosts) - len(state.unfinished())
    out = f"fleet {state.id}: {complete} of {len(state.hosts)} hosts complete"
    default = Path(os.environ.get("ISOTAX_RESULTS") or DEFAULT_RESULTS)
    where = ("" if results_dir.resolve() == default.resolve() else f" --results {results_dir}") \
        + (" --store URL" if ":***@" in state.store else "")
    again = [h for h in state.unfinished() if not h.refused]
    refused = [h.name for h in state.unfinished() if h.refused]
    if again:
        force = any("--force" in h.reason for h in again)
        out += (f"; run the others again: isotax fleet run --resume {state.id}{where}"
                + (" (with --force to go on where a host's line says it changed)" if force
                   else ""))
    if refused:
        names = ", ".join(refused[:-1]) + (" and " if len(refused) > 1 else "") + refused[-1]
        lines = "their lines say" if len(refused) > 1 else "its line says"
        out += (f"; {names} refused the plan: change it as {lines} and start a new fleet "
                f"(isotax fleet run PLAN --inventory {inv}{where}): --resume would run the "
                "stored plan again")
    return out


def _redacted(url: str) -> str:
    from isotax.store.postgres import redacted

    return redacted(url) if url else ""


def _resume_hosts(state: FleetState, hosts: list[Host], inv: Path) -> None:
    """A resumed fleet's hosts must all be in the inventory; each is where it says now."""
    missing = [n for n in state.hosts if n not in {h.name for h in hosts}]
    if missing:
        fail(f"host{'s' if len(missing) > 1 else ''} {', '.join(missing)} of fleet "
             f"{state.id} {'are' if len(missing) > 1 else 'is'} not in inventory {inv}; "
             "give the inventory it ran with (--inventory FILE)")
    state.inventory = str(inv)
    for h in hosts:  # an inventory edited since: where the host is now
        if h.name in state.hosts:
            state.hosts[h.name].address, state.hosts[h.name].port = h.address, h.port


def _resume_store(state: FleetState) -> None:
    """A resumed fleet writes into the store it wrote into: the one given again (its
    password, which the state file does not keep), else the state's own."""
    given = store_url[0]
    if given is None and state.store:
        if ":***@" in state.store:
            fail(f"fleet {state.id} writes into {state.store}: give its URL with the password "
                 "again (--store URL or ISOTAX_STORE)")
        store_url[0] = given = state.store
    if _redacted(given or "") != state.store:
        where = state.store or f"the SQLite store under {state.results}"
        fail(f"fleet {state.id} writes into {where}; resume it with that store "
             f"({'--store URL' if state.store else 'without --store'})")


@fleet.command("probe", hidden=True)
@click.argument("run_id", metavar="RUN")
@click.option("--work", type=click.Path(path_type=Path), required=True)
@click.option("--status", "known", help="The run's status in the fleet's store (absent: not "
              "there), read by the controller: the store is not opened here.")
@results_option
def fleet_probe(run_id: str, work: Path, known: str | None, results_dir: Path) -> None:
    """(On a fleet's host, for its run playbook.) The run's state as one JSON line."""
    from isotax.fleet.probe import look

    def in_store(rid: str) -> tuple[str, int]:
        from isotax.store.base import StoreError
        from isotax.store.postgres import PostgresStore
        from isotax.store.sqlite import open_store

        if store_url[0] is None and not (results_dir / "isotax.db").is_file():
            return "", 0  # no run here has written a store yet
        store = PostgresStore(store_url[0]) if store_url[0] else \
            open_store(results_dir, create=False)
        try:
            try:
                run = store.get_run(rid)
            except StoreError:
                return "", 0
            return (run.status, len(store.done_cells(rid))) if run.id == rid else ("", 0)
        finally:
            store.close()

    status = None if known is None else "" if known == "absent" else known
    click.echo(look(run_id, work, in_store, status).to_json())


@click.command("import")
@click.argument("bundles", metavar="BUNDLE...", nargs=-1, required=True,
                type=click.Path(path_type=Path))
@results_option
def import_cmd(bundles: tuple[Path, ...], results_dir: Path) -> None:
    """Import runs from bundles (`isotax export`'s .itx.tar.gz) into the store, as they were
    recorded. A run already in the store is refused, never overwritten (exit 2)."""
    from isotax.host import owners
    from isotax.store.base import StoreError
    from isotax.store.bundle import open_bundle
    from isotax.store.transfer import copy_run

    store = open_results_store(results_dir, create=True)
    where = _redacted(store_url[0] or "") or str(results_dir / "isotax.db")
    refused = 0
    for b in bundles:
        with tempfile.TemporaryDirectory(prefix=owners.temp_prefix("import")) as d:
            try:
                src, rid = open_bundle(b, Path(d))
                try:
                    run = copy_run(src, rid, store, where)
                finally:
                    src.close()
            except StoreError as e:
                click.echo(f"isotax: {b}: {e}", err=True)
                refused += 1
                continue
        click.echo(f"imported run {run.id} ({run.plan_name}, {run.status}) from {b}")
    if refused:
        sys.exit(2)


