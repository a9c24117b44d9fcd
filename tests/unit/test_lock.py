"""requirements.lock (written by scripts/lock.sh, installed by scripts/setup.sh with
--require-hashes): every line a pin with hashes, and every requirement of pyproject.toml
(dependencies, every extra, the build backend) pinned to a version its range allows. A
dependency added to pyproject.toml without re-locking fails here, not on a fresh host."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)(?:\s*;[^\\]*)?\s*\\?$")
HASH = re.compile(r"^\s+--hash=sha256:[0-9a-f]{64}\s*\\?$")


def _lock() -> dict[str, tuple[Version, int]]:
    """{canonical name: (pinned version, number of hashes)}; AssertionError on any line that
    is neither a pin, a hash, a comment nor blank."""
    out: dict[str, tuple[Version, int]] = {}
    current = None
    for n, line in enumerate(LOCK.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if m := PIN.match(line):
            current = canonicalize_name(m.group(1))
            assert current not in out, f"requirements.lock:{n}: {current} pinned twice"
            out[current] = (Version(m.group(2)), 0)
        elif HASH.match(line) and current is not None:
            v, k = out[current]
            out[current] = (v, k + 1)
        else:
            raise AssertionError(f"requirements.lock:{n}: not a pin or a hash: {line!r}")
    return out


def _pyproject_requirements() -> list[Requirement]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = list(doc["project"]["dependencies"])
    for extra in doc["project"].get("optional-dependencies", {}).values():
        reqs += extra
    return [Requirement(r) for r in [*reqs, *doc["build-system"]["requires"]]]


def test_every_pin_has_hashes() -> None:
    lock = _lock()
    assert len(lock) > 20
    assert all(k > 0 for _, k in lock.values()), [n for n, (_, k) in lock.items() if k == 0]
    assert "bash scripts/lock.sh" in LOCK.read_text()  # the header says how to regenerate it


def test_the_lock_covers_every_requirement_of_pyproject() -> None:
    lock = _lock()
    stale = []
    for req in _pyproject_requirements():
        name = canonicalize_name(req.name)
        if name not in lock:
            stale.append(f"{req} is not in the lock")
        elif not req.specifier.contains(lock[name][0], prereleases=True):
            stale.append(f"{req}: the lock pins {lock[name][0]}")
    # pip too: scripts/venv.sh installs the lock over the venv's own pip.
    assert "pip" in lock and "setuptools" in lock
    assert not stale, ("requirements.lock is stale; run `bash scripts/lock.sh`: "
                       + "; ".join(stale))
