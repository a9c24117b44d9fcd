"""Instance.stop's one contract (issue 30, item 5), for every registered kind that runs here:
stop removes everything the instance made, a second stop does nothing, and nothing is left for
the leak finders. (What stop may raise, StopIncomplete alone, naming what is left:
tests/unit/test_stop_contract.py.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from isotax import protocols
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec

KINDS = sorted(protocols.environments())


@pytest.mark.integration
@pytest.mark.parametrize("kind", KINDS)
def test_stop_removes_everything_and_a_second_stop_does_nothing(
        kind: str, image: ImageArtifacts, tmp_path: Path) -> None:
    from isotax.run.leaks import find_leaks

    cls = protocols.environments()[kind]
    env = cls()
    with _cluster_for(kind):
        avail = env.available()
        if not avail.ok:
            pytest.skip(f"{kind} cannot run here: {avail}")
        network = "bridge" if "bridge" in cls.networks else cls.networks[0]
        before = set(find_leaks())
        inst = env.start(EnvSpec(name=f"stop-{kind}", kind=kind, image=image,
                                 workdir=tmp_path / kind, network=network, memory_mib=512))
        try:
            assert inst.exec(["true"], 120).returncode == 0
            inst.pause()  # a paused instance must stop as well as a running one
        finally:
            inst.stop()
        inst.stop()  # idempotent: nothing to do, nothing raised
        left = sorted(set(find_leaks()) - before)
        assert left == [], left


@contextlib.contextmanager
def _cluster_for(kind: str) -> Iterator[None]:
    """A pod needs the local Kubernetes: started for it where none runs (and built), stopped
    after it."""
    from isotax.host.kubernetes import cluster

    if kind != "pod" or cluster.missing() or cluster.supervisor_pid() is not None:
        yield
        return
    cluster.up()
    try:
        yield
    finally:
        assert cluster.down() == []
