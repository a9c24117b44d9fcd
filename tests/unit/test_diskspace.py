"""Free disk space (issue 17, point 4): the decisions and their one-line words
(host.diskspace), the image build's check (image.build), and a store, a report and a bundle
that meet a full disk: DiskFull naming where, the store whole, every committed cell kept.

No root and no tmpfs: SQLite's max_page_count makes it answer "database or disk is full" as a
full filesystem does (SQLITE_FULL), and /dev/full answers every write with ENOSPC."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from support import hostile_store

from isotax.host.facts import diskspace
from isotax.host.facts.diskspace import GiB, KiB, MiB
from isotax.image import build
from isotax.image.recipe import Recipe
from isotax.model import CellKey, CellStatus, Sample
from isotax.store.base import CellOutcome, DiskFull
from isotax.store.sqlite import SQLiteStore

# -- the decision and its words -----------------------------------------------------------------


def test_shortfall_is_what_does_not_fit() -> None:
    assert diskspace.shortfall(10 * MiB, 8 * MiB) == 0
    assert diskspace.shortfall(8 * MiB, 8 * MiB) == 0  # exactly enough is enough
    assert diskspace.shortfall(600 * KiB, 8 * MiB) == 8 * MiB - 600 * KiB
    assert diskspace.shortfall(0, 1) == 1


def test_human_sizes() -> None:
    assert [diskspace.human(n) for n in (0, 512, 600 * KiB, 7 * MiB + MiB // 10,
                                         int(4.6 * GiB))] == \
        ["0 B", "512 B", "600 KiB", "7.1 MiB", "4.6 GiB"]


def test_run_bytes_from_the_measured_figures() -> None:
    # 12 KiB per cell (7.6 KiB measured), the journal 5 MiB, the report 3 MiB
    assert diskspace.run_bytes(0) == 8 * MiB
    assert diskspace.run_bytes(465) == 465 * 12 * KiB + 8 * MiB  # the quick run: 13.4 MiB
    assert diskspace.run_bytes(4, report=False) == 48 * KiB + 5 * MiB
    assert diskspace.run_bytes(-3) == diskspace.run_bytes(0)


def test_refusal_names_path_free_needed_and_fix_in_one_line() -> None:
    path = Path("/tmp/itx-results")
    assert diskspace.refusal(path, 9 * MiB, 8 * MiB, "the results", "or elsewhere") is None
    line = diskspace.refusal(path, 600 * KiB, 8 * MiB, "the results of plan p (2 cells)",
                             "or give --results DIR on a larger disk, then run it again")
    assert line == ("not enough free space under /tmp/itx-results for the results of plan p "
                    "(2 cells): 600 KiB free, about 8.0 MiB needed; free 7.4 MiB there or give "
                    "--results DIR on a larger disk, then run it again")
    assert "\n" not in line


def test_filled_asks_for_at_least_a_mebibyte() -> None:
    line = diskspace.filled(Path("/r"), 0, 8 * MiB, "writing the store", "`isotax run --resume R`")
    assert line == ("the disk under /r is full (writing the store): 0 B free, about 8.0 MiB "
                    "needed; free 8.0 MiB under /r, then `isotax run --resume R`")
    # The disk filled although the estimate fits what is free now: ask for something anyway.
    assert "free 1.0 MiB under /r" in diskspace.filled(Path("/r"), 9 * MiB, 8 * MiB, "w", "go")


def test_free_bytes_reads_the_nearest_existing_directory(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    free = diskspace.free_bytes(tmp_path / "not" / "yet")
    assert abs(free - st.f_bavail * st.f_frsize) < 64 * MiB  # others write beside us
    assert diskspace.check(tmp_path, 1, "x", "y") is None
    assert "not enough free space under" in (diskspace.check(tmp_path, 1 << 62, "x", "y") or "")


# -- the image build's check ----------------------------------------------------------------------


def _recipe() -> Recipe:
    return Recipe.for_workloads([])


def test_an_image_build_needs_its_layer_and_the_base_when_missing(tmp_path: Path) -> None:
    asked: list[tuple[Path, int, str]] = []

    def space(path: Path, needed: int, what: str, fix: str) -> str | None:
        asked.append((path, needed, what))
        return None

    build._check_space(tmp_path, _recipe(), space)
    marker = tmp_path / "base" / _recipe().base_hash() / "base.json"
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    build._check_space(tmp_path, _recipe(), space)
    assert asked == [
        (tmp_path, build.IMAGE_BUILD_BYTES + build.BASE_BUILD_BYTES,
         "building the workload image and its base layer"),
        (tmp_path, build.IMAGE_BUILD_BYTES, "building the workload image"),
    ]
    # the cached image measured 3731 MiB and its base 1254 + 193 MiB: each with a quarter more
    assert 3731 * MiB * 1.25 <= build.IMAGE_BUILD_BYTES
    assert (1254 + 193) * MiB * 1.25 <= build.BASE_BUILD_BYTES


def test_an_image_build_that_does_not_fit_is_refused_in_one_line(tmp_path: Path) -> None:
    def space(path: Path, needed: int, what: str, fix: str) -> str | None:
        return diskspace.refusal(path, 1 * GiB, needed, what, fix)

    with pytest.raises(build.ImageError) as e:
        build._check_space(tmp_path, _recipe(), space)
    assert str(e.value) == (
        f"not enough free space under {tmp_path} for building the workload image and its base "
        "layer: 1.0 GiB free, about 6.3 GiB needed; free 5.3 GiB there or set ISOTAX_CACHE "
        "to a directory on a larger disk, then run it again")


def test_a_cached_image_is_never_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Done:
        def __init__(self, *a: object) -> None:
            pass

        def complete(self) -> bool:
            return True

    monkeypatch.setattr(build, "ImageArtifacts", Done)

    def space(path: Path, needed: int, what: str, fix: str) -> str | None:
        raise AssertionError("asked about space for an image that is cached")

    build.ensure_image(_recipe(), tmp_path, space=space)


# -- a store, a report and a bundle on a full disk -------------------------------------------------


def _cell(i: int) -> CellKey:
    return CellKey("native", "compress", {"n": i}, i)


def _commit(s: SQLiteStore, i: int) -> None:
    s.commit_cell("r1", _cell(i), "1",
                  CellOutcome(CellStatus.OK, "",
                              [Sample("throughput", float(i), "MB/s", True, {"pad": "x" * 3000})]),
                              0.0, 1.0)


def test_a_full_store_rolls_back_the_cell_and_keeps_the_rest(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "isotax.db")
    s.create_run("r1", "p", "name = 'p'", 1, {"hostname": "h"})
    _commit(s, 1)
    _commit(s, 2)
    before = s.cells("r1")
    pages = s.db.execute("PRAGMA page_count").fetchone()[0]
    s.db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite now answers SQLITE_FULL
    with pytest.raises(DiskFull) as e:
        for i in range(3, 50):
            _commit(s, i)
    assert e.value.path == tmp_path and e.value.what == "the store isotax.db"
    assert isinstance(e.value.__cause__, sqlite3.OperationalError)
    assert "\n" not in str(e.value)
    assert not s.db.in_transaction  # rolled back: the next write is possible once there is room
    s.db.execute(f"PRAGMA max_page_count = {pages + 100}")
    s.set_run_status("r1", "interrupted", 2.0)
    got = s.cells("r1")
    assert got[:len(before)] == before  # every committed cell as it was
    assert all(c.samples for c in got)  # and nothing half-written
    assert s.db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    s.close()


def test_a_store_opens_for_reading_without_writing(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "isotax.db").close()
    db = tmp_path / "isotax.db"
    mtime = db.stat().st_mtime_ns
    s = SQLiteStore(db)  # the schema is there: nothing to write, so a full disk opens it too
    s.close()
    assert db.stat().st_mtime_ns == mtime and not (tmp_path / "isotax.db-wal").exists()


def test_other_store_errors_stay_what_they_are(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "isotax.db")
    s.create_run("r1", "p", "name = 'p'", 1, {})
    with pytest.raises(sqlite3.IntegrityError):
        s.create_run("r1", "p", "name = 'p'", 1, {})
    assert not s.db.in_transaction
    s.close()


def test_a_report_on_a_full_disk_leaves_no_half_file(tmp_path: Path) -> None:
    from isotax.analysis.report_data import analyze
    from isotax.report import write_reports

    store, run_id = hostile_store(tmp_path)
    out = tmp_path / "out"
    write_reports(analyze(store, run_id), out, ("md",))
    before = (out / "report.md").read_bytes()
    (out / "results.csv.tmp").symlink_to("/dev/full")  # every write: ENOSPC
    with pytest.raises(DiskFull) as e:
        write_reports(analyze(store, run_id), out, ("md", "csv"))
    assert e.value.path == out and e.value.what == f"the report of {run_id}"
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]
    assert (out / "report.md").read_bytes() == before
    store.close()


def test_a_bundle_on_a_full_disk_leaves_no_half_file(tmp_path: Path) -> None:
    from isotax.store.bundle import export_bundle

    store, run_id = hostile_store(tmp_path)
    out = tmp_path / "b" / "r1.itx.tar.gz"
    out.parent.mkdir()
    (out.parent / "r1.itx.tar.gz.tmp").symlink_to("/dev/full")
    with pytest.raises(DiskFull) as e:
        export_bundle(store, run_id, out)
    assert e.value.path == out.parent and e.value.what == "the bundle r1.itx.tar.gz"
    assert list(out.parent.iterdir()) == []
    store.close()


# -- what `isotax run` counts and says ----------------------------------------------------------

RUN_PLAN = """
name = "itx-full"
repetitions = 3
warmups = 1
{adaptive}
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
[[workloads]]
name = "compress"
params = {{ corpus_mib = 1, threads = [1, 2] }}
"""


def test_the_cells_a_run_commits() -> None:
    from isotax.cli.common import cells_to_commit as _cells_to_commit
    from isotax.plan import parse_plan

    fixed = parse_plan(RUN_PLAN.format(adaptive=""))
    # envs x points x reps, and a warm-up per environment x workload
    assert _cells_to_commit(fixed, 0) == 2 * 2 * 3 + 2
    assert _cells_to_commit(fixed, 5) == 9 and _cells_to_commit(fixed, 99) == 0
    capped = parse_plan(RUN_PLAN.format(adaptive="[verdicts]\nmax_repetitions = 10"))
    assert _cells_to_commit(capped, 0) == 14 + 2 * 2 * 7  # up to 10 measured per point
    budget = parse_plan(RUN_PLAN.format(adaptive="[verdicts]\nbudget_s = 60"))
    assert _cells_to_commit(budget, 0) == 14  # no added rounds without max_repetitions


@pytest.mark.parametrize("complete", [False, True])
def test_a_full_disk_ends_the_run_in_one_line(tmp_path: Path, complete: bool,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from isotax.cli.common import EXIT_DISK_FULL
    from isotax.cli.run import _full_disk_ends_run
    from isotax.plan import parse_plan

    plan = parse_plan(RUN_PLAN.format(adaptive=""))
    s = SQLiteStore(tmp_path / "isotax.db")
    s.create_run("r1", "itx-full", "", 1, {})
    _commit(s, 1)
    with pytest.raises(SystemExit) as e, \
            _full_disk_ends_run(s, plan, "r1", tmp_path, True, complete=complete):
        raise DiskFull(tmp_path, "the store isotax.db")
    assert e.value.code == EXIT_DISK_FULL
    (line,) = capsys.readouterr().err.splitlines()
    if complete:
        assert line.startswith(f"isotax: the disk under {tmp_path} is full (writing the store "
                               "isotax.db; run r1 is complete and stored): ")
        assert line.endswith(f"about 3.0 MiB needed; free 1.0 MiB under {tmp_path}, then "
                             f"`isotax report r1 --results {tmp_path}`")
    else:
        assert line.startswith(f"isotax: the disk under {tmp_path} is full (writing the store "
                               "isotax.db; run r1 stopped, its 1 committed cell is kept): ")
        # 15 cells left: 180 KiB, the journal 5 MiB, the report 3 MiB
        assert line.endswith(f"about 8.2 MiB needed; free 1.0 MiB under {tmp_path}, then "
                             f"`isotax run --resume r1 --results {tmp_path}`")
