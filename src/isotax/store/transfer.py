"""Copy one run from any store into any other through the Store protocol: the run (its
creation time kept), its environments in the order they were put, its cells in order with
their samples, telemetry summaries and series, its meta, and its status last.

Used to import bundles (`isotax import`, and the fleet's hosts' runs into a SQLite store) and
to write a bundle's store from a PostgreSQL one (store.bundle). The status goes last so that a
copy interrupted half-way reads as a run still "running" (resumable knowledge), never as a
complete one with missing cells. Cell ids are the destination's own: reports order cells by
them, and the order is kept.
"""

from __future__ import annotations

from isotax.model import FORMAT_VERSION
from isotax.store.base import CellOutcome, RunRecord, Store, StoreError


class RunExists(StoreError):
    """The destination already holds a run with this id: a copy never overwrites one."""


def has_run(store: Store, run_id: str) -> bool:
    """Whether `store` holds a run with exactly this id (get_run also accepts a prefix)."""
    try:
        return store.get_run(run_id).id == run_id
    except StoreError:  # absent, or ambiguous as a prefix of longer ids
        return False


def copy_run(src: Store, run_id: str, dst: Store, where: str = "the store") -> RunRecord:
    """Copy run_id (a full id or a unique prefix) from src into dst; returns the source's
    record. RunExists when dst has a run of that id; StoreError (one line) when the run's
    results format is newer than this isotax's (its rows would be read with another
    meaning)."""
    run = src.get_run(run_id)
    if run.format_version > FORMAT_VERSION:
        raise StoreError(f"run {run.id} has results format {run.format_version}, newer than "
                         f"this isotax's ({FORMAT_VERSION}); upgrade isotax to copy it")
    if has_run(dst, run.id):
        raise RunExists(f"run {run.id} is already in {where}; nothing was imported (to "
                        "replace it, delete it there first)")
    dst.create_run(run.id, run.plan_name, run.plan_toml, run.seed, run.host,
                   created=run.created, format_version=run.format_version)
    for env in src.environments(run.id):
        dst.put_environment(env)
    summaries = src.telemetry(run.id)
    for c in src.cells(run.id):
        telemetry = ((summaries[c.id], src.telemetry_series(c.id)) if c.id in summaries
                     else None)
        dst.commit_cell(run.id, c.key, c.workload_version,
                        CellOutcome(c.status, c.reason, c.samples, telemetry), c.started, c.ended)
    for key, value in src.run_meta(run.id).items():
        dst.put_run_meta(run.id, key, value, verbatim=True)
    dst.set_run_status(run.id, run.status, run.finished)
    return run
