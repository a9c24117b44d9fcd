"""docs/extending.md says what the code does (issue 42: its network list lacked pod and service,
its reaches routed and service, and it let workloads import environments): its lists are
checked against the registries and the import contract they describe."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from isotax.facts import Reach
from isotax.protocols import NETWORKS

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs/extending.md").read_text()


def _listed(after: str) -> list[str]:
    """The comma-separated words after `after`, up to the closing parenthesis."""
    m = re.search(re.escape(after) + r"([^)]*)\)", DOC)
    assert m, f"docs/extending.md no longer says {after!r}"
    return [w.strip() for w in m.group(1).split(",")]


def test_the_networks_are_the_plans() -> None:
    assert _listed("(of `protocols.NETWORKS`: ") == list(NETWORKS)


def test_the_reaches_are_the_enums() -> None:
    assert set(_listed("(`Reach`: ")) == {r.value for r in Reach}


def test_what_a_workload_may_import_keeps_the_contract() -> None:
    m = re.search(r"A workload module may import ([^.]*)\.", DOC)
    assert m, "docs/extending.md no longer says what a workload may import"
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    forbidden = {f.rsplit(".", 1)[-1]
                 for c in contracts["contracts"] if c.get("type") == "forbidden"
                 and "isotax.workloads" in c.get("source_modules", [])
                 for f in c["forbidden_modules"]}
    assert "environments" in forbidden
    may = {w.strip() for w in re.split(r",| and ", m.group(1))}
    assert not may & forbidden, f"the doc lets workloads import {sorted(may & forbidden)}"
