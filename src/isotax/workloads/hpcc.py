"""Shared driver for the HPC Challenge workloads (linpack, stream, randomaccess).

The tool is Debian's `hpcc` 1.5.0 (HPL 2.0 inside HPCC) linked against libblas.so.3, which
update-alternatives points at OpenBLAS (libopenblas0-pthread); `blas_library()` checks with
`ldd` inside each environment which library that really is, and every sample carries it.

Why every workload runs the whole suite: hpcc has no way to select tests. `HPCC_Init()`
sets every `Run*` flag to 1 unconditionally and hpccinf.txt has no line for it (only extra
PTRANS sizes); hpccmemf.txt only sizes the default HPL problem when hpccinf.txt is absent.
The sizes of the other tests are derived from HPL's N: each rank gets N^2 * 8 / ranks bytes,
STREAM uses a third of that per vector, RandomAccess the largest power-of-two table of 8-byte
words that fits in it.
So N is the one knob, and each workload runs hpcc with the N that suits it (its `n` param) and
reads only its own metric; the rest of the output is kept in the test data, not stored.
The fair part: the command line, environment variables, input file and size are byte for byte
the same in every environment with the same Open MPI release (4.1 and 5 name a few options
differently: `mpirun_options`), but for how mpirun gets its network namespace (below), which
changes nothing the ranks do, so each environment runs exactly the same program.

Measured natively here (2 vCPUs, OpenBLAS SkylakeX kernels, 2 ranks x 1 thread, wall time of
the whole hpcc run, noisy host): N=1000 ~0.5-1 s, N=2000 ~1-2 s, N=3000 ~9-15 s, N=6000
~50 s; the time above N~2500 goes mostly to the MPI RandomAccess tests (up to their 60 s time
bound each), not to HPL. N=2000 is the quick default: 10-50x slower under TCG is roughly 10-100 s.
At N=2000 STREAM's arrays are 16 MB per rank: larger than L2, inside this host's big L3, so the
quick size measures cache-resident bandwidth; DRAM bandwidth needs 3 vectors well above the
last-level cache (N of 10^4 and more), which is a long run.

MPI settings (identical in every environment, chosen to work in containers and VMs):
`--mca pml ob1 --mca btl self,vader` (5: `self,sm`): shared-memory transport only (no UCX,
whose transport choice differs with what a sandbox exposes);
`btl_vader_single_copy_mechanism none`: no CMA (process_vm_readv needs ptrace rights that
container runtimes withhold); the vader backing
files and Open MPI's session directory go to the run's own tmpfs directory (not a small
container /dev/shm); `--bind-to none` by default (param `bind`), because binding depends on
what hwloc sees, which differs between a container's cpuset and a VM's vCPUs. `timeout` inside
the environment stops mpirun with SIGTERM, which Open MPI passes to the ranks.
Waiting ranks spin (Open MPI's default): `--mca mpi_yield_when_idle 1` was measured here and
is worse, most of all next to a CPU hog (HPL 10-21 vs 38-40 GFLOPS at N=2000), so it is not set.

`HWLOC_COMPONENTS=-gl` (hwloc's own variable: no MCA parameter reaches hwloc's plugins): mpirun
discovers the topology with hwloc 2.9, whose `gl` plugin (libhwloc-plugins) looks for GPUs
behind X servers by calling XOpenDisplay(":0.0") ... (":9.0"). With no X socket, libxcb falls
back to TCP and resolves "localhost" each time, about 20 lookups per mpirun. Natively /etc/hosts
answers them. The image's rootfs has no /etc/hosts and runc/crun add none, so in a container
every lookup goes to the DNS server in /etc/resolv.conf, which here loses one reply in about
30 (glibc sends the A and AAAA queries together). One lost reply costs glibc's 5 s resolver
timeout, so about 3 container runs in 4 took 5.06 s instead of 0.06 s for `mpirun -np 2
hostname`. That is 5 s of each container cell at N=1000 spent before hpcc started, outside
any measured figure. Without `gl`, mpirun starts in 0.05 s in runc as natively. In the VM
under TCG, start-up drops from 0.75-0.8 s to 0.65 s. hpcc runs on CPUs and uses no GPU, so
dropping GL devices from the topology changes nothing it measures, and the variable is set in
every environment.

Nothing on a wildcard (issue 40). mpirun's out-of-band listener (Open MPI 4.1's ORTE, 5's
PRRTE) binds 0.0.0.0 and :: on ports of its own choosing, unconditionally in both releases
(oob_tcp_listener.c binds INADDR_ANY and in6addr_any; `oob_tcp_if_include lo` changes only the
addresses it advertises, and 5 then refuses to start: "No network interfaces were found"); 5's
PMIx server listens on the first non-loopback address as well. Measured natively (4.1.4) and in
a Debian 13 chroot (5.0.7): 3 listeners per mpirun, 2 of them wildcards. An environment with a
network of its own (a bridge, a tap, a pod's network, none) keeps mpirun in it: its wildcard
reaches that network alone, the environment's own address. On the host's network (native, a
container or pod on the host network) mpirun runs in a network namespace of its own with no
link out of it (`NETNS`, `NETNS_SETUP`): its sockets are reachable from that namespace alone,
and the ranks need no network (shared-memory BTL, no TCP BTL). `unshare --net` needs
CAP_SYS_ADMIN (natively as root); a container with the usual capabilities gets the same inside
a new user namespace. Where no namespace can be made (a seccomp profile that keeps unshare to
CAP_SYS_ADMIN), the point is not applicable, never run exposed. Only the host's network gets
the namespace because elsewhere it costs and breaks what it need not: on gVisor's netstack PMIx
cannot listen on a namespace's loopback ("The PMIx server's listener thread failed to start")
and linpack in a user+net namespace inside the sandbox hung for 9 minutes; Docker's default
seccomp profile refuses the user namespace, which made hpcc n/a in Docker containers. Start-up
measured natively (4.1, `-np 2 true`, one run each): 0.29 s in its own namespace, 0.35 s in
the user-namespace way, 0.36 s without one.

The environment's clock must be past its first second (`wait_for_mpi_clock`, before every
mpirun, in every environment). Open MPI 4.1's MPI_Wtime (libmpi 4.1.4) reads CLOCK_MONOTONIC and
measures from an origin it sets on its first call, taking `origin.tv_sec == 0` to mean "not set
yet": while the clock reads under 1 s, every call resets the origin and returns 0, and the first
call after 1 s resets it once more. hpcc times everything with MPI_Wtime. Its first test,
MPIRandomAccess, estimates from a timed sample how many updates fit in its time bound
(time_bound.c: bound / (sample time / sample updates)); a sample timed as 0 divides the bound by
0 and gives a nonsense count, and the ranks die with SIGSEGV in an update loop, reading past
their buffer (mpirun exits 139). HPL's and STREAM's times would be as wrong. Natively and in a
container the clock is the host's, hours past boot. gVisor's is not (isotax's gvisor kind, and
an engine's runsc): the Sentry starts the sandbox's CLOCK_MONOTONIC at 0 when it boots (by
design; gVisor has no time namespace offsets either), and the sandbox is ready at about 0.1 s of
its own time, so an hpcc run started at once made its first MPI_Wtime calls inside that second.
Measured with the pinned runsc (bridge network, n=400): mpirun started 0.2-0.7 s after the start
was asked for died with SIGSEGV in 12 of 15 fresh sandboxes, started at 1.25 s it passed in 3 of
3, and a second run in the same sandbox passed (2 of 2); runsc's
--systrap-disable-syscall-patching and --systrap-disable-fast-path changed nothing. Until
HWLOC_COMPONENTS=-gl, mpirun's 5 s DNS timeouts had hidden it. A VM's clock starts at its own
boot, so a fast one could be inside that second too. The wait runs inside the environment, by
its own clock (an exec of python3, which the image has for the VM's agent), outside the timed
mpirun; where the clock is past 1 s it returns at once, and the mpirun command stays the same
everywhere. Waiting in gVisor's start() instead would add up to a second to every gVisor start
that the startup workload times.
"""

from __future__ import annotations

import math
import shlex
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from isotax.image.recipe import ImageHook
from isotax.model import NotApplicable, Sample, SanityError
from isotax.parsers.hpcc import parse_ldd, parse_mpirun_version, parse_openblas_core, why_sigill
from isotax.protocols import (
    ExecError,
    FigureHints,
    Instance,
    LoadGen,
    Need,
    Needs,
    Params,
    ParamSpec,
    Port,
    Reach,
    SocketStack,
)
from isotax.workloads.base import BaseWorkload, put_text

# The versions that make a result: hpcc itself, the BLAS it really loads, and the MPI.
TOOLS: dict[str, tuple[str, ...]] = {
    "hpcc": ("dpkg-query", "-W", "-f=${Version}", "hpcc"),
    "libopenblas0-pthread": ("dpkg-query", "-W", "-f=${Version}", "libopenblas0-pthread"),
    "openmpi-bin": ("dpkg-query", "-W", "-f=${Version}", "openmpi-bin"),
}

QUICK_N = 2000
HOSTINET_MPI_REASON = (
    "gVisor with network = \"host\" (hostinet) cannot run mpirun: hostinet refuses the "
    "SIOCGIFADDR ioctl (ENOTTY) and the sandbox has no /proc/net/if_inet6, so PMIx finds no "
    "interface address for its server's TCP listener (\"The PMIx server's listener thread "
    "failed to start\"); use network = \"bridge\" (gVisor's netstack) for the hpcc workloads")
# mpirun's own words for it (Open MPI 4.1 with PMIx 4.2).
PMIX_LISTENER_FAILED = "The PMIx server's listener thread failed to start"
# hwloc's discovery without its X/OpenGL plugin: see the module docstring (5 s DNS timeouts).
HWLOC_COMPONENTS = "-gl"
BIND_CHOICES = ("none", "core")
# Where mpirun runs (module docstring, "Nothing on a wildcard"). "own": the environment's own
# network namespace, as it is (an environment with a network of its own: its wildcard reaches
# only that network). Elsewhere (on the host's network) a namespace of its own with no link out
# of it, made by unshare (util-linux): with CAP_SYS_ADMIN (natively as root) or, without it (a
# container with the usual capabilities on the host network), inside a new user namespace that
# maps the caller to root.
NETNS: dict[str, tuple[str, ...]] = {
    "own": (),
    "net": ("unshare", "--net"),
    "user+net": ("unshare", "--user", "--map-root-user", "--net"),
}
# Set up inside a new namespace before mpirun starts: its loopback starts down.
NETNS_SETUP = "ip link set lo up"


NO_PRIVATE_NETNS = (
    "mpirun's out-of-band listener binds every address (0.0.0.0 and ::, in Open MPI 4.1 and 5 "
    "alike, with no setting to change it), this environment shares the host's network, and it "
    "cannot give mpirun a network namespace of its own; fix: allow unshare there "
    "(CAP_SYS_ADMIN, or user namespaces: a seccomp profile that permits unshare) and install "
    "iproute2's ip, or run the environment on a network of its own")
# MPI_Wtime (Open MPI 4.1) returns 0 until the environment's CLOCK_MONOTONIC reads 1 s (module
# docstring); mpirun starts only after that.
MPI_CLOCK_MIN_S = 1.0
# Run inside the environment by python3: sleep, by the environment's own CLOCK_MONOTONIC (which
# time.sleep also uses), until that clock reads at least MPI_CLOCK_MIN_S; print the clock
# before and after, in seconds.
CLOCK_WAIT_PY = (
    "import time\n"
    "c = time.CLOCK_MONOTONIC\n"
    "t0 = t = time.clock_gettime(c)\n"
    f"while t < {MPI_CLOCK_MIN_S!r}:\n"
    f"    time.sleep({MPI_CLOCK_MIN_S!r} - t)\n"
    "    t = time.clock_gettime(c)\n"
    "print(f'{t0:.6f} {t:.6f}')\n"
)


def mpi_unsupported(stack: SocketStack) -> str | None:
    """Why MPI (mpirun and its PMIx server) cannot run on an instance whose sockets `stack`
    serves; None where nothing known stops it. Pure."""
    return HOSTINET_MPI_REASON if stack is SocketStack.GVISOR_HOSTINET else None


def common_params(n_default: int, n_help: str) -> tuple[ParamSpec, ...]:
    """The parameters every hpcc workload takes; `n` is the one that sizes every test."""
    return (
        ParamSpec("n", int, n_default, n_help, minimum=100),
        ParamSpec("nb", int, 128, "HPL/PTRANS block size (OpenBLAS does well with 128-256)",
                  minimum=1),
        ParamSpec("processes", int, 0, "MPI ranks; 0 = every CPU the environment has (nproc)",
                  minimum=0),
        ParamSpec("threads", int, 1, "OpenBLAS threads per rank (OPENBLAS_NUM_THREADS)",
                  minimum=1),
        ParamSpec("bind", str, "none", "Open MPI --bind-to: none or core", choices=BIND_CHOICES),
        ParamSpec("timeout_s", float, 1800.0, "limit for one hpcc run, seconds", minimum=1),
    )


def param(params: Params, specs: Sequence[ParamSpec], name: str) -> Any:
    """A parameter's value, its default when the caller leaves it out, checked against its
    spec (the plan checks the same way; this covers workloads driven without a plan)."""
    spec = next(s for s in specs if s.name == name)
    value = params.get(name, spec.default)
    problem = spec.problem(value)
    if problem:
        raise ValueError(f"parameter {name} = {problem}")
    return spec.type(value)


@dataclass(frozen=True)
class HpccConfig:
    n: int
    nb: int
    processes: int  # resolved: > 0
    threads: int
    bind: str
    timeout_s: float

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise ValueError("hpcc needs at least one MPI process")
        if self.bind not in BIND_CHOICES:
            raise ValueError(f"bind must be one of {', '.join(BIND_CHOICES)}, not {self.bind!r}")


def process_grid(processes: int) -> tuple[int, int]:
    """HPL's P x Q grid: as square as possible with P <= Q (HPL's tuning advice)."""
    p = max(d for d in range(1, math.isqrt(processes) + 1) if processes % d == 0)
    return p, processes // p


def hpccinf_text(n: int, nb: int, p: int, q: int, threshold: float = 16.0) -> str:
    """hpccinf.txt: HPL.dat's 31 lines (lines 3-4 ignored by hpcc) plus PTRANS's 4 lines.
    One N, one NB, one grid; HPL's other settings are hpcc's sample file's."""
    lines = [
        "HPLinpack benchmark input file",
        "written by isotax",
        "HPL.out      output file name (if any)",
        "8            device out (6=stdout,7=stderr,file)",
        "1            # of problems sizes (N)",
        f"{n}         Ns",
        "1            # of NBs",
        f"{nb}          NBs",
        "0            PMAP process mapping (0=Row-,1=Column-major)",
        "1            # of process grids (P x Q)",
        f"{p}            Ps",
        f"{q}            Qs",
        f"{threshold}         threshold",
        "1            # of panel fact",
        "2            PFACTs (0=left, 1=Crout, 2=Right)",
        "1            # of recursive stopping criterium",
        "4            NBMINs (>= 1)",
        "1            # of panels in recursion",
        "2            NDIVs",
        "1            # of recursive panel fact.",
        "1            RFACTs (0=left, 1=Crout, 2=Right)",
        "1            # of broadcast",
        "1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)",
        "1            # of lookahead depth",
        "1            DEPTHs (>=0)",
        "2            SWAP (0=bin-exch,1=long,2=mix)",
        "64           swapping threshold",
        "0            L1 in (0=transposed,1=no-transposed) form",
        "0            U  in (0=transposed,1=no-transposed) form",
        "1            Equilibration (0=no,1=yes)",
        "8            memory alignment in double (> 0)",
        "##### This line (no. 32) is ignored (it serves as a separator). ######",
        "0            Number of additional problem sizes for PTRANS",
        "1000         values of N",
        "0            number of additional blocking sizes for PTRANS",
        "64           values of NB",
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class MpiLaunch:
    """How mpirun starts in one environment: the Open MPI release there (4.1 and 5 name their
    options differently) and the `NETNS` way it gets its network namespace."""

    version: tuple[int, int, int]
    netns: str

    def __post_init__(self) -> None:
        if self.version[0] not in (4, 5):
            raise SanityError(f"Open MPI {'.'.join(map(str, self.version))} is not one isotax "
                              "knows (4.1: Debian 12, 5.0: Debian 13); fix: install one of those")
        if self.netns not in NETNS:
            raise ValueError(f"netns must be one of {', '.join(NETNS)}, not {self.netns!r}")

    def labels(self) -> dict[str, str]:
        return {"mpi": "Open MPI " + ".".join(map(str, self.version)), "mpi_netns": self.netns}


def mpirun_options(version: tuple[int, int, int], rundir: str) -> list[str]:
    """The options that differ between Open MPI 4.1 (ORTE) and 5 (PRRTE) for the same launch:
    oversubscription (5 took it into --map-by) and the shared-memory BTL (4.1's `vader` is 5's
    `sm`, its parameters renamed with it). Pure."""
    if version[0] >= 5:
        return ["--map-by", ":OVERSUBSCRIBE", "--mca", "btl", "self,sm",
                "--mca", "btl_sm_single_copy_mechanism", "none",
                "--mca", "btl_sm_backing_directory", rundir]
    return ["--oversubscribe", "--mca", "btl", "self,vader",
            "--mca", "btl_vader_single_copy_mechanism", "none",
            "--mca", "btl_vader_backing_directory", rundir]


def hpcc_script(rundir: str, cfg: HpccConfig, mpi: MpiLaunch, program: str = "hpcc") -> str:
    """The shell command run inside the environment (same string everywhere but the path, for
    one Open MPI release and one `NETNS` way).
    OPENBLAS_VERBOSE=2 makes each rank print the kernel set OpenBLAS picked ("Core: ...",
    on stderr); HWLOC_COMPONENTS keeps mpirun's start-up off DNS; on the host's network
    mpirun runs in a network namespace of its own with no link out of it (module docstring).
    `timeout` -> unshare -> sh each exec the next, so mpirun is the process timeout signals."""
    d = shlex.quote(rundir)
    env = (f"TMPDIR={d} OPENBLAS_NUM_THREADS={cfg.threads} OMP_NUM_THREADS={cfg.threads} "
           f"OPENBLAS_VERBOSE=2 HWLOC_COMPONENTS={HWLOC_COMPONENTS}")
    # Words that need no quoting for sh, but the directory (quoted like everywhere here).
    mpirun = " ".join([
        "mpirun", "--allow-run-as-root", "--bind-to", cfg.bind,
        "--mca", "pml", "ob1", "--mca", "osc", "^ucx",
        *mpirun_options(mpi.version, d),
        "-np", str(cfg.processes), shlex.quote(program)])
    if not NETNS[mpi.netns]:
        return f"cd {d} && exec env {env} timeout -k 10 {cfg.timeout_s:.0f} {mpirun}"
    inner = f"{NETNS_SETUP} && exec {mpirun}"
    return (f"cd {d} && exec env {env} timeout -k 10 {cfg.timeout_s:.0f} "
            f"{shlex.join(NETNS[mpi.netns])} sh -c {shlex.quote(inner)}")


def mpi_launch(inst: Instance) -> MpiLaunch:
    """Ask the environment which Open MPI it has and where mpirun runs. An environment with a
    network of its own keeps mpirun there ("own": its wildcard reaches that network alone). On
    the host's network, the first `NETNS` way that works (`unshare --net` needs CAP_SYS_ADMIN,
    the user namespace way only that user namespaces are allowed), probed with the very setup
    the run will do; NotApplicable where neither does: mpirun would listen on every address
    of the host."""
    done = inst.exec(["mpirun", "--version"], timeout=60)
    if done.returncode != 0:
        raise ExecError(f"mpirun --version exited {done.returncode}: "
                        f"{(done.stderr or done.stdout).strip()[:200]}; fix: install openmpi-bin")
    version = parse_mpirun_version(done.stdout + done.stderr)
    if (why := mpi_unsupported(inst.socket_stack)) is not None:
        # gVisor's hostinet: no mpirun at all, and `unshare --net` there hangs (measured).
        raise NotApplicable(why)
    if inst.facts().reach is not Reach.HOST:
        return MpiLaunch(version, "own")
    tried = []
    for key, argv in NETNS.items():
        if not argv:
            continue
        probe = inst.exec([*argv, "sh", "-c", NETNS_SETUP], timeout=60)
        if probe.returncode == 0:
            return MpiLaunch(version, key)
        said = (probe.stderr or probe.stdout).strip().splitlines()
        tried.append(f"{shlex.join(argv)}: {said[-1][:120] if said else probe.returncode}")
    raise NotApplicable(f"{NO_PRIVATE_NETNS} ({'; '.join(tried)})")


def parse_clock_wait(stdout: str) -> tuple[float, float]:
    """CLOCK_WAIT_PY's line -> (the clock before the wait, after it), seconds. Pure."""
    words = stdout.split()
    try:
        before, after = float(words[-2]), float(words[-1])
    except (IndexError, ValueError):
        raise SanityError(f"the clock check printed {stdout.strip()[:200]!r}") from None
    if after < MPI_CLOCK_MIN_S:
        raise SanityError(f"the environment's CLOCK_MONOTONIC still reads {after:.3f} s after "
                          f"waiting for {MPI_CLOCK_MIN_S:g} s")
    return before, after


def wait_for_mpi_clock(inst: Instance) -> float:
    """Wait until the environment's CLOCK_MONOTONIC reads at least MPI_CLOCK_MIN_S, so that
    MPI_Wtime measures (module docstring); return the seconds waited (0 almost everywhere; up
    to about 0.9 s in a gVisor sandbox started just before)."""
    done = inst.exec(["python3", "-c", CLOCK_WAIT_PY], timeout=60)
    if done.returncode != 0:
        raise ExecError("cannot read the environment's CLOCK_MONOTONIC with python3 (exited "
                        f"{done.returncode}: {(done.stderr or done.stdout).strip()[-200:]}); "
                        "fix: install python3 (the image has it; natively, the host)")
    before, after = parse_clock_wait(done.stdout)
    return after - before


def resolve_processes(inst: Instance, requested: int) -> int:
    """`processes=0` means every CPU the environment shows (its cpuset, or the VM's vCPUs)."""
    if requested > 0:
        return requested
    done = inst.exec(["nproc"], timeout=60).check()
    try:
        return max(1, int(done.stdout.strip()))
    except ValueError:
        raise SanityError(f"nproc printed {done.stdout.strip()!r}") from None


def blas_library(inst: Instance) -> str:
    """The real file hpcc loads as libblas.so.3 inside this environment, following the
    update-alternatives symlinks, e.g. /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3.
    Raises ExecError with a fix when hpcc or its BLAS is missing."""
    script = 'p=$(command -v hpcc) || { echo "hpcc not installed" >&2; exit 127; }; ldd "$p"'
    done = inst.exec(["sh", "-c", script], timeout=120)
    if done.returncode != 0:
        raise ExecError("hpcc is not usable in this environment "
                        f"({(done.stderr or done.stdout).strip()[:200]}); "
                        "fix: install Debian's hpcc and libopenblas0-pthread")
    libs = parse_ldd(done.stdout)
    path = libs.get("libblas.so.3")
    if not path:
        raise ExecError("hpcc does not resolve libblas.so.3; fix: install libopenblas0-pthread")
    real = inst.exec(["readlink", "-f", path], timeout=60).check().stdout.strip()
    return real or path


def is_openblas(path: str) -> bool:
    return "openblas" in path.lower()


@dataclass(frozen=True)
class HpccRun:
    """One finished hpcc run: its output file and what the driver learned around it."""

    config: HpccConfig
    output: str  # hpccoutf.txt
    console: str  # mpirun's stdout + stderr (OpenBLAS's "Core:" lines go to stderr)
    wall_s: float  # host-measured, includes the environment's exec path and MPI start-up
    blas: str
    blas_core: str
    mpi: MpiLaunch

    def labels(self) -> dict[str, Any]:
        return {
            **self.mpi.labels(),
            "threads": self.config.threads,
            "bind": self.config.bind,
            "blas": self.blas,
            "blas_core": self.blas_core,
            "hpcc_wall_s": round(self.wall_s, 3),
        }


def run_hpcc(inst: Instance, cfg: HpccConfig) -> HpccRun:
    """Run hpcc once in a fresh directory of the instance's scratch (hpcc appends to
    hpccoutf.txt, so a reused directory would mix runs), read the output back, clean up."""
    blas = blas_library(inst)
    rundir = f"{inst.scratch}/hpcc-{uuid.uuid4().hex[:12]}"
    inst.exec(["mkdir", "-p", rundir], timeout=60).check()
    try:
        p, q = process_grid(cfg.processes)
        put_text(inst, f"{rundir}/hpccinf.txt", hpccinf_text(cfg.n, cfg.nb, p, q))
        mpi = mpi_launch(inst)
        wait_for_mpi_clock(inst)
        done = inst.exec(["sh", "-c", hpcc_script(rundir, cfg, mpi)],
                         timeout=cfg.timeout_s + 60)
        out = inst.exec(["cat", f"{rundir}/hpccoutf.txt"], timeout=120)
        if done.returncode != 0:
            why = "timed out" if done.returncode == 124 else f"exited {done.returncode}"
            if done.returncode == 132:  # 128 + SIGILL
                cpuinfo = inst.exec(["cat", "/proc/cpuinfo"], timeout=60).stdout
                known = why_sigill(cpuinfo, parse_openblas_core(done.stderr + done.stdout))
                if known:  # the environment's CPU model and this build cannot go together
                    raise NotApplicable(f"hpcc died with SIGILL: {known}")
                why += (" (SIGILL: the CPU lacks an instruction hpcc/OpenBLAS uses; give a "
                        "VM a newer cpu_model)")
            said = [ln for ln in (done.stderr + done.stdout).splitlines()
                    if ln.strip() and not ln.startswith("Core: ")]
            tail = " | ".join(said[-3:])
            raise SanityError(f"mpirun hpcc {why} (n={cfg.n}, np={cfg.processes}): {tail[:300]}")
        if out.returncode != 0:
            raise SanityError("hpcc exited 0 but wrote no hpccoutf.txt")
        return HpccRun(cfg, out.stdout, done.stdout + done.stderr, done.wall_s, blas,
                       parse_openblas_core(done.stderr + done.stdout), mpi)
    finally:
        inst.exec(["rm", "-rf", rundir], timeout=120)


def config_from(inst: Instance, params: Params, specs: Sequence[ParamSpec]) -> HpccConfig:
    return HpccConfig(
        n=param(params, specs, "n"),
        nb=param(params, specs, "nb"),
        processes=resolve_processes(inst, param(params, specs, "processes")),
        threads=param(params, specs, "threads"),
        bind=param(params, specs, "bind"),
        timeout_s=param(params, specs, "timeout_s"),
    )


def check_tools(inst: Instance) -> Mapping[str, str]:
    """For prepare(): fail early, with a fix, if hpcc/mpirun/BLAS are missing."""
    done = inst.exec(["sh", "-c", "command -v mpirun && command -v timeout"], timeout=60)
    if done.returncode != 0:
        raise ExecError("mpirun or timeout missing in this environment; "
                        "fix: install openmpi-bin and coreutils")
    return {"blas": blas_library(inst)}


# HPL must use an optimised BLAS, in the image as on the host: the image's alternatives are
# pinned to OpenBLAS, and hpcc must resolve its BLAS and LAPACK to it.
OPENBLAS = ImageHook(
    name="hpcc_blas",
    commands=tuple(("update-alternatives", "--set", f"{name}-x86_64-linux-gnu",
                    f"/usr/lib/x86_64-linux-gnu/openblas-pthread/{name}")
                   for name in ("libblas.so.3", "liblapack.so.3")),
    check=("ldd", "/usr/bin/hpcc"), keep="blas|lapack", expect="libopenblas",
    fail="hpcc in the image does not resolve its BLAS to OpenBLAS: check libopenblas0-pthread "
         "and the libblas.so.3 alternative")

class HpccWorkload(BaseWorkload):
    """What linpack, stream and randomaccess share: one full hpcc run with the plan's
    parameters, then each keeps its own metric (`samples`)."""

    version: ClassVar[str] = "1"
    tools: ClassVar[Mapping[str, Sequence[str]]] = TOOLS
    needs_loadgen: ClassVar[bool] = False
    params: ClassVar[Sequence[ParamSpec]]
    ports: ClassVar[Mapping[str, Port]] = {}
    packages: ClassVar[Sequence[str]] = ("hpcc", "libopenblas0-pthread", "openmpi-bin")
    image_hooks: ClassVar[Sequence[ImageHook]] = (OPENBLAS,)
    figures: ClassVar[FigureHints] = FigureHints(bars=True)

    def not_applicable(self, inst: Instance, params: Params) -> str | None:
        """mpirun cannot start where its PMIx server finds no interface address (gVisor on
        the host network)."""
        return mpi_unsupported(inst.socket_stack)

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        check_tools(inst)

    def host_needs(self, params: Params) -> Needs:
        """HPL's matrix, N^2 * 8 bytes: hpcc sizes STREAM and RandomAccess from the same."""
        n = int(param(params, self.params, "n"))
        return Needs(memory=Need(8 * n * n, ("n",), "HPL's N^2 * 8 byte matrix"))

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        result = run_hpcc(inst, config_from(inst, params, self.params))
        return self.samples(result, params)

    def samples(self, result: HpccRun, params: Params) -> list[Sample]:
        raise NotImplementedError
