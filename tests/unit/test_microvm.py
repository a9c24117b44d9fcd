"""microvm, the container-in-a-VM (vm9p) and the tuned/untuned VM profiles: registration and
refusals, before anything starts (no VM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from isotax import protocols
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec, Unavailable

NO_IMAGE = ImageArtifacts("none", Path("/nonexistent/itx-image"))


def test_kinds_are_registered_and_available_never_raises() -> None:
    envs = protocols.environments()
    for kind in ("qemu", "microvm", "vm9p", "firecracker", "cloud-hypervisor"):
        a = envs[kind]().available()
        assert a.ok or (a.reason and a.fix), kind
    for kind in ("firecracker", "cloud-hypervisor"):
        a = envs[kind]().available()
        # Not driven by isotax: never "available", and it says why in one line.
        assert not a.ok and "no driver" in a.reason and "microvm" in a.fix
        with pytest.raises(Unavailable):
            envs[kind]().start(EnvSpec(name="x", kind=kind, image=NO_IMAGE,
                                       workdir=Path("/nonexistent")))


@pytest.mark.parametrize("kind, options, storage, words", [
    ("vm9p", {"share": "nfs"}, "volume", "share 'nfs'"),
    ("vm9p", {"volume": "tmpfs"}, "volume", "volume 'tmpfs'"),
    ("vm9p", {}, "rootfs", "read-only"),
    ("vm9p", {"msize_9p": "big"}, "volume", "msize_9p"),
    ("microvm", {"machine": "q35"}, "volume", "machine 'q35'"),
])
def test_bad_options_are_refused_before_anything_starts(kind: str, options: dict[str, object],
                                                        storage: str, words: str) -> None:
    spec = EnvSpec(name="x", kind=kind, image=NO_IMAGE, workdir=Path("/nonexistent/itx-w"),
                   network="none", storage=storage, options=options)
    with pytest.raises(Unavailable, match=words) as e:
        protocols.environments()[kind]().start(spec)
    assert e.value.availability.fix
    assert not Path("/nonexistent/itx-w").exists()
