"""A full disk (issue 17, points 4 and 6), with real runs of `isotax` on a tiny tmpfs:

- a results directory too small for the run is refused before anything starts: one line naming
  the path, what is free and what the run needs, exit 2, nothing written;
- a results directory that fills in the middle of a run (the test fills it once the first cell
  is committed, with isotax stopped meanwhile so that no other cell can slip in) ends the run
  in one line, no traceback, exit 75; the store passes SQLite's integrity check with every
  committed cell as it was; once the filler is removed, `isotax run --resume` finishes the run
  and keeps those cells unchanged;
- an image cache too small for the image is refused before the build (in a cache of its own:
  the real cached image is never touched).

Every tmpfs is named itx-full-* (mounted at /tmp/itxfull-*) and unmounted afterwards, whatever
happened. Its mount point has no "/itx-" in it: isotax run's recovery removes mounts at such
paths that no live isotax process owns (run.leaks), and would take the test's disk away."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ours, requires_root_and

pytestmark = [pytest.mark.integration, requires_root_and("debootstrap", root_for="mount")]

PLAN = """
name = "itx-full"
seed = 4
repetitions = {reps}
warmups = 0
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "compress"
params = {{ corpus_mib = 2, threads = 1 }}
"""

EXIT_DISK_FULL = 75


@contextlib.contextmanager
def tmpfs(tag: str, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at /tmp/itxfull-<tag>-<pid>, unmounted and removed afterwards."""
    where = Path(f"/tmp/itxfull-{tag}-{os.getpid()}")
    where.mkdir()
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", f"itx-full-{tag}",
                        str(where)], check=True)
        try:
            yield where
        finally:
            if _mounted(where) and \
                    subprocess.run(["umount", str(where)], check=False).returncode != 0:
                subprocess.run(["umount", "-l", str(where)], check=True)
    finally:
        if where.is_dir() and not _mounted(where):
            shutil.rmtree(where)  # what was written on it if it went away (the test fails)


def _mounted(where: Path) -> bool:
    return any(line.split()[4] == str(where)
               for line in Path("/proc/self/mountinfo").read_text().splitlines())


def _small_tmpfs(where: Path, at_most: int) -> None:
    """Fail unless where is still its own tmpfs of at most `at_most` bytes: never fill the
    disk under it."""
    st = os.statvfs(where)
    assert _mounted(where) and st.f_blocks * st.f_frsize <= at_most, \
        f"{where} is no longer the test's tmpfs: not filling it"


def _isotax(*args: str, env: dict[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "isotax", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def _last_line(p: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    return p.stderr.strip().splitlines()[-1]


def _fill(path: Path, at_most: int) -> Path:
    """Fill the tmpfs at path (of at most `at_most` bytes) to the last byte with one file;
    return it."""
    _small_tmpfs(path, at_most)
    filler = path / "itx-filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096):
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
    return filler


def _cells(db: Path) -> list[tuple[object, ...]]:
    """Every committed cell with its samples and telemetry, in commit order (one row per
    sample)."""
    if not db.exists():  # never made here: connect() would make it
        return []
    con = sqlite3.connect(db, timeout=30)
    try:
        return con.execute(
            "SELECT c.id, c.ident, c.status, c.started, c.ended, s.metric, s.value, s.unit,"
            " s.labels_json, t.summary_json, t.series_json FROM cells c"
            " LEFT JOIN samples s ON s.cell_id = c.id LEFT JOIN telemetry t ON t.cell_id = c.id"
            " ORDER BY c.id, s.id"
        ).fetchall()
    except sqlite3.OperationalError:  # the store is being made
        return []
    finally:
        con.close()


def test_a_results_directory_too_small_is_refused_before_anything(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(reps=2))
    with tmpfs("a", "600k") as small:
        t0 = time.monotonic()
        p = _isotax("run", str(plan), "--results", str(small / "results"), timeout=120)
        took = time.monotonic() - t0
        assert p.returncode == 2, p.stderr[-3000:]
        line = _last_line(p)
        assert p.stderr.strip() == line  # one line, nothing before it
        assert line == (
            f"isotax: not enough free space under {small / 'results'} for the results of plan "
            "itx-full (2 cells to commit, the store's journal, the report): 600 KiB free, about "
            "8.0 MiB needed; free 7.4 MiB there or give --results DIR on a larger disk, then run "
            "it again")
        assert list(small.iterdir()) == []  # no store, no results directory
    # Refused at once: no image, no environment (their first words would be before the line).
    assert took < 30


def test_a_disk_that_fills_mid_run_stops_it_cleanly_and_resume_finishes(tmp_path: Path) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(PLAN.format(reps=3))
    # 3 cells: 36 KiB + the journal 5 MiB + the report 3 MiB = 8.04 MiB passes the start check
    with tmpfs("b", "9m") as disk:
        results = disk / "results"
        db = results / "isotax.db"
        log = tmp_path / "first.log"
        with log.open("w") as out:
            p = subprocess.Popen([sys.executable, "-m", "isotax", "run", str(plan), "--results",
                                  str(results)], stdout=subprocess.DEVNULL, stderr=out,
                                 start_new_session=True)
            try:
                deadline = time.monotonic() + 600
                while not _cells(db) and p.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.02)
                os.killpg(p.pid, signal.SIGSTOP)  # no other cell commits while we fill
                try:
                    committed = _cells(db)
                    assert committed and p.poll() is None, log.read_text()[-3000:]
                    filler = _fill(disk, 9 * 1024 * 1024)
                finally:
                    os.killpg(p.pid, signal.SIGCONT)
                rc = p.wait(timeout=600)
            finally:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGINT)
                    p.wait(timeout=120)
        first = log.read_text()
        assert "Traceback" not in first, first[-3000:]
        assert rc == EXIT_DISK_FULL, first[-3000:]
        line = first.strip().splitlines()[-1]
        con = sqlite3.connect(db)
        run_id, status = con.execute("SELECT id, status FROM runs").fetchone()
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        con.close()
        stored = _cells(db)
        n = len({row[0] for row in stored})
        assert 1 <= n < 3 and stored[:len(committed)] == committed, (stored, committed)
        kept = "cell is kept" if n == 1 else "cells are kept"
        assert line.startswith(
            f"isotax: the disk under {results} is full (writing the store isotax.db; run "
            f"{run_id} stopped, its {n} committed {kept}): ")
        assert line.endswith(f"then `isotax run --resume {run_id} --results {results}`")
        assert "needed; free " in line
        assert status in ("interrupted", "running")  # the status row itself may not fit
        assert ours(run_id, str(disk)) == []  # other runs may measure beside this test

        # Space freed: the resumed run finishes what is left and keeps what was committed.
        filler.unlink()
        done = _isotax("run", "--resume", run_id, "--results", str(results))
        assert done.returncode == 0, done.stderr[-3000:]
        after = _cells(db)
        assert len({row[0] for row in after}) == 3
        assert after[:len(stored)] == stored  # the earlier cells unchanged, none repeated
        con = sqlite3.connect(db)
        assert con.execute("SELECT status FROM runs").fetchone() == ("complete",)
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        con.close()
        assert (results / run_id / "report.html").is_file()
        assert ours(run_id, str(disk)) == []
    print(line)  # what the user sees (pytest -s)


def test_an_image_cache_too_small_is_refused_before_the_build(tmp_path: Path) -> None:
    with tmpfs("c", "16m") as cache:
        env = dict(os.environ, ISOTAX_CACHE=str(cache))
        p = _isotax("image", "build", env=env, timeout=120)
        assert p.returncode == 2, p.stderr[-3000:]
        line = _last_line(p)
        assert line.startswith(f"isotax: not enough free space under {cache} for building the "
                               "workload image and its base layer: ")
        assert "about 6.3 GiB needed" in line
        assert line.endswith("or set ISOTAX_CACHE to a directory on a larger disk, then run "
                             "it again")
        # nothing built: the images directory and its lock file only
        assert [str(q.relative_to(cache)) for q in sorted(cache.rglob("*"))
                if not q.name.startswith(".lock-")] == ["images"]
