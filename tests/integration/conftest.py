"""Fixtures of the integration room: the workload image, the load generator, and what was
left on the host before the suite (the leak check, run last, compares against it)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import NamespaceLoadGen


@pytest.fixture(scope="session", autouse=True)
def _leaks_before_suite() -> Iterator[list[str]]:
    """What was already there before the suite (from an earlier crash) is reported separately.
    The session holds an owner's ledger (host.owners) from the start: the runs its tests start
    in subprocesses then never take what the session's own fixtures hold for a dead run's."""
    from isotax.host import owners
    from isotax.run.leaks import find_leaks

    if os.geteuid() == 0:
        owners.claim()

    yield find_leaks() if os.geteuid() == 0 else []


@pytest.fixture(scope="session")
def image() -> ImageArtifacts:
    """The workload image, built once for the suite (a no-op when cached). Skips only where
    this machine cannot build it; any other build failure fails the tests that need it."""
    if os.geteuid() != 0:
        pytest.skip("building and using the workload image needs root (debootstrap, chroot)")
    for tool, package in (("debootstrap", "debootstrap"), ("gcc", "gcc libc6-dev"),
                          ("mkfs.ext4", "e2fsprogs")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {package}; "
                        "scripts/setup.sh installs it)")
    from isotax import protocols
    from isotax.image.build import ensure_image
    from isotax.image.recipe import Recipe

    return ensure_image(Recipe.for_workloads(protocols.workload_packages()), log=print)


@pytest.fixture(scope="module")
def loadgen(image: ImageArtifacts) -> Iterator[NamespaceLoadGen]:
    """The load generator (its namespace and veth) for one module's network tests; removed
    after the module, and nothing of it may be left."""
    from isotax.loadgen.local import open_loadgen
    from isotax.run.leaks import find_leaks

    with open_loadgen() as lg:
        tag = lg.netns
        yield lg
    assert [x for x in find_leaks() if tag in x] == []
