"""hpcc (HPC Challenge) parsers on real hpcc 1.5.0 output captured on this kind of machine,
and the driver's pure parts."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from support import DATA

from isotax.facts import Facts, Reach
from isotax.model import NotApplicable, SanityError
from isotax.parsers import hpcc as p
from isotax.protocols import Completed, SocketStack
from isotax.workloads import hpcc as drv

COMPLETE = ["n1000-np2-t1.txt", "n2000-np2-t1.txt", "n3000-np2-t1.txt", "n4000-np2-t1.txt",
            "n2000-np1-t2.txt"]


def text(name: str) -> str:
    return (DATA / "hpcc" / name).read_text()


# ---------------------------------------------------------------- summary and sections


@pytest.mark.parametrize("name", COMPLETE)
def test_summary_of_every_complete_run(name: str) -> None:
    s = p.parse_summary(text(name))
    n, np_ = re.match(r"n(\d+)-np(\d+)", name).groups()  # type: ignore[union-attr]
    assert s["Success"] == "1"
    assert p.number(s, "HPL_N") == int(n)
    assert p.number(s, "CommWorldProcs") == int(np_)
    assert s["VersionMajor"] == "1" and s["VersionMinor"] == "5"
    assert p.check_run(text(name)) == s


def test_summary_values_exact() -> None:
    s = p.parse_summary(text("n1000-np2-t1.txt"))
    assert s["HPL_Tflops"] == "0.0176971"
    assert s["StarSTREAM_Copy"] == "31.5316"
    assert s["MPIRandomAccess_ErrorsFraction"] == "0"
    assert s["CPS_USING_FFTW"] == "0"  # the last key before the end marker


def test_killed_run_has_no_summary() -> None:
    killed = text("n6000-np2-t1-killed-after-8s.txt")
    with pytest.raises(SanityError, match="no summary section"):
        p.parse_summary(killed)
    for parse in (p.hpl_samples, p.stream_samples, p.randomaccess_samples):
        with pytest.raises(SanityError):
            parse(killed)


def test_summary_cut_before_its_end_marker() -> None:
    cut = text("n1000-np2-t1.txt").replace(p.SUMMARY_END, "")
    with pytest.raises(SanityError, match="not closed"):
        p.parse_summary(cut)


def test_missing_key_and_non_number() -> None:
    s = p.parse_summary(text("n1000-np2-t1.txt"))
    with pytest.raises(SanityError, match="lacks NoSuchKey"):
        p.number(s, "NoSuchKey")
    with pytest.raises(SanityError, match="not a number"):
        p.number(s, "HPL_cpfact")  # "R"


def test_section_boundaries() -> None:
    sec = p.section(text("n1000-np2-t1.txt"), "SingleSTREAM")
    assert "Single STREAM Triad GB/s" in sec and "Begin of" not in sec
    with pytest.raises(SanityError, match="no HPL section"):
        p.section(text("n6000-np2-t1-killed-after-8s.txt"), "HPL")


# ---------------------------------------------------------------- HPL


def test_hpl_sample_gflops_and_labels() -> None:
    [s] = p.hpl_samples(text("n1000-np2-t1.txt"), {"threads": 1})
    assert s.metric == "hpl" and s.unit == "GFLOPS" and s.higher_is_better
    assert s.value == pytest.approx(17.6971)  # HPL_Tflops=0.0176971
    assert s.labels["n"] == 1000 and s.labels["nb"] == 128 and s.labels["processes"] == 2
    assert s.labels["grid"] == "1x2" and s.labels["threads"] == 1


@pytest.mark.parametrize("name", COMPLETE)
def test_recomputed_residual_matches_hpl_own_line(name: str) -> None:
    t = text(name)
    printed = float(re.search(r"\*N\)=\s+([0-9.e+-]+) \.\.\.\.\.\. PASSED",
                              p.section(t, "HPL")).group(1))  # type: ignore[union-attr]
    assert p.hpl_scaled_residual(p.parse_summary(t)) == pytest.approx(printed, rel=1e-3)
    assert p.hpl_threshold(t) == 16.0


def test_hpl_values_of_all_sizes() -> None:
    got = {name: p.hpl_samples(text(name))[0].value for name in COMPLETE}
    assert got["n2000-np1-t2.txt"] == pytest.approx(34.5092)
    assert got["n4000-np2-t1.txt"] == pytest.approx(40.9678)
    assert p.hpl_samples(text("n2000-np1-t2.txt"))[0].labels["grid"] == "1x1"


def test_hpl_failed_residual_check_is_rejected() -> None:
    """A real run with threshold 0.0001: HPL printed FAILED and hpcc wrote Success=0."""
    failed = text("n1000-np2-t1-threshold0.0001-hplfailed.txt")
    with pytest.raises(SanityError, match="Success=0"):
        p.hpl_samples(failed)
    with pytest.raises(SanityError, match="1 test\\(s\\) failed the residual check"):
        p.check_hpl(failed, p.parse_summary(failed))


def test_hpl_residual_above_threshold_without_failed_line() -> None:
    # The summary's norms give the residual independently of HPL's PASSED line.
    t = text("n1000-np2-t1.txt")
    sec = p.section(t, "HPL")
    strict = t.replace(sec, sec.replace("less than                16.0",
                                        "less than                0.001"))
    with pytest.raises(SanityError, match=r"not below 0\.001"):
        p.check_hpl(strict, p.parse_summary(strict))


# ---------------------------------------------------------------- STREAM


def test_stream_star_is_per_rank_rate_times_ranks() -> None:
    samples = p.stream_samples(text("n2000-np2-t1.txt"))
    got = {s.metric: s.value for s in samples}
    assert got == pytest.approx({"copy": 2 * 29.2817, "scale": 2 * 24.4025,
                                 "add": 2 * 28.8014, "triad": 2 * 28.7467}, rel=1e-5)
    assert {s.unit for s in samples} == {"GB/s"}
    assert samples[0].labels["variant"] == "star"
    assert samples[0].labels["vector_size"] == 666666


def test_stream_single_and_one_rank() -> None:
    single = {s.metric: s.value for s in p.stream_samples(text("n2000-np2-t1.txt"), "single")}
    assert single["triad"] == pytest.approx(29.8964)
    one = {s.metric: s.value for s in p.stream_samples(text("n2000-np1-t2.txt"))}
    assert one["triad"] == pytest.approx(29.5103)  # one rank: no multiplication


def test_stream_not_validating_is_rejected() -> None:
    t = text("n1000-np2-t1.txt").replace("Solution Validates", "Failed Validation")
    with pytest.raises(SanityError, match="did not validate"):
        p.stream_samples(t)
    with pytest.raises(SanityError, match="Success=0"):
        p.stream_samples(text("n1000-np2-t1-threshold0.0001-hplfailed.txt"))
    with pytest.raises(ValueError, match="variant"):
        p.stream_samples(text("n1000-np2-t1.txt"), "mpi")


# ---------------------------------------------------------------- RandomAccess


def test_randomaccess_variants() -> None:
    t = text("n2000-np2-t1.txt")
    [star] = p.randomaccess_samples(t)
    assert star.metric == "gups" and star.unit == "GUP/s"
    assert star.value == pytest.approx(2 * 0.126596)
    assert star.labels["table_words"] == 1048576 and star.labels["variant"] == "star"
    [single] = p.randomaccess_samples(t, "single")
    assert single.value == pytest.approx(0.186581)
    [mpi] = p.randomaccess_samples(t, "mpi")
    assert mpi.value == pytest.approx(0.00471527)
    assert mpi.labels["table_words"] == 2097152


def test_randomaccess_errors_above_one_percent_rejected() -> None:
    t = text("n1000-np2-t1.txt")
    sec = p.section(t, "StarRandomAccess")
    bad = t.replace(sec, sec.replace("Found 0 errors in 262144 locations (passed)",
                                     "Found 5000 errors in 262144 locations (failed)"))
    with pytest.raises(SanityError, match="5000 errors"):
        p.randomaccess_samples(bad)
    frac = t.replace("MPIRandomAccess_ErrorsFraction=0\n", "MPIRandomAccess_ErrorsFraction=0.02\n")
    with pytest.raises(SanityError, match=r"error fraction 0\.02"):
        p.randomaccess_samples(frac, "mpi")
    p.randomaccess_samples(frac, "star")  # the global test's errors do not touch Star's number


# ---------------------------------------------------------------- libraries and the driver


def test_ldd_and_openblas_core() -> None:
    libs = p.parse_ldd(text("ldd-hpcc.txt"))
    assert libs["libblas.so.3"] == "/lib/x86_64-linux-gnu/libblas.so.3"
    assert libs["libopenblas.so.0"].endswith("libopenblas.so.0")
    assert "linux-vdso.so.1" not in libs
    assert p.parse_ldd("\tlibblas.so.3 => not found\n") == {"libblas.so.3": ""}
    assert p.parse_openblas_core(text("mpirun-stderr-n1000-np2.txt")) == "SkylakeX"
    assert p.parse_openblas_core("Core: Haswell\nCore: SkylakeX\n") == "mixed"
    assert p.parse_openblas_core("") == ""


@pytest.mark.parametrize(("procs", "grid"), [(1, (1, 1)), (2, (1, 2)), (4, (2, 2)),
                                             (6, (2, 3)), (7, (1, 7)), (12, (3, 4))])
def test_process_grid(procs: int, grid: tuple[int, int]) -> None:
    assert drv.process_grid(procs) == grid


def test_hpccinf_layout() -> None:
    lines = drv.hpccinf_text(2000, 128, 1, 2).splitlines()
    assert len(lines) == 36  # 31 HPL lines, the separator, 4 PTRANS lines
    assert lines[5].split()[0] == "2000" and lines[7].split()[0] == "128"
    assert lines[10].split()[0] == "1" and lines[11].split()[0] == "2"
    assert lines[12].split()[0] == "16.0"


def _version(name: str) -> tuple[int, int, int]:
    return p.parse_mpirun_version((DATA / "hpcc" / name).read_text())


def test_mpirun_versions_of_debian_12_and_13() -> None:
    assert _version("mpirun-version-debian12.txt") == (4, 1, 4)
    assert _version("mpirun-version-debian13.txt") == (5, 0, 7)


def test_an_mpirun_that_is_not_open_mpi_is_named() -> None:
    with pytest.raises(SanityError, match=r"mpirun is not Open MPI \(it says 'HYDRA build"):
        p.parse_mpirun_version("HYDRA build details:\n    Version: 4.0.2\n")


def test_command_line_golden_open_mpi_4_1() -> None:
    """Debian 12's Open MPI 4.1 (ORTE): --oversubscribe, the `vader` shared-memory BTL."""
    cfg = drv.HpccConfig(n=2000, nb=128, processes=2, threads=1, bind="none", timeout_s=1800)
    mpi = drv.MpiLaunch(_version("mpirun-version-debian12.txt"), "net")
    assert drv.hpcc_script("/tmp/hpcc-x", cfg, mpi) == (
        "cd /tmp/hpcc-x && exec env TMPDIR=/tmp/hpcc-x OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1"
        " OPENBLAS_VERBOSE=2 HWLOC_COMPONENTS=-gl timeout -k 10 1800"
        " unshare --net sh -c 'ip link set lo up && exec mpirun"
        " --allow-run-as-root --bind-to none --mca pml ob1 --mca osc ^ucx"
        " --oversubscribe --mca btl self,vader"
        " --mca btl_vader_single_copy_mechanism none"
        " --mca btl_vader_backing_directory /tmp/hpcc-x -np 2 hpcc'")


def test_command_line_golden_open_mpi_5() -> None:
    """Debian 13's Open MPI 5 (PRRTE): oversubscription is a --map-by modifier, the BTL is `sm`;
    and the user namespace way, for a container without CAP_SYS_ADMIN."""
    cfg = drv.HpccConfig(n=2000, nb=128, processes=2, threads=1, bind="core", timeout_s=60)
    mpi = drv.MpiLaunch(_version("mpirun-version-debian13.txt"), "user+net")
    assert drv.hpcc_script("/tmp/hpcc-x", cfg, mpi) == (
        "cd /tmp/hpcc-x && exec env TMPDIR=/tmp/hpcc-x OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1"
        " OPENBLAS_VERBOSE=2 HWLOC_COMPONENTS=-gl timeout -k 10 60"
        " unshare --user --map-root-user --net sh -c 'ip link set lo up &&"
        " exec mpirun --allow-run-as-root --bind-to core --mca pml ob1 --mca osc ^ucx"
        " --map-by :OVERSUBSCRIBE --mca btl self,sm"
        " --mca btl_sm_single_copy_mechanism none"
        " --mca btl_sm_backing_directory /tmp/hpcc-x -np 2 hpcc'")


def test_only_known_open_mpi_releases_and_ways() -> None:
    with pytest.raises(SanityError, match=r"Open MPI 3\.1\.6 is not one isotax knows"):
        drv.MpiLaunch((3, 1, 6), "net")
    with pytest.raises(ValueError, match=r"netns must be one of own, net, user[+]net"):
        drv.MpiLaunch((4, 1, 4), "host")


class _Answers:
    """An instance whose execs answer from a table keyed by argv's first words."""

    scratch = "/tmp"
    socket_stack = SocketStack.LINUX

    def __init__(self, answers: dict[tuple[str, ...], tuple[int, str, str]],
                 reach: Reach = Reach.HOST) -> None:
        self.answers = answers
        self.reach = reach
        self.calls: list[tuple[str, ...]] = []

    def facts(self) -> Facts:
        return Facts(kind="runc", reach=self.reach)

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        a = tuple(argv)
        self.calls.append(a)
        for key, (rc, out, err) in self.answers.items():
            if a[:len(key)] == key:
                return Completed(a, rc, out, err, 0.01)
        raise AssertionError(f"unexpected exec {a}")


VERSION_13 = (0, (DATA / "hpcc" / "mpirun-version-debian13.txt").read_text(), "")
NO_NETNS = (1, "", "unshare: unshare failed: Operation not permitted\n")


def test_the_first_way_to_a_private_namespace_that_works_is_taken() -> None:
    inst = _Answers({("mpirun", "--version"): VERSION_13, ("unshare", "--net"): NO_NETNS,
                     ("unshare", "--user"): (0, "", "")})
    assert drv.mpi_launch(inst) == drv.MpiLaunch((5, 0, 7), "user+net")  # type: ignore[arg-type]
    # Each probe makes its namespace and raises its loopback, as the run will.
    lo_up = ("sh", "-c", "ip link set lo up")
    assert inst.calls[1:] == [("unshare", "--net", *lo_up),
                              ("unshare", "--user", "--map-root-user", "--net", *lo_up)]


@pytest.mark.parametrize("reach", [r for r in Reach if r is not Reach.HOST])
def test_a_network_of_its_own_keeps_mpirun_as_it_is(reach: Reach) -> None:
    """Off the host's network mpirun's wildcard reaches the environment's own network alone:
    no namespace is made (gVisor's netstack cannot listen on one's loopback), none probed."""
    inst = _Answers({("mpirun", "--version"): VERSION_13}, reach)
    inst.socket_stack = SocketStack.GVISOR_NETSTACK
    mpi = drv.mpi_launch(inst)  # type: ignore[arg-type]
    assert mpi == drv.MpiLaunch((5, 0, 7), "own")
    assert inst.calls == [("mpirun", "--version")]
    assert mpi.labels() == {"mpi": "Open MPI 5.0.7", "mpi_netns": "own"}
    cfg = drv.HpccConfig(n=400, nb=64, processes=2, threads=1, bind="none", timeout_s=60)
    script = drv.hpcc_script("/tmp/h", cfg, mpi)
    assert "unshare" not in script and " sh -c " not in script
    assert script.endswith(" timeout -k 10 60 mpirun --allow-run-as-root --bind-to none"
                           " --mca pml ob1 --mca osc ^ucx --map-by :OVERSUBSCRIBE"
                           " --mca btl self,sm --mca btl_sm_single_copy_mechanism none"
                           " --mca btl_sm_backing_directory /tmp/h -np 2 hpcc")


def test_gvisors_hostinet_is_not_applicable_before_any_namespace_is_tried() -> None:
    """On the host's network but in gVisor's hostinet, where mpirun cannot start and
    `unshare --net` hangs: n/a at once, nothing probed."""
    inst = _Answers({("mpirun", "--version"): VERSION_13})
    inst.socket_stack = SocketStack.GVISOR_HOSTINET
    with pytest.raises(NotApplicable, match="hostinet"):
        drv.mpi_launch(inst)  # type: ignore[arg-type]
    assert inst.calls == [("mpirun", "--version")]


def test_no_private_namespace_is_not_applicable_with_the_reason() -> None:
    inst = _Answers({("mpirun", "--version"): VERSION_13, ("unshare",): NO_NETNS})
    with pytest.raises(NotApplicable, match=r"binds every address .* shares the host's network"
                       r".* fix: allow unshare .* network of its own .*"
                       r"unshare --net: unshare: unshare failed: Operation not permitted"):
        drv.mpi_launch(inst)  # type: ignore[arg-type]


def test_bad_params_say_what_is_wrong() -> None:
    from isotax.workloads.linpack import Linpack

    with pytest.raises(ValueError, match="bind must be one of none, core"):
        drv.HpccConfig(n=1000, nb=128, processes=2, threads=1, bind="socket", timeout_s=10)
    with pytest.raises(ValueError, match="n = 10 is below 100"):
        drv.param({"n": 10}, Linpack.params, "n")
    with pytest.raises(ValueError, match="n = 'big' should be int"):
        drv.param({"n": "big"}, Linpack.params, "n")
    with pytest.raises(ValueError, match="bind = 'socket' is not one of: none, core"):
        drv.param({"bind": "socket"}, Linpack.params, "bind")
    assert drv.param({}, Linpack.params, "nb") == 128


def test_workloads_registered_with_params() -> None:
    from isotax import protocols

    REGISTRY = protocols.workloads()
    for name in ("linpack", "stream", "randomaccess"):
        names = {s.name for s in REGISTRY[name].params}
        assert {"n", "nb", "processes", "threads", "bind", "timeout_s"} <= names
    assert {s.name for s in REGISTRY["stream"].params} >= {"variant"}


# ------------------------------------------------------- SIGILL in the untuned VM, explained


SIGILL = DATA / "hpcc-sigill"


def test_sigill_of_opteron_kernels_on_qemu64_is_explained() -> None:
    """Captured in the untuned VM (qemu64: AuthenticAMD family 15, no 3DNow!): OpenBLAS
    picked Opteron and its femms trapped (tests/data/hpcc-sigill)."""
    guest = (SIGILL / "guest-cpuinfo.txt").read_text()
    core = p.parse_openblas_core((SIGILL / "guest-openblas-core.txt").read_text())
    assert core == "Opteron"
    why = p.why_sigill(guest, core)
    assert why is not None and "femms" in why and "AMD family 15" in why and "kvm64" in why
    # other kernels, or a host that is not AMD family 15 without 3DNow!, are not this trap
    assert p.why_sigill(guest, "Prescott") is None
    assert p.why_sigill((SIGILL / "host-cpuinfo.txt").read_text(), "Opteron") is None
    assert p.why_sigill(guest.replace("3dnowprefetch", "3dnowprefetch 3dnow"), core) is None
