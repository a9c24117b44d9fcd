"""hpcc (HPC Challenge) for real: the three workloads run natively, hpcc killed by its time
limit, and linpack in the untuned VM (SIGILL: not applicable)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from isotax.image.artifacts import ImageArtifacts
from isotax.model import SanityError
from isotax.workloads import hpcc as drv


def _native():
    from isotax.environments.native import NativeInstance
    from isotax.image.artifacts import ImageArtifacts
    from isotax.protocols import EnvSpec

    spec = EnvSpec(name="test-hpcc", kind="native",
                   image=ImageArtifacts("none", Path("/nonexistent")), workdir=Path("/tmp"))
    return NativeInstance(spec)


def _need_hpcc() -> None:
    missing = [t for t in ("hpcc", "mpirun", "timeout") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"this machine lacks {', '.join(missing)} (apt-get install hpcc openmpi-bin)")


def _procs_in(directory: str) -> list[int]:
    """PIDs whose working directory is inside `directory` (hpcc ranks run in the run dir)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd").startswith(directory):
                out.append(int(pid))
        except OSError:
            pass
    return out


@pytest.mark.integration
def test_quick_hpcc_workloads_natively() -> None:
    _need_hpcc()
    from isotax.workloads.linpack import Linpack
    from isotax.workloads.randomaccess import RandomAccess
    from isotax.workloads.stream import Stream

    inst = _native()
    try:
        for cls, metrics, unit in ((Linpack, {"hpl"}, "GFLOPS"),
                                   (Stream, {"copy", "scale", "add", "triad"}, "GB/s"),
                                   (RandomAccess, {"gups"}, "GUP/s")):
            w = cls()
            w.prepare(inst, {}, None)
            samples = w.run(inst, {}, None)
            assert {s.metric for s in samples} == metrics
            for s in samples:
                assert s.unit == unit and s.value > 0
                assert s.labels["n"] == drv.QUICK_N
                assert s.labels["processes"] == os.cpu_count()
                assert drv.is_openblas(s.labels["blas"]), s.labels["blas"]
                assert s.labels["blas_core"]  # OpenBLAS said which kernels it chose
        assert not [d for d in os.listdir(inst.scratch) if d.startswith("hpcc-")]
    finally:
        inst.stop()


@pytest.mark.integration
def test_hpcc_killed_by_its_time_limit() -> None:
    _need_hpcc()
    from isotax.workloads.linpack import Linpack

    inst = _native()
    try:
        t0 = time.monotonic()
        with pytest.raises(SanityError, match="timed out"):
            Linpack().run(inst, {"n": 6000, "timeout_s": 2}, None)
        assert time.monotonic() - t0 < 60
        deadline = time.monotonic() + 20  # Open MPI stops its ranks shortly after mpirun
        while _procs_in(inst.scratch) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _procs_in(inst.scratch) == []
    finally:
        inst.stop()


UNTUNED = """
name = "t-sigill"
seed = 2
repetitions = 2
warmups = 0
parity = "flag"
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "untuned"
kind = "qemu"
network = "none"
memory_mib = 1024
options = { profile = "untuned", accel = "tcg" }
[[workloads]]
name = "linpack"
params = { n = 200, nb = 64 }
"""


@pytest.mark.integration
def test_linpack_in_the_untuned_vm_is_not_applicable(image: ImageArtifacts,
                                                      tmp_path: Path) -> None:
    """A real untuned VM: its first linpack dies with SIGILL, that point is n/a with the
    reason, and the second repetition is not run again."""
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed (scripts/setup.sh installs it)")
    from support import ran

    from isotax.model import CellStatus

    with ran(UNTUNED, image, tmp_path) as (store, run_id):
        cells = [c for c in store.cells(run_id) if c.key.environment == "untuned"]
        native = [c for c in store.cells(run_id) if c.key.environment == "native"]
    assert len(cells) == 2 and all(c.status is CellStatus.NOT_APPLICABLE for c in cells)
    assert all("SIGILL" in c.reason and "femms" in c.reason for c in cells)
    assert cells[1].ended - cells[1].started < 1.0  # ended at once, not run again
    assert all(c.status is CellStatus.OK for c in native)
