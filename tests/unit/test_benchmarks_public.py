"""The benchmark scripts use isotax as a library (issue 42): they import public names only,
never a `_private` one (of isotax or of each other), and reach no private attribute of what
isotax gives them. ruff and mypy check them in the test command (scripts/test.sh), so an API
change that breaks one fails there, not on the day someone runs it."""

from __future__ import annotations

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def private_uses(text: str) -> list[str]:
    """'line N: from isotax.x import _y' and 'line N: obj._attr' (self's and cls's own
    attributes are theirs) in a script's text. Pure."""
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):  # isotax's, or another script's
            out += [f"line {node.lineno}: from {node.module} import {a.name}"
                    for a in node.names if a.name.startswith("_")]
        elif (isinstance(node, ast.Attribute) and node.attr.startswith("_")
              and not node.attr.startswith("__")
              and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            out.append(f"line {node.lineno}: {ast.unparse(node)}")
    return out


def test_the_check_finds_what_it_looks_for() -> None:
    text = ("from isotax.run.runner import _why_dead, Runner\n"
            "from variance_parts import _words\n"
            "def f(r):\n    return r._started, self._mine, r.public\n")
    assert private_uses(text) == ["line 1: from isotax.run.runner import _why_dead",
                                  "line 2: from variance_parts import _words",
                                  "line 4: r._started"]


def test_benchmarks_use_public_names_only() -> None:
    scripts = sorted(BENCHMARKS.glob("*.py"))
    assert len(scripts) >= 10
    found = {p.name: uses for p in scripts if (uses := private_uses(p.read_text()))}
    assert found == {}
