"""`pip wheel .` builds isotax's wheel with no deprecation warning (a license table, a
License classifier, an old setuptools would each print one) and with what a wheel must carry:
the SPDX license expression and the package data the plans and the image need."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_builds_without_deprecation_warnings(tmp_path: Path) -> None:
    backend = next(Requirement(r) for r in tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["build-system"]["requires"])
    try:
        have = metadata.version(backend.name)
    except metadata.PackageNotFoundError:
        have = "0"
    if not backend.specifier.contains(Version(have)):
        pytest.skip(f"this venv's {backend.name} {have} is not {backend}: scripts/setup.sh "
                    "installs the locked one (requirements.lock)")
    # A copy: the build writes build/ and *.egg-info beside the sources, and the unit room may
    # not write the checkout (it runs as nobody).
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "src", src / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    # The venv's setuptools, no index: the build that scripts/venv.sh does, offline. -v: pip
    # hides the backend's warnings otherwise.
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "-w", str(tmp_path / "dist"), str(src)],
        capture_output=True, text=True, timeout=600, check=False)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    warned = [ln for ln in out.splitlines() if "deprecat" in ln.lower()]
    assert not warned, "\n".join(warned)
    (wheel,) = (tmp_path / "dist").glob("isotax-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta
    assert "Requires-Dist: packaging" in meta
    assert any(n.startswith("isotax/plans/") and n.endswith(".toml") for n in names)
