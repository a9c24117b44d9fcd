"""Loading the workload image into a node's containerd (host.kubernetes.images): a stalled
import ends at its limit, which follows the cluster's pace."""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any

import pytest

from isotax.host.kubernetes import images
from isotax.host.kubernetes import layout as L
from isotax.image.artifacts import ImageArtifacts


def test_a_stalled_import_is_killed_at_its_limit(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A ctr that never reads its stream (as a node's containerd under TCG might seem to):
    the stream blocks once the pipe is full, and without the watchdog the pod's start had
    no end. Here the import ends at its 1 s limit, killed, in one line."""
    image = ImageArtifacts("abc123", tmp_path)
    image.tar.parent.mkdir(parents=True, exist_ok=True)
    image.tar.write_bytes(b"")
    monkeypatch.setattr(images, "loaded", lambda ref, node=None: False)
    monkeypatch.setattr(L, "ctr_argv", lambda *a, node=None: ["sleep", "30"])

    def stream(tar: Path, ref: str, out: IO[bytes], labels: dict[str, Any]) -> None:
        for _ in range(64):  # 64 MiB: far beyond any pipe's buffer
            out.write(b"\0" * (1 << 20))

    monkeypatch.setattr(images.oci_archive, "write", stream)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"ctr images import of localhost/itx/workload:abc123"
                       r" did not finish in 1 s \(killed\)"):
        images.load(image, timeout=1)
    assert time.monotonic() - t0 < 10


def test_the_limit_follows_the_clusters_pace(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []
    monkeypatch.setattr(L, "PACE", tmp_path / "pace")
    (tmp_path / "pace").write_text("12\n")
    monkeypatch.setattr(images.threading, "Timer", lambda t, f: seen.append(t) or _Never())
    image = ImageArtifacts("abc123", tmp_path)
    image.tar.parent.mkdir(parents=True, exist_ok=True)
    image.tar.write_bytes(b"")
    monkeypatch.setattr(images, "loaded", lambda ref, node=None: False)
    monkeypatch.setattr(L, "ctr_argv", lambda *a, node=None: ["true"])
    monkeypatch.setattr(images.oci_archive, "write", lambda *a: None)
    with pytest.raises(RuntimeError, match="failed"):  # `true` imports nothing
        images.load(image)
    assert seen == [images.LOAD_TIMEOUT_S * 12]


class _Never:
    def start(self) -> None: ...

    def cancel(self) -> None: ...
