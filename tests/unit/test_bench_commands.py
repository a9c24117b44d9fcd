"""Benchmark commands cannot rot (issue 30, item 6): every command under benchmarks/ answers
--help, which imports its module and builds its argument parser (tests/integration/
test_bench_commands.py runs the measuring ones for real at their smallest size)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# Modules the commands import, not commands.
HELPERS = {"child.py", "interleave.py", "short_points.py", "variance_parts.py"}  # shared parts
COMMANDS = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name not in HELPERS)


def test_every_command_is_listed() -> None:
    assert "harness_overhead.py" in COMMANDS and "soak.py" in COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_the_command_answers_help(command: str) -> None:
    p = subprocess.run([sys.executable, str(BENCHMARKS / command), "--help"],
                       capture_output=True, text=True, timeout=60, cwd=BENCHMARKS.parent)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.startswith("usage:"), p.stdout[:300]
