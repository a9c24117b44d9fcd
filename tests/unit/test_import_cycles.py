"""No import cycle, in isotax or among the benchmark scripts (issue 42): a module that imports
another that imports it back is one module split in two, and only the order of imports keeps
it working. isotax's graph is grimp's (what import-linter reads, imports inside functions
included); the benchmarks' is their own `import x` / `from x import` lines naming each other."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert cycles({"a": ["b"], "b": []}) == []


def test_isotax_has_no_import_cycle() -> None:
    g = grimp.build_graph("isotax", cache_dir=None)  # no cache: CI runs it as nobody
    assert cycles({m: g.find_modules_directly_imported_by(m) for m in g.modules}) == []


def _benchmark_imports(path: Path, names: set[str]) -> set[str]:
    got = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            got |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            got.add(node.module)
    return got & names


def test_the_benchmarks_have_no_import_cycle() -> None:
    scripts = {p.stem: p for p in BENCHMARKS.glob("*.py")}
    assert {"variance_components", "interleave", "variance_parts"} <= set(scripts)
    graph = {n: _benchmark_imports(p, set(scripts)) for n, p in scripts.items()}
    assert "interleave" in graph["variance_components"]  # the phase it runs
    assert cycles(graph) == []
