"""A run's metadata has a typed schema per key (isotax.store.run_meta, issue 30): what isotax
stores is checked against its key's schema, an unknown key or a misfit is refused with the key
named, a copy between stores is verbatim, and what is read back is typed, a misfit as absent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from isotax.analysis import sequential
from isotax.store import run_meta
from isotax.store.run_meta import RunMeta
from isotax.store.sqlite import SQLiteStore


def _store(tmp_path: Path) -> SQLiteStore:
    s = SQLiteStore(tmp_path / "isotax.db")
    s.create_run("r1", "p", 'name = "p"\n', 1, {"hostname": "h"})
    return s


def test_every_key_isotax_writes_has_a_schema_and_misfits_are_refused(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.put_run_meta("r1", "pairing", "blocks")
    s.put_run_meta("r1", "budget_s", 3600)
    with pytest.raises(ValueError, match="run meta 'pairing'"):
        s.put_run_meta("r1", "pairing", "sideways")
    with pytest.raises(ValueError, match="run meta key 'pariing' has no schema"):
        s.put_run_meta("r1", "pariing", "blocks")
    with pytest.raises(ValueError, match="run meta 'sequential': rounds"):
        s.put_run_meta("r1", "sequential", {"rounds": "many"})
    assert s.run_meta("r1") == {"pairing": "blocks", "budget_s": 3600}  # nothing half-written


def test_what_the_runner_writes_fits(tmp_path: Path) -> None:
    """The sequential meta as the runner makes it, through the store and back, typed."""
    p = sequential.Progress((), {}, {}, 12.5, 3, {}, 4)
    meta = sequential.to_meta({"margin": "auto"}, 1, 40, p, sequential.TIME_SPENT, 2)
    s = _store(tmp_path)
    s.put_run_meta("r1", "sequential", meta)
    typed = RunMeta(s.run_meta("r1")).sequential
    assert typed is not None and (typed.rounds, typed.added_cells, typed.spent_s) == \
        (2, 3, 12.5)
    assert typed.ended == sequential.TIME_SPENT and typed.max_repetitions == 40


def test_a_copy_is_verbatim_and_an_old_misfit_reads_as_absent(tmp_path: Path) -> None:
    s = _store(tmp_path)
    s.put_run_meta("r1", "reach", {"words": 5, "sd": "wide"}, verbatim=True)
    s.put_run_meta("r1", "adaptive", {"rounds": 2})  # before issue 28: kept, read by none
    meta = RunMeta(s.run_meta("r1"))
    assert meta.reach is None and meta.phases is None and meta.budget_s is None
    assert json.loads(json.dumps(s.run_meta("r1")))["reach"]["sd"] == "wide"
    assert set(run_meta.SCHEMA) >= {"sequential", "reach", "phases", "pairing", "budget_s",
                                    "fleet", "loadgen", "versions", "restarts", "cell_runs",
                                    "concurrent", "fingerprint_forced"}


def test_every_key_run_meta_reads_has_a_schema_and_collections_read_empty() -> None:
    """RunMeta's readers take their key from their own name: a misspelt one would read None
    for ever, so each must be a SCHEMA key."""
    read = [name for name, v in vars(RunMeta).items() if isinstance(v, run_meta.MetaKey)]
    assert len(read) >= 14 and set(read) <= set(run_meta.SCHEMA), set(read) - set(run_meta.SCHEMA)
    empty = RunMeta({})
    assert (empty.restarts, empty.concurrent, empty.fingerprint_forced, empty.cell_runs) == \
        ([], {}, [], {})
    assert RunMeta({"cell_runs": {"a": 2}, "pairing": 7}).cell_runs == {"a": 2}
    assert RunMeta({"pairing": 7}).pairing is None  # a misfit reads as absent


def test_the_load_generators_description_is_typed_old_words_included(tmp_path: Path) -> None:
    """LoadGen.describe() is a LoadGenDescription: stored as the fields it has, read back
    typed; runs stored when it was words ("yes", "no", "") read the same way."""
    from isotax.protocols import LoadGenDescription
    s = _store(tmp_path)
    said = LoadGenDescription(kind="ssh", where="root@10.0.0.2 over SSH", mtu="1500",
                              same_machine=False, rtt_floor_ms="0.041")
    assert said.to_stored() == {"kind": "ssh", "where": "root@10.0.0.2 over SSH",
                                "mtu": "1500", "same_machine": False, "rtt_floor_ms": "0.041"}
    s.put_run_meta("r1", "loadgen", said.to_stored())
    assert RunMeta(s.run_meta("r1")).loadgen == said
    for words, typed in (("yes", True), ("no", False), ("", None)):
        old = {"kind": "ssh", "same_machine": words, "hostname": "lg"}
        s.put_run_meta("r1", "loadgen", old, verbatim=True)
        back = RunMeta(s.run_meta("r1")).loadgen
        assert back is not None and back.same_machine is typed and back.hostname == "lg"
        assert back.listed() == [("hostname", "lg")]
