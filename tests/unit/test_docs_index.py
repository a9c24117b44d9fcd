"""The README's docs index lists every page under docs/ (issue 42: kubernetes.md, 450 lines,
was missing), and every page it links to exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _index() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("## Documentation"):]


def test_the_docs_index_lists_every_page() -> None:
    listed = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", _index()))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages - listed == set(), f"docs not in the README's index: {sorted(pages - listed)}"
    assert listed - pages == set(), f"the index links to missing docs: {sorted(listed - pages)}"
