"""The workload image as an OCI image archive (the image-layout tar that `ctr images import`
and `docker load` read), streamed from the image's rootfs.tar as its one uncompressed layer:
what a container runtime that has no "import a root filesystem" command (containerd, under
Kubernetes) gets, the same bits as every other environment. Written to a stream, never to
disk: rootfs.tar is over a gigabyte, and `ctr images import -` reads stdin.

The layer's sha256 takes a pass over rootfs.tar (~3 s); it is kept beside the tar
(rootfs.tar.sha256, with the tar's size and mtime), so the next load costs one pass, the
copy into the stream.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import IO

LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CHUNK = 1 << 20


def layer_digest(layer: Path) -> str:
    """sha256 of the layer tar, as "sha256:<hex>", cached beside it by size and mtime."""
    st = layer.stat()
    stamp = f"{st.st_size} {st.st_mtime_ns}"
    cache = layer.with_name(layer.name + ".sha256")
    try:
        kept_stamp, kept = cache.read_text().split("\n")[:2]
        if kept_stamp == stamp and kept.startswith("sha256:"):
            return kept
    except (OSError, ValueError):
        pass
    h = hashlib.sha256()
    with open(layer, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    digest = f"sha256:{h.hexdigest()}"
    with contextlib.suppress(OSError):  # a read-only image cache: hashed again next time
        cache.write_text(f"{stamp}\n{digest}\n")
    return digest


def _blob(data: bytes) -> tuple[str, bytes]:
    return f"sha256:{hashlib.sha256(data).hexdigest()}", data


def documents(ref: str, digest: str, size: int, labels: dict[str, str]
              ) -> tuple[dict[str, bytes], bytes]:
    """(blobs by digest: the config and the manifest, index.json) for a one-layer image named
    `ref` whose layer is `digest` of `size` bytes. Pure."""
    config_digest, config = _blob(json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/opt/isotax/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                           "/usr/bin:/sbin:/bin"], "Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": [digest]},
        "history": [{"created_by": "isotax image build (debootstrap + helpers)"}],
    }, sort_keys=True).encode())
    manifest_digest, manifest = _blob(json.dumps({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": LAYER, "digest": digest, "size": size}],
        "annotations": labels,
    }, sort_keys=True).encode())
    index = json.dumps({
        "schemaVersion": 2, "mediaType": INDEX,
        "manifests": [{"mediaType": MANIFEST, "digest": manifest_digest,
                       "size": len(manifest),
                       "platform": {"architecture": "amd64", "os": "linux"},
                       "annotations": {"org.opencontainers.image.ref.name": ref,
                                       "io.containerd.image.name": ref}}],
    }, sort_keys=True).encode()
    return {config_digest: config, manifest_digest: manifest}, index


def write(layer: Path, ref: str, out: IO[bytes], labels: dict[str, str] | None = None) -> str:
    """Stream the OCI archive of `layer` named `ref` to `out`; returns the layer's digest."""
    digest = layer_digest(layer)
    size = layer.stat().st_size
    blobs, index = documents(ref, digest, size, labels or {})

    def add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))

    with tarfile.open(fileobj=out, mode="w|") as tar:
        add(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add(tar, "index.json", index)
        for d, data in blobs.items():
            add(tar, f"blobs/sha256/{d.removeprefix('sha256:')}", data)
        info = tarfile.TarInfo(f"blobs/sha256/{digest.removeprefix('sha256:')}")
        info.size, info.mode = size, 0o644
        with open(layer, "rb") as f:
            tar.addfile(info, f)
    return digest


def write_layout(layer: Path, ref: str, out: Path, labels: dict[str, str] | None = None
                 ) -> str:
    """The same image as write()'s archive, as the OCI image layout directory it unpacks to
    (what a pusher such as crane reads), at `out` (made, empty or absent): the layer is a
    hard link to `layer` where both are on one filesystem, else a copy. Returns the layer's
    digest."""
    digest = layer_digest(layer)
    blobs, index = documents(ref, digest, layer.stat().st_size, labels or {})
    d = out / "blobs" / "sha256"
    d.mkdir(parents=True, exist_ok=True)
    (out / "oci-layout").write_bytes(b'{"imageLayoutVersion":"1.0.0"}')
    (out / "index.json").write_bytes(index)
    for name, data in blobs.items():
        (d / name.removeprefix("sha256:")).write_bytes(data)
    target = d / digest.removeprefix("sha256:")
    try:
        target.hardlink_to(layer)
    except OSError:
        shutil.copyfile(layer, target)
    return digest
