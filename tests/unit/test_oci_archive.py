"""The workload image as an OCI archive: streamed from a root filesystem tar, every digest and
size in it is the blob's own, and it names the image as containerd's import reads it."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from isotax.image import oci_archive


def _layer(tmp_path: Path) -> Path:
    layer = tmp_path / "rootfs.tar"
    with tarfile.open(layer, "w") as t:
        data = b"#!/bin/sh\necho hi\n"
        info = tarfile.TarInfo("bin/hi")
        info.size, info.mode = len(data), 0o755
        t.addfile(info, io.BytesIO(data))
    return layer


def test_the_archive_is_a_consistent_oci_layout(tmp_path: Path) -> None:
    layer = _layer(tmp_path)
    out = io.BytesIO()
    digest = oci_archive.write(layer, "localhost/itx/workload:abc", out, {"isotax": "1"})
    assert digest == "sha256:" + hashlib.sha256(layer.read_bytes()).hexdigest()
    out.seek(0)
    with tarfile.open(fileobj=out) as t:
        files = {m.name: t.extractfile(m).read() for m in t.getmembers()}  # type: ignore[union-attr]
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    entry = json.loads(files["index.json"])["manifests"][0]
    assert entry["annotations"]["io.containerd.image.name"] == "localhost/itx/workload:abc"
    manifest = json.loads(files[f"blobs/sha256/{entry['digest'][7:]}"])
    assert entry["size"] == len(files[f"blobs/sha256/{entry['digest'][7:]}"])
    assert manifest["layers"] == [{"mediaType": oci_archive.LAYER, "digest": digest,
                                   "size": layer.stat().st_size}]
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
    assert config["rootfs"]["diff_ids"] == [digest]  # uncompressed: the diff id is the digest
    assert config["config"]["Labels"] == {"isotax": "1"}
    assert files[f"blobs/sha256/{digest[7:]}"] == layer.read_bytes()


def test_the_layer_digest_is_kept_beside_the_tar(tmp_path: Path) -> None:
    layer = _layer(tmp_path)
    first = oci_archive.layer_digest(layer)
    kept = tmp_path / "rootfs.tar.sha256"
    assert kept.read_text().split("\n")[1] == first
    kept.write_text(kept.read_text().replace(first, "sha256:" + "0" * 64))
    assert oci_archive.layer_digest(layer) == "sha256:" + "0" * 64  # read back, not rehashed
    layer.write_bytes(layer.read_bytes() + b"\0" * 512)  # another size: hashed again
    assert oci_archive.layer_digest(layer) != first
