"""mpirun's start-up in runc and crun with the hpcc workload's own command line: as fast as
natively. Before HWLOC_COMPONENTS=-gl (workloads/hpcc.py), hwloc's gl plugin resolved
"localhost" about 20 times per mpirun; the containers have no /etc/hosts, so that went to
DNS, and most runs waited out a 5 s resolver timeout.

And hpcc started at once in a fresh gVisor sandbox, whose clock is then under 1 s: without
the driver's wait for the clock, Open MPI's MPI_Wtime read 0 and hpcc died with SIGSEGV."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ours, started, why_not_root_and

from isotax import protocols
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec, Instance
from isotax.workloads import hpcc as drv


@pytest.fixture(params=["runc", "crun"])
def inst(request: pytest.FixtureRequest, image: ImageArtifacts,
         tmp_path: Path) -> Iterator[Instance]:
    rt = request.param
    if (why := why_not_root_and(rt, root_for="OCI containers")) is not None:
        pytest.skip(why)
    i = protocols.environments()[rt]().start(
        EnvSpec(name="itx-mpistart", kind=rt, image=image, workdir=tmp_path, network="host"))
    try:
        yield i
    finally:
        i.stop()


@pytest.mark.integration
def test_mpirun_starts_in_a_container_without_a_dns_timeout(inst: Instance) -> None:
    rundir = f"{inst.scratch}/itx-mpistart"
    inst.exec(["mkdir", "-p", rundir], 60).check()
    cfg = drv.HpccConfig(n=1000, nb=128, processes=2, threads=1, bind="none", timeout_s=60)
    mpi = drv.mpi_launch(inst)
    # A container has Docker's default capabilities, no CAP_SYS_ADMIN: a user namespace.
    assert mpi.netns == "user+net", mpi
    script = drv.hpcc_script(rundir, cfg, mpi, program="true")  # the workload's exact mpirun
    # Without the fix about 3 runs in 4 took 5.06 s (0.06 s otherwise): 4 runs catch it
    # with 99% probability.
    walls = []
    for _ in range(4):
        t0 = time.monotonic()
        inst.exec(["sh", "-c", script], 60).check()
        walls.append(time.monotonic() - t0)
    assert max(walls) < 2.5, f"mpirun start-up took {walls} s"


# In the sandbox, right after start: its CLOCK_MONOTONIC, and Open MPI's MPI_Wtime twice, 50 ms
# apart (MPI_Wtime needs no MPI_Init).
WTIME_PROBE = (
    "import ctypes, time\n"
    "m = ctypes.CDLL('libmpi.so.40')\n"
    "m.MPI_Wtime.restype = ctypes.c_double\n"
    "t = time.clock_gettime(time.CLOCK_MONOTONIC)\n"
    "a = m.MPI_Wtime(); time.sleep(0.05); b = m.MPI_Wtime()\n"
    "u = time.clock_gettime(time.CLOCK_MONOTONIC)\n"
    "print(t, u, a, b)\n"
)


@pytest.mark.integration
def test_hpcc_runs_at_once_in_a_fresh_gvisor_sandbox(image: ImageArtifacts,
                                                     tmp_path: Path) -> None:
    """A gVisor sandbox's CLOCK_MONOTONIC starts at 0, and Open MPI 4.1's MPI_Wtime reads 0
    until it passes 1 s; hpcc's first test then died with SIGSEGV (workloads/hpcc.py). The
    driver waits for the clock, so linpack started at once passes."""
    with started("itx-gvclock", "gvisor", "bridge", image, tmp_path) as inst:
        t, u, a, b = map(float, inst.exec(["python3", "-c", WTIME_PROBE], 30).check()
                         .stdout.split())
        assert t < 30, f"the sandbox's clock read {t} s just after its start: not its own?"
        if u < 1.0:  # the whole probe inside the first second (not on a very slow host)
            assert a == b == 0.0, (t, u, a, b)  # MPI_Wtime measures nothing yet
        w = protocols.workloads()["linpack"]()
        params = {"n": 400, "nb": 64, "processes": 2, "timeout_s": 120}
        w.prepare(inst, params, None)
        samples = {s.metric: s.value for s in w.run(inst, params, None)}
        assert samples["hpl"] > 0
    assert ours("itx-gvclock") == []
