"""An engine's client command (EngineCli: `<program> <global flags> ...`, never raising) and the
workload image in the engine: imported from the image's tar as `itx-image:<recipe hash>` with
the label `isotax`, once per recipe hash.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from isotax.environments.base import READY_HELPER
from isotax.host import command
from isotax.host.locks import exclusive
from isotax.host.network import STATE_DIR
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import Availability, Completed, Leftover, Stage, Unavailable

LABEL = "isotax"  # every container, volume, network and image isotax makes carries it
IMAGE_REPO = "itx-image"
_IMPORT_LOCK = STATE_DIR / "engine-import.lock"

class EngineError(Exception):
    """An engine command failed; the message has the engine's own words."""


def image_ref(image: ImageArtifacts) -> str:
    return f"{IMAGE_REPO}:{image.recipe_hash}"


# -- the engine's client ----------------------------------------------------------------

@dataclass
class EngineCli:
    """`<program> <global flags> ...`; calls never raise, they return what happened."""

    program: str
    global_flags: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None

    def argv(self, *args: str) -> list[str]:
        return [self.program, *self.global_flags, *args]

    def call(self, *args: str, timeout: float = 60) -> Completed:
        """host.command.run: a timeout is 124 (its process group killed), a missing client 127."""
        return command.run(self.argv(*args), timeout, env=self.env)

    def check(self, *args: str, timeout: float = 60) -> str:
        p = self.call(*args, timeout=timeout)
        if p.returncode != 0:
            words = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
            raise EngineError(f"{self.program} {' '.join(args[:2])} failed "
                              f"({p.returncode}): {words[0]}")
        return p.stdout

    def inspect(self, what: str, *names: str) -> list[dict[str, Any]]:
        p = self.call(*([what] if what else []), "inspect", *names, timeout=30)
        try:
            data = json.loads(p.stdout or "[]")
        except ValueError:
            return []
        return data if isinstance(data, list) else []


# An import's time limit is there to end a hung engine, not to time it: it grows with the
# image, at an import rate no working host falls below. Measured: Podman 5 imported the 1.3 GB
# image in 622 s in a guest under TCG (2.1 MB/s) and did not finish in 900 s in the same guest
# while this host also ran tests; natively it takes seconds.
IMPORT_FLOOR_BYTES_PER_S = 0.5e6
IMPORT_MIN_TIMEOUT_S = 900.0


def import_timeout(tar_bytes: int) -> float:
    """The time limit for importing an image tar of that size. Pure."""
    return max(IMPORT_MIN_TIMEOUT_S, tar_bytes / IMPORT_FLOOR_BYTES_PER_S)


def ensure_image(cli: EngineCli, image: ImageArtifacts, log: Any = None) -> tuple[str, float]:
    """The image in the engine as itx-image:<recipe hash>, imported from its tar when the
    engine has no image of that hash (a new recipe imports anew; older isotax images are
    removed where no container uses them). Returns (reference, seconds the import took)."""
    ref = image_ref(image)
    with exclusive(_IMPORT_LOCK):
        if cli.call("image", "inspect", ref, timeout=30).returncode == 0:
            return ref, 0.0
        if not image.tar.exists():
            raise Unavailable(Availability.no(
                f"image tar {image.tar} is missing", "rebuild the image: isotax image build"))
        if log:
            log(f"importing {image.tar} into {cli.program} as {ref} ...")
        t0 = time.monotonic()
        cli.check("import", "--change", f"LABEL {LABEL}=1", "--change",
                  f'CMD ["{READY_HELPER}", "--hold"]', str(image.tar), ref,
                  timeout=import_timeout(image.tar.stat().st_size))
        took = time.monotonic() - t0
        old = cli.call("images", "--filter", f"label={LABEL}", "--format",
                       "{{.Repository}}:{{.Tag}}", timeout=30).stdout.split()
        for other in old:
            other = other.removeprefix("localhost/")  # podman's name for a local image
            if other != ref and other.startswith(f"{IMAGE_REPO}:"):
                cli.call("rmi", other, timeout=60)  # refused while in use: fine
        return ref, took


def labelled_leftovers(cli: EngineCli, engine: str, remover: Sequence[str], timeout: float,
                       short_how: bool = False) -> list[Leftover]:
    """The containers and volumes labelled LABEL that an engine (asked through cli) still
    has, each removed by `remover` (the engine's argv with the flags that reach the same
    storage) + rm. short_how: the line says "<engine> rm -f NAME" (the engine's defaults
    reach it) instead of the whole argv."""
    out: list[Leftover] = []
    for name in cli.call("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}",
                         timeout=timeout).stdout.split():
        out.append(Leftover(f"{engine} container {name}", [(*remover, "rm", "-f", name)],
                            how=f"{engine} rm -f {name}" if short_how else "",
                            stage=Stage.CONTAINER))
    for name in cli.call("volume", "ls", "-q", "--filter", f"label={LABEL}",
                         timeout=timeout).stdout.split():
        out.append(Leftover(f"{engine} volume {name}", [(*remover, "volume", "rm", name)],
                            how=f"{engine} volume rm {name}" if short_how else ""))
    return out
