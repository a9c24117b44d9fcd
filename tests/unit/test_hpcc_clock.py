"""hpcc's runs wait, inside the environment, until its CLOCK_MONOTONIC is past 1 s: Open MPI
4.1's MPI_Wtime returns 0 before that, and a fresh gVisor sandbox's clock starts at 0
(workloads/hpcc.py's docstring: hpcc's MPIRandomAccess then died with SIGSEGV)."""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence

import pytest
from support import DATA

from isotax.facts import Facts, Reach
from isotax.model import SanityError
from isotax.protocols import Completed, ExecError, SocketStack
from isotax.workloads import hpcc as drv


class FakeClock:
    """Stands in for the `time` module inside CLOCK_WAIT_PY: a CLOCK_MONOTONIC that starts at
    `start` and moves only when slept."""

    CLOCK_MONOTONIC = 1

    def __init__(self, start: float) -> None:
        self.now = start
        self.slept: list[float] = []

    def clock_gettime(self, clock: int) -> float:
        assert clock == self.CLOCK_MONOTONIC
        return self.now

    def sleep(self, s: float) -> None:
        assert s > 0
        self.slept.append(s)
        self.now += s


def run_clock_wait(clock: FakeClock, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str]) -> str:
    fake = types.ModuleType("time")
    for name in ("CLOCK_MONOTONIC", "clock_gettime", "sleep"):
        setattr(fake, name, getattr(clock, name))
    monkeypatch.setitem(sys.modules, "time", fake)
    exec(compile(drv.CLOCK_WAIT_PY, "<CLOCK_WAIT_PY>", "exec"), {})
    return capsys.readouterr().out


def test_the_wait_sleeps_a_young_clock_past_one_second(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock(0.12)  # a gVisor sandbox just after start()
    out = run_clock_wait(clock, monkeypatch, capsys)
    assert clock.slept == [pytest.approx(0.88)]
    assert drv.parse_clock_wait(out) == (pytest.approx(0.12), pytest.approx(1.0))


def test_the_wait_does_not_sleep_where_the_clock_is_past_one_second(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock(40123.5)  # a host (or container) up for hours
    out = run_clock_wait(clock, monkeypatch, capsys)
    assert clock.slept == []
    assert drv.parse_clock_wait(out) == (40123.5, 40123.5)


def test_the_wait_runs_in_a_real_python3() -> None:
    """The script itself, under this machine's python3 (up for far more than a second)."""
    import subprocess

    p = subprocess.run([sys.executable, "-c", drv.CLOCK_WAIT_PY], capture_output=True,
                       text=True, timeout=30, check=True)
    before, after = drv.parse_clock_wait(p.stdout)
    assert before == after >= drv.MPI_CLOCK_MIN_S


@pytest.mark.parametrize("out", ["", "hello", "0.5\n", "x y\n"])
def test_a_clock_check_that_printed_nonsense_is_refused(out: str) -> None:
    with pytest.raises(SanityError, match="the clock check printed"):
        drv.parse_clock_wait(out)


def test_a_clock_still_under_one_second_after_the_wait_is_refused() -> None:
    with pytest.raises(SanityError, match=r"still reads 0\.900 s"):
        drv.parse_clock_wait("0.100000 0.900000\n")


# -- the driver: the wait comes right before mpirun, outside its timed exec --------------------


class FakeInstance:
    """Answers the driver's execs in order of their shape and records them."""

    scratch = "/tmp"
    socket_stack = SocketStack.LINUX

    def __init__(self, clock_out: str = "0.250000 1.000000\n", clock_rc: int = 0) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.clock_out = clock_out
        self.clock_rc = clock_rc

    def facts(self) -> Facts:
        return Facts(kind="native", reach=Reach.HOST)

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        a = tuple(argv)
        self.calls.append(a)
        out, rc = "", 0
        if a[0] == "python3":
            out, rc = self.clock_out, self.clock_rc
        elif a[0] == "sh" and "ldd" in a[2]:
            out = "\tlibblas.so.3 => /usr/lib/x86_64-linux-gnu/libblas.so.3 (0x0)\n"
        elif a[0] == "readlink":
            out = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3\n"
        elif a[0] == "cat":
            out = (DATA / "hpcc" / "n1000-np2-t1.txt").read_text()
        elif a[:2] == ("mpirun", "--version"):
            out = (DATA / "hpcc" / "mpirun-version-debian12.txt").read_text()
        return Completed(a, rc, out, "", 0.01)


def _cfg() -> drv.HpccConfig:
    return drv.HpccConfig(n=1000, nb=128, processes=2, threads=1, bind="none", timeout_s=60)


def test_run_hpcc_waits_for_the_clock_right_before_mpirun() -> None:
    inst = FakeInstance()
    run = drv.run_hpcc(inst, _cfg())  # type: ignore[arg-type]
    kinds = ["clock" if c[0] == "python3" else "version" if c[:2] == ("mpirun", "--version")
             else "mpirun" if "mpirun" in " ".join(c) else c[0] for c in inst.calls]
    assert kinds.count("clock") == 1 and kinds.count("mpirun") == 1
    assert kinds.index("mpirun") == kinds.index("clock") + 1
    assert inst.calls[kinds.index("clock")] == ("python3", "-c", drv.CLOCK_WAIT_PY)
    # The mpirun exec itself is the workload's, unchanged.
    mpirun = inst.calls[kinds.index("mpirun")]
    assert mpirun[:2] == ("sh", "-c") and mpirun[2].endswith(" -np 2 hpcc'")
    assert run.mpi == drv.MpiLaunch((4, 1, 4), "net")  # asked before the wait, not timed
    assert run.wall_s == 0.01  # the timed exec is mpirun's alone


def test_the_wait_reports_the_seconds_it_waited() -> None:
    young, old = FakeInstance("0.250000 1.000000\n"), FakeInstance("5000.0 5000.0\n")
    assert drv.wait_for_mpi_clock(young) == pytest.approx(0.75)  # type: ignore[arg-type]
    assert drv.wait_for_mpi_clock(old) == 0.0  # type: ignore[arg-type]


def test_no_python3_in_the_environment_says_so() -> None:
    inst = FakeInstance("", clock_rc=127)
    with pytest.raises(ExecError, match=r"CLOCK_MONOTONIC with python3.*fix: install python3"):
        drv.wait_for_mpi_clock(inst)  # type: ignore[arg-type]
    with pytest.raises(ExecError):
        drv.run_hpcc(inst, _cfg())  # type: ignore[arg-type]
    assert not any("mpirun" in c[-1] for c in inst.calls)  # nothing ran unmeasurable
    assert inst.calls[-1][:2] == ("rm", "-rf")  # its run directory is still removed


def test_the_image_carries_python3() -> None:
    from isotax.image.recipe import BASE_PACKAGES

    assert "python3" in BASE_PACKAGES
