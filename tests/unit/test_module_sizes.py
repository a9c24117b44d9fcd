"""Small modules (issue 42): no module of isotax or of its benchmark scripts is over 600 lines.
A module that grows past it is split by what its parts are, not by where a line falls."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 600


def test_no_module_is_over_600_lines() -> None:
    files = [*sorted((ROOT / "src/isotax").rglob("*.py")),
             *sorted((ROOT / "benchmarks").glob("*.py"))]
    assert len(files) > 200
    over = {str(f.relative_to(ROOT)): n for f in files
            if (n := len(f.read_text().splitlines())) > LIMIT}
    assert over == {}
