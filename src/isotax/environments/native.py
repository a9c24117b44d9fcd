"""native: the host itself, the baseline every other environment is compared with."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from isotax.environments.base import (
    GUEST_PATH,
    Availability,
    Completed,
    EnvSpec,
    Instance,
    Stopwatch,
    register,
)


def run_host(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
             cwd: str | None = None) -> Completed:
    """Run a host command; a timeout is reported as exit status 124 like coreutils' timeout."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                           env=dict(env) if env is not None else None, cwd=cwd, check=False)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = 124
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = f"timed out after {timeout:.0f} s"
    except FileNotFoundError as e:
        rc, out, err = 127, "", str(e)
    return Completed(tuple(argv), rc, out, err, time.monotonic() - t0)


def filesystem_of(path: str, mountinfo: str) -> tuple[str, str]:
    """(fstype, source) of the mount holding `path` (absolute, resolved), from mountinfo text:
    the longest mount point that is a prefix; the last one listed wins (it is on top)."""
    best: tuple[int, str, str] = (-1, "unknown", "unknown")
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 2:
            continue
        point = fields[4].encode().decode("unicode_escape")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= best[0]:
            best = (len(point), tail[0], tail[1])
    return best[1], best[2]


def host_storage(path: Path) -> str:
    """"ext4 on /dev/vda": the host filesystem a directory is on, for describe()."""
    try:
        fstype, source = filesystem_of(str(path.resolve()),
                                       Path("/proc/self/mountinfo").read_text())
    except OSError:
        return "unknown filesystem"
    return f"{fstype} on {source}"


class NativeInstance:
    """The host. Workload tools come from the host's packages (same versions as the image's,
    checked in the report); isotax's static helpers come from the image's /opt/isotax/bin."""

    address = "127.0.0.1"

    def __init__(self, spec: EnvSpec) -> None:
        sw = Stopwatch()
        self.spec = spec
        # The image's static helpers (itx-time, itx-corpus) are the same bits on the host.
        self.helper_dir = spec.image.rootfs / "opt/isotax/bin"
        # A defined environment, the same one containers and the VM get: nothing inherited
        # from the caller's shell may change a workload's behaviour natively only.
        self.env = {"PATH": f"{self.helper_dir}:{GUEST_PATH}", "HOME": "/root", "LANG": "C.UTF-8"}
        # Scratch lives in tmpfs, like /tmp inside the containers and the VM: in-memory everywhere.
        self._scratch = Path("/dev/shm") / f"itx-{spec.name}-{os.getpid()}"
        self._scratch.mkdir(parents=True, exist_ok=True)
        self.scratch = str(self._scratch)
        # Disk workloads write under the run's workdir (removed by the runner), on the host's
        # disk. The plan's storage choice has no meaning here: the host has one filesystem.
        self._data = spec.workdir / "data"
        self._data.mkdir(parents=True, exist_ok=True)
        self.data_dir = str(self._data)
        sw.mark("ready")
        self.milestones: Mapping[str, float] = dict(sw.marks)

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        # TMPDIR points workloads at a private scratch directory the runner removes afterwards.
        return run_host(argv, timeout, env={**self.env, "TMPDIR": self.scratch})

    def describe(self) -> Mapping[str, str]:
        return {
            "kind": "native",
            "kernel": platform.release(),
            "cpus": str(os.cpu_count()),
            "network": "host",
            "storage": f"host directory ({host_storage(self._data)})",
        }

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def stop(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)
        shutil.rmtree(self._data, ignore_errors=True)


@register
class Native:
    kind: ClassVar[str] = "native"
    description: ClassVar[str] = "the host itself: the baseline"

    def available(self) -> Availability:
        return Availability.yes()

    def start(self, spec: EnvSpec) -> Instance:
        return NativeInstance(spec)
