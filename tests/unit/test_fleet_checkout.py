"""The checkout the fleet installs: git's view of the working tree (uncommitted changes in,
deleted and ignored files out), its digest naming the contents only, and the file list that
lets an install remove what the checkout no longer has."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from isotax.fleet.checkout import MANIFEST, CheckoutError, checkout_files, checkout_root, pack

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t",
                    *args], check=True, capture_output=True, timeout=60)


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    (root / "scripts" / "setup.sh").write_text("echo setup\n")
    (root / "a.py").write_text("A = 1\n")
    (root / "gone.py").write_text("G = 1\n")
    (root / ".gitignore").write_text(".venv/\nresults/\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "c")
    (root / ".venv").mkdir()
    (root / ".venv" / "big").write_text("x")
    (root / "results").mkdir()
    (root / "results" / "isotax.db").write_text("x")
    (root / "gone.py").unlink()  # deleted, not committed
    (root / "new.py").write_text("N = 1\n")  # untracked, not ignored
    (root / "a.py").write_text("A = 2\n")  # changed, not committed
    return root


def test_files_are_the_working_tree_git_sees(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    assert checkout_files(root) == [".gitignore", "a.py", "new.py", "scripts/setup.sh"]
    assert checkout_root(root) == root
    with pytest.raises(CheckoutError, match="not run from one"):
        checkout_root(tmp_path)


def test_tarball_and_digest(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    digest = pack(root, tmp_path / "one.tar.gz")
    with tarfile.open(tmp_path / "one.tar.gz") as tar:
        names = tar.getnames()
        assert tar.extractfile("a.py").read() == b"A = 2\n"  # type: ignore[union-attr]
        listing = tar.extractfile(MANIFEST).read().decode()  # type: ignore[union-attr]
    assert names == [".gitignore", "a.py", "new.py", "scripts/setup.sh", MANIFEST]
    assert listing.split() == names[:-1]
    # touched, not changed: the same digest (the host's install is skipped)
    os.utime(root / "a.py", (1, 1))
    assert pack(root, tmp_path / "two.tar.gz") == digest
    (root / "a.py").write_text("A = 3\n")
    assert pack(root, tmp_path / "three.tar.gz") != digest
    (root / "a.py").write_text("A = 2\n")
    (root / "a.py").chmod(0o755)  # a mode is part of what is installed
    assert pack(root, tmp_path / "four.tar.gz") != digest
