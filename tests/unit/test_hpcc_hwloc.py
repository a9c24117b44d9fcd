"""hpcc's command keeps hwloc's X/OpenGL probe out of mpirun's start-up (workloads/hpcc.py's
docstring: in a container without /etc/hosts it cost a 5 s DNS timeout in most runs)."""

from __future__ import annotations

import shlex

from isotax.workloads import hpcc as drv

MPI = drv.MpiLaunch((4, 1, 4), "net")


def test_mpirun_starts_without_hwlocs_gl_plugin() -> None:
    cfg = drv.HpccConfig(n=1000, nb=128, processes=2, threads=1, bind="none", timeout_s=60)
    words = shlex.split(drv.hpcc_script("/tmp/hpcc-y", cfg, MPI).split(" && ", 1)[1])
    assert words[:2] == ["exec", "env"]
    env = words[2:words.index("timeout")]
    assert "HWLOC_COMPONENTS=-gl" in env  # set for mpirun and, inherited, for every rank
    assert drv.HWLOC_COMPONENTS == "-gl"


def test_the_command_is_the_same_but_for_the_directory() -> None:
    cfg = drv.HpccConfig(n=1000, nb=128, processes=2, threads=1, bind="none", timeout_s=60)
    a = drv.hpcc_script("/tmp/hpcc-a", cfg, MPI)
    b = drv.hpcc_script("/tmp/hpcc-b", cfg, MPI)
    assert a.replace("/tmp/hpcc-a", "D") == b.replace("/tmp/hpcc-b", "D")
