"""The workload image in the local cluster's containerd (namespace k8s.io, where the kubelet
looks), as `localhost/itx/workload:<recipe hash>`: streamed from the image's rootfs.tar as an
OCI archive (isotax.image.oci_archive) into `ctr images import -`, once per recipe hash. Pods
name it with imagePullPolicy Never: the same bits as every other environment, and no
registry."""

from __future__ import annotations

import subprocess
import tempfile
import threading
import time

from isotax.host import command
from isotax.host.kubernetes import layout as L
from isotax.image import oci_archive
from isotax.image.artifacts import ImageArtifacts

REPO = "localhost/itx/workload"


def image_ref(image: ImageArtifacts) -> str:
    return f"{REPO}:{image.recipe_hash}"


def loaded(ref: str, node: L.NodeLayout = L.LOCAL) -> bool:
    return ref in command.run(L.ctr_argv("images", "ls", "-q", node=node), 60).stdout.split()


# The import's limit on a real host (the stream and ctr's unpacking together), multiplied by
# the cluster's pace (cluster up --timeout): under TCG a 1.3 GB import takes tens of minutes.
LOAD_TIMEOUT_S = 900.0


def load(image: ImageArtifacts, node: L.NodeLayout = L.LOCAL, timeout: float | None = None
         ) -> tuple[str, float]:
    """The image in a node's containerd: (its reference, seconds the import took; 0 when it
    was there). RuntimeError with ctr's words when the import fails, or when the stream and
    the import together outlast `timeout` (LOAD_TIMEOUT_S at the cluster's pace): ctr is
    killed then, so a stalled import ends instead of blocking the stream for ever."""
    if timeout is None:
        timeout = LOAD_TIMEOUT_S * L.pace()
    ref = image_ref(image)
    if loaded(ref, node):
        return ref, 0.0
    if not image.tar.exists():
        raise RuntimeError(f"image tar {image.tar} is missing (rebuild: isotax image build)")
    t0 = time.monotonic()
    # ctr's words go to a file, not a pipe nobody reads while the archive streams in.
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(L.ctr_argv("images", "import", "--all-platforms", "-",
                                           node=node),
                                stdin=subprocess.PIPE, stdout=err, stderr=err)
        assert proc.stdin is not None
        # The stream blocks while ctr does not read: the watchdog bounds both together.
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            proc.kill()

        watchdog = threading.Timer(timeout, expire)
        watchdog.start()
        try:
            oci_archive.write(image.tar, ref, proc.stdin,
                              {"isotax": "1", "isotax.recipe": image.recipe_hash})
            proc.stdin.close()
            proc.wait()
        except BrokenPipeError:
            proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            watchdog.cancel()
        err.seek(0)
        words = err.read().decode(errors="replace").strip()[-300:]
    if fired.is_set():
        raise RuntimeError(f"ctr images import of {ref} did not finish in {timeout:.0f} s "
                           f"(killed): {words}")
    if proc.returncode != 0 or not loaded(ref, node):
        raise RuntimeError(f"ctr images import of {ref} failed ({proc.returncode}): {words}")
    return ref, time.monotonic() - t0
