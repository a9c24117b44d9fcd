"""The workload image in a managed-style cluster's registry (host.kubernetes.managed): the
image as its OCI layout (image.oci_archive, the same bits the archive of `isotax image
oci-archive` holds) pushed by crane, with the registry's credentials and the cluster's CA,
as a user pushes to the registry their cluster pulls from."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from isotax.host import command
from isotax.host.kubernetes import layout as L
from isotax.host.kubernetes import managed
from isotax.image import oci_archive
from isotax.image.artifacts import ImageArtifacts


def push(image: ImageArtifacts, tag: str = "", timeout: float = 900) -> tuple[str, float]:
    """(the image's reference in the registry, seconds the push took), tagged with its
    recipe hash or `tag` (a second tag costs a manifest: the registry has the layer).
    RuntimeError with crane's words when it fails."""
    ref = managed.workload_ref(tag or image.recipe_hash)
    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="itx-push-", dir=L.LIB))
    try:
        layout = work / "layout"
        oci_archive.write_layout(image.tar, ref, layout,
                                 {"isotax": "1", "isotax.recipe": image.recipe_hash})
        (work / "docker").mkdir()
        shutil.copyfile(managed.PULL_SECRET, work / "docker" / "config.json")
        env = {**os.environ, "DOCKER_CONFIG": str(work / "docker"),
               "SSL_CERT_FILE": str(L.PKI / "ca.crt")}
        done = command.run([str(L.binary("crane")), "push", str(layout), ref], timeout,
                           env=env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"crane push {ref}: {done.stderr.strip()[-300:]}")
    return ref, time.monotonic() - t0
