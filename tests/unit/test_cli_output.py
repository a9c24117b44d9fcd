"""What a new user meets at the command line: one results store wherever they stand, none
made by a command that only reads, and whole lines when the output is not a terminal."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from isotax.run.progress import LineProgress, ProgressState, clock, progress_line

CLI = [sys.executable, "-m", "isotax"]


def _cli(args: list[str], cwd: Path, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "ISOTAX_RESULTS"}
    return subprocess.run([*CLI, *args], cwd=cwd, env={**full, **(env or {})},
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_reading_command_makes_no_store_where_the_user_stands(tmp_path: Path) -> None:
    results = tmp_path / "elsewhere"
    for args in (["runs"], ["report"], ["export", "r1"], ["compare", "a", "b"]):
        done = _cli(args, tmp_path, {"ISOTAX_RESULTS": str(results)})
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and f"no results store at {results / 'isotax.db'}" in lines[0]
        assert "isotax run quick" in lines[0]
    assert list(tmp_path.iterdir()) == [], "nothing created: not here, not in ISOTAX_RESULTS"


def test_the_default_store_does_not_depend_on_the_current_directory(tmp_path: Path) -> None:
    helps = [_cli(["runs", "--help"], d).stdout for d in (tmp_path, Path("/"))]
    assert helps[0] == helps[1]
    assert "/var/lib/isotax/results" in " ".join(helps[0].split())
    assert "ISOTAX_RESULTS" in helps[0]
    assert not (tmp_path / "results").exists()


def test_piped_output_is_whole_lines_not_folded_at_80_columns(tmp_path: Path) -> None:
    done = _cli(["workloads"], tmp_path)
    assert done.returncode == 0
    widths = [len(line) for line in done.stdout.splitlines()]
    assert max(widths) > 80, "a pipe gets more than a terminal's default 80 columns"
    # What the CLI logs (run progress, warnings) is one line however long, not wrapped.
    said = subprocess.run([sys.executable, "-c", "from isotax.cli.common import console; "
                           "console.print('[yellow]warning:[/] ' + 'word ' * 60)"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert said.stderr.rstrip() == "warning: " + ("word " * 60).rstrip()


def test_clock() -> None:
    assert [clock(x) for x in (0, 59.6, 61, 3600 + 65)] == ["0:00", "1:00", "1:01", "1:01:05"]


def test_progress_line_counts_fixed_and_added_cells_and_verdicts_with_an_estimate() -> None:
    st = ProgressState(started=0.0, budget_s=600.0, fixed_done=193, fixed_total=320,
                       fixed_s=1862.0, now_running="runc mysql",
                       verdicts="40/64 decided, 24 undecided")
    line = progress_line(st, 1862.0)
    assert line == ("progress: cells 193/320, added 0 (0 of 600 s budget), 40/64 decided, 24 "
                    "undecided, elapsed 31:02, ETA 20:25 + added rounds' budget; now runc mysql")
    st = ProgressState(started=0.0, budget_s=600.0, fixed_done=320, fixed_total=320,
                       added_done=12, added_s=100.0, round_phase="round 5",
                       round_done=4, round_total=40, round_started=2000.0)
    line = progress_line(st, 2050.0)
    assert "cells 320/320" in line and "added 12 (150 of 600 s budget; round 5: " \
        "4/40)" in line and "ETA ≤ 7:30" in line and "decided" not in line


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_line_progress_writes_a_line_at_start_every_interval_and_per_phase() -> None:
    buf, now = io.StringIO(), _Clock()
    console = Console(file=buf, soft_wrap=True, width=160)
    with LineProgress(console, budget_s=None, every_s=60.0, now=now) as p:
        task = p.add_task("cells", total=10, phase="fixed")
        for i in range(10):
            p.update(task, description=f"env{i % 2} compress")
            now.t += 20.0  # a cell of 20 s: a line every third cell
            p.advance(task)
        r = p.add_task("cells", total=2, phase="round 4", verdicts="3/8 decided, 5 undecided")
        for _ in range(2):
            now.t += 5.0
            p.update(r, verdicts="4/8 decided, 4 undecided")
            p.advance(r)
        p.remove_task(r)
    lines = buf.getvalue().splitlines()
    assert all(line.startswith("progress: cells ") for line in lines)
    assert lines[0].startswith("progress: cells 0/10,")
    assert any(line.startswith("progress: cells 3/10,") for line in lines)
    assert any(line.startswith("progress: cells 10/10, added 0 (") for line in lines)
    assert "4/8 decided, 4 undecided" in lines[-1]
    assert "round 4: 2/2" in lines[-2]
    assert lines[-1].startswith("progress: cells 10/10, added 2 (10 s)")
    assert len(lines) < 10, "not a line per cell"
