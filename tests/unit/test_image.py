"""The workload image: recipe hashes, the guest files, and removing cached images (pure)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from isotax import protocols
from isotax.image.build import ImageError, remove_image, show_images
from isotax.image.recipe import (
    Recipe,
    default_guest_dir,
    guest_files,
    image_hash,
)


def _recipe(**settings: Any) -> Recipe:
    """The recipe as the CLI makes it: every registered workload's packages and hooks; on
    bookworm, the plain Recipe's release, whatever this host's is."""
    return protocols.image_recipe("bookworm", **settings)


def test_base_hash_is_stable_across_processes_and_package_order() -> None:
    r = _recipe()
    shuffled = Recipe(packages=tuple(reversed(r.packages)), hooks=r.hooks)
    assert r.base_hash() == shuffled.base_hash()
    # A fresh interpreter with a different hash seed computes the same name.
    code = ("from isotax import protocols; "
            "print(protocols.image_recipe('bookworm').base_hash())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}, check=True).stdout
    assert out.strip() == r.base_hash()
    assert len(r.base_hash()) == 16


def test_package_change_changes_base_and_image_hash() -> None:
    r = _recipe()
    more = Recipe(packages=(*r.packages, "stress-ng"))
    guest = {"itx-time.c": b"int main(void){return 0;}\n"}
    assert more.base_hash() != r.base_hash()
    assert image_hash(more, guest) != image_hash(r, guest)
    assert _recipe(components=("main",)).base_hash() != r.base_hash()


def test_helper_change_changes_only_the_image_hash() -> None:
    r = _recipe()
    a = {"itx-time.c": b"int main(void){return 0;}\n", "itx-init": b"#!/bin/sh\n"}
    b = {**a, "itx-init": b"#!/bin/sh\nexit 0\n"}
    c = {**a, "itx-agent.py": b"print('hi')\n"}
    assert image_hash(r, a) == image_hash(r, dict(reversed(list(a.items()))))
    assert len({image_hash(r, a), image_hash(r, b), image_hash(r, c)}) == 3
    assert image_hash(_recipe(cflags=("-O0",)), a) != image_hash(r, a)


def test_guest_files_takes_every_source_but_not_caches(tmp_path: Path) -> None:
    for name in ("itx-a.c", "itx-init", "itx-agent.py", ".itx-a.c.swp", "x.pyc", "b~"):
        (tmp_path / name).write_text(name)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "itx-agent.cpython-311.pyc").write_text("x")
    assert sorted(guest_files(tmp_path)) == ["itx-a.c", "itx-agent.py", "itx-init"]
    assert guest_files(tmp_path / "missing") == {}


def test_real_guest_dir_has_the_three_c_helpers() -> None:
    names = guest_files(default_guest_dir())
    assert {"itx-time.c", "itx-corpus.c", "itx-ready.c"} <= set(names)


def test_remove_image_by_prefix_and_errors(tmp_path: Path) -> None:
    for d in ("images/abcd1234abcd1234", "images/abce000000000000", "base/ffff000000000000"):
        (tmp_path / d / "rootfs").mkdir(parents=True)
    (tmp_path / "images/abcd1234abcd1234/manifest.json").write_text(json.dumps(
        {"built_at": "x", "packages": {"xz-utils": "1"}, "base_hash": "ffff000000000000"}))
    shown = {e["hash"]: e for e in show_images(_recipe(), tmp_path)}
    assert shown["abcd1234abcd1234"]["complete"] is True
    assert shown["abce000000000000"]["complete"] is False
    assert shown["ffff000000000000"]["layer"] == "base"
    with pytest.raises(ImageError, match="more digits"):
        remove_image("abc", tmp_path)
    with pytest.raises(ImageError, match="no cached image"):
        remove_image("0123", tmp_path)
    removed = remove_image("abcd", tmp_path)
    assert removed == [tmp_path / "images/abcd1234abcd1234"] and not removed[0].exists()
    remove_image("all", tmp_path)
    assert show_images(_recipe(), tmp_path) == []


def test_a_workloads_image_hooks_are_in_the_recipe_and_its_hash() -> None:
    """A workload declares its image steps beyond apt (hpcc: OpenBLAS as the BLAS, checked
    with ldd); the registry gathers them, and a changed hook names another base."""
    from isotax.image.recipe import ImageHook
    from isotax.workloads.hpcc import OPENBLAS

    r = _recipe()
    assert OPENBLAS in r.hooks and r.hooks == protocols.workload_image_hooks()
    assert OPENBLAS.check == ("ldd", "/usr/bin/hpcc") and OPENBLAS.expect == "libopenblas"
    other = ImageHook(OPENBLAS.name, OPENBLAS.commands[:1], OPENBLAS.check, OPENBLAS.keep,
                      OPENBLAS.expect, OPENBLAS.fail)
    assert Recipe(packages=r.packages, hooks=(other,)).base_hash() != r.base_hash()
    assert Recipe(packages=r.packages).base_hash() != r.base_hash()
    assert r.base_inputs()["hooks"][0]["name"] == "hpcc_blas"


def test_image_build_has_no_workload_specific_line() -> None:
    """Everything a workload needs of the image is declared by the workload (issue 30)."""
    from isotax.image import build

    text = Path(build.__file__).read_text()
    for word in ("hpcc", "blas", "openblas", "lapack"):
        assert word not in text.lower(), word
