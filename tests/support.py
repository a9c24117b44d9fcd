"""Helpers both test rooms share (tests/unit and tests/integration); fixtures live in
conftest.py. Skips that name exactly what the machine lacks, the leak lines a test may have
left, running instances of real environments and real runs, the small test workloads and
plans the runner tests register, and the stored runs the report tests render."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from isotax import protocols
from isotax.environments.base import EnvironmentBase
from isotax.host.facts.description import EnvironmentDescription
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellKey, CellStatus, Sample, SanityError
from isotax.parsers import distributions
from isotax.parsers.fio import fio_samples
from isotax.parsers.sockperf import parse_sockperf_full_log
from isotax.plan import parse_plan
from isotax.protocols import (
    NETWORKS,
    STORAGES,
    Availability,
    EnvSpec,
    FigureHints,
    Instance,
    Isolation,
    LeakFinder,
    LoadGen,
    Params,
    ParamSpec,
    Port,
    Unavailable,
    VersionCommand,
)
from isotax.run.runner import Runner
from isotax.run.schedule import new_run_id
from isotax.store.base import CellOutcome, EnvRecord
from isotax.store.sqlite import SQLiteStore
from isotax.telemetry.summary import TelemetrySummary
from isotax.workloads.base import BaseWorkload

ROOT = Path(__file__).resolve().parent.parent  # the repository
DATA = ROOT / "tests" / "data"  # real tool output and captures, shared by both rooms

# -- skips: what this machine lacks ------------------------------------------------------------

def why_not_root_and(*tools: str,
                     root_for: str = "containers, network namespaces and the VM's tap",
                     ) -> str | None:
    """Why this host cannot run a test that needs root and `tools`; None if it can."""
    if os.geteuid() != 0:
        return f"needs root for {root_for}"
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed (scripts/setup.sh installs them)"
    return None


def requires_root_and(*tools: str, root_for: str | None = None) -> pytest.MarkDecorator:
    """Skips the test, saying why, where this host lacks root or one of `tools`."""
    reason = (why_not_root_and(*tools) if root_for is None
              else why_not_root_and(*tools, root_for=root_for))
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def image_where(why_not: Callable[[], str | None]) -> Any:
    """A module's `image` fixture: the suite's image (integration/conftest.py), where the host
    also has what the module needs; skips with `why_not()`'s reason where it does not. Use it as
    `image = image_where(_why_not)` at the module's top level."""

    @pytest.fixture(scope="module", name="image")
    def image_fixture(image: ImageArtifacts) -> ImageArtifacts:
        if (why := why_not()) is not None:
            pytest.skip(why)
        return image

    return image_fixture


def ours(*words: str) -> list[str]:
    """The leftovers (run.leaks.find_leaks) that name any of `words`: one test's own, since
    other test sessions may run beside this one on a shared host."""
    from isotax.run.leaks import find_leaks

    return [x for x in find_leaks() if any(w in x for w in words)]


# -- real environments and real runs -----------------------------------------------------------


@contextlib.contextmanager
def started(name: str, kind: str, network: str, image: ImageArtifacts,
            workdir: Path, options: dict[str, Any] | None = None) -> Iterator[Instance]:
    """A running instance of `kind`, stopped afterwards; skips, with the reason, where this
    host lacks the environment."""
    # gvisor: available() names the runsc it lacks (isotax's own build, not on PATH).
    tool = {"native": None, "qemu": "qemu-system-x86_64", "docker": "dockerd", "gvisor": None,
            "microvm": "qemu-system-x86_64", "vm9p": "qemu-system-x86_64",
            "nspawn": "systemd-nspawn", "pod": None}.get(kind, kind)
    if tool is not None and shutil.which(tool) is None:
        pytest.skip(f"{kind} is not installed (scripts/setup.sh installs it)")
    env = protocols.environments()[kind]()
    avail = env.available()
    if not avail.ok:
        pytest.skip(f"{kind} unavailable here: {avail}")
    inst = env.start(EnvSpec(name=name, kind=kind, image=image, workdir=workdir,
                             network=network, options=options or {}))
    try:
        yield inst
    finally:
        inst.stop()


@contextlib.contextmanager
def local_cluster(nodes: int = 1) -> Iterator[None]:
    """The local Kubernetes (isotax.host.kubernetes) for a test: the running one, or one
    started for the block and stopped after it (nothing of it left); skips, with the reason,
    where it is not built or a dead one's parts are left."""
    from isotax.host.kubernetes import cluster, teardown

    why = cluster.missing()
    if why:
        pytest.skip(why)
    if cluster.supervisor_pid() is not None:
        yield
        return
    if teardown.present():
        pytest.skip("a cluster isotax started is left on this host (`isotax cluster down`)")
    cluster.up(nodes=nodes)
    try:
        yield
    finally:
        assert cluster.down() == []


def running_in(inst: Instance, program: str) -> int:
    """Live (not zombie) processes named program inside inst."""
    done = inst.exec(["sh", "-c", 'cat /proc/[0-9]*/stat 2>/dev/null | awk \'{print $2, $3}\' '
                      '| grep -c "^($1) [^Z]"; true', "sh", program], 60)
    return int(done.stdout.strip() or 0)


@contextlib.contextmanager
def ran(plan_text: str, image: ImageArtifacts, tmp_path: Path,
        host: Mapping[str, Any] | None = None,
        status: str = "complete") -> Iterator[tuple[SQLiteStore, str]]:
    """plan_text run through the real Runner into a fresh store under tmp_path: (store, run
    id) once the run ended with `status`; the store is closed afterwards."""
    plan = parse_plan(plan_text)
    store = SQLiteStore(tmp_path / "isotax.db")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, plan_text, plan.seed, dict(host or {"hostname": "h"}))
    try:
        got = Runner(plan, plan_text, store, image, log=lambda m: None).run(run_id)
        assert got == status, got
        yield store, run_id
    finally:
        store.close()


def committed_cells(db: Path) -> list[tuple[int, str, str]]:
    """(id, ident, status) of every cell a run's SQLite store at db committed, in order; []
    before the store or its tables exist (a run in another process still starting)."""
    import sqlite3

    if not db.exists():
        return []
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT id, ident, status FROM cells ORDER BY id").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def snapshot(root: Path, rels: list[str]) -> dict[str, bytes | None]:
    """The bytes of each file under root (None where there is none), to compare before/after."""
    return {r: (root / r).read_bytes() if (root / r).exists() else None for r in rels}


# -- test workloads and the plans that use them ------------------------------------------------
# Registered only by the fixtures that need them (conftest.py: echo_workload, spread).

class EchoCounter:
    """What EchoWorkload has done, and when it should fail: reset by conftest's echo_workload."""

    calls = 0
    interrupt_at: int | None = None
    fail_at: int | None = None


class EchoWorkload(BaseWorkload):
    """Runs a real command in the instance and reports its output as a number."""

    name: ClassVar[str] = "test-echo"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "test only"
    params: ClassVar[tuple[ParamSpec, ...]] = (ParamSpec("value", int, 7, "number to echo"),)
    tools: ClassVar[dict[str, tuple[str, ...]]] = {"sh": ("sh", "-c", "echo dash")}
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[dict[str, Port]] = {}
    packages: ClassVar[tuple[str, ...]] = ()
    figures: ClassVar[FigureHints] = FigureHints()

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        EchoCounter.calls += 1
        if EchoCounter.interrupt_at == EchoCounter.calls:
            raise KeyboardInterrupt
        if EchoCounter.fail_at == EchoCounter.calls:
            raise SanityError("checksum mismatch")
        out = inst.exec(["sh", "-c", f"echo {params['value']}"], timeout=10).check()
        return [Sample("value", float(out.stdout), "units")]


RUNNER_PLAN = """
name = "t"
seed = 3
repetitions = 3
warmups = 1
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "native2"
kind = "native"
[[workloads]]
name = "test-echo"
params = { value = [1, 2] }
"""


class SpreadWorkload(BaseWorkload):
    """A synthetic metric with a spread the test sets: a value drawn from a seeded normal
    distribution (mean 100, sd = spread x 100) goes through a real command in the instance
    (`sleep; echo`) and back. Not a benchmark: it controls the variance sequential verdicts
    see, which a real tool on this shared host cannot."""

    name: ClassVar[str] = "test-spread"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "test only: a synthetic value with a set spread"
    params: ClassVar[tuple[ParamSpec, ...]] = (
        ParamSpec("spread", float, 0.01, "relative sd of the value"),
        ParamSpec("sleep_s", float, 0.0, "seconds each run takes"),
    )
    tools: ClassVar[dict[str, tuple[str, ...]]] = {}
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[dict[str, Port]] = {}
    packages: ClassVar[tuple[str, ...]] = ()
    figures: ClassVar[FigureHints] = FigureHints()
    rng = random.Random(0)
    calls = 0
    interrupt_at: int | None = None

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        SpreadWorkload.calls += 1
        if SpreadWorkload.calls == SpreadWorkload.interrupt_at:
            raise KeyboardInterrupt
        value = abs(SpreadWorkload.rng.gauss(100.0, 100.0 * params["spread"]))
        out = inst.exec(["sh", "-c", f"sleep {params['sleep_s']}; echo {value!r}"],
                        timeout=30).check()
        return [Sample("value", float(out.stdout), "units")]


SEQUENTIAL_PLAN = """
name = "seq"
seed = 5
repetitions = 3
warmups = 0
{verdicts}
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "native2"
kind = "native"
[[workloads]]
name = "test-spread"
params = {params}
"""

AA_PLAN = """
name = "t-aa"
seed = 4
repetitions = 3
warmups = 0
aa = true
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "compress"
params = { corpus_mib = 2, threads = 1 }
"""


# -- stored runs the report tests render ------------------------------------------------------

FIGURES_PLAN = """
name = "figures"
repetitions = 3
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
[[workloads]]
name = "rr"
params = { proto = "udp" }
[[workloads]]
name = "fio"
params = { pattern = "randread" }
[[workloads]]
name = "redis"
params = { connections = [1, 10] }
[[workloads]]
name = "mysql"
params = { threads = [1, 8] }
"""

SLOWER = {"native": 1.0, "runc": 1.25}  # runc's latencies are 25% longer, its rates 20% lower


def scaled_cdf(cdf: list[list[float]], k: float) -> list[list[float]]:
    return [[round(v * k, 4), f] for v, f in cdf]


def figure_samples(workload: str, params: Mapping[str, Any], k: float) -> list[Sample]:
    """One repetition's samples: real fio and sockperf output, slowed by k; Redis and MySQL
    points whose latency grows with concurrency (the knee the figures should show)."""
    if workload == "fio":
        real = fio_samples((DATA / "fio" / "randread-4k-qd16.json").read_text())
        out = []
        for s in real:
            labels = dict(s.labels)
            if "clat_cdf_us" in labels:
                labels["clat_cdf_us"] = scaled_cdf(labels["clat_cdf_us"], k)
            value = s.value / k if s.higher_is_better else s.value * k
            out.append(Sample(s.metric, value, s.unit, s.higher_is_better, labels))
        return out
    if workload == "rr":
        rtts = parse_sockperf_full_log((DATA / "sockperf" / "full-log-udp.csv").read_text())
        cdf = scaled_cdf(distributions.from_values(rtts), k)
        return [Sample("transactions_per_s", 12000 / k, "trans/s", True),
                Sample("latency_p99_9_us", distributions.quantile(cdf, 0.999), "µs", False,
                       {"rtt_cdf_us": cdf, "broken_cdf_us": [[2.0, 0.5], [1.0, 1.0]]})]
    if workload == "redis":
        c = int(params["connections"])
        out = []
        for op in ("set", "get"):
            out += [Sample(f"{op}_requests_per_s", 50000 * c ** 0.5 / k, "req/s", True),
                    Sample(f"{op}_latency_p50_ms", 0.1 * c * k, "ms", False),
                    Sample(f"{op}_latency_p99_ms", 0.3 * c * k, "ms", False)]
        return out
    t = int(params["threads"])
    return [Sample("transactions_per_s", 400 * t ** 0.6 / k, "tx/s", True),
            Sample("latency_mean_ms", 2.5 * t ** 0.4 * k, "ms", False),
            Sample("latency_p95_ms", 4.0 * t ** 0.5 * k, "ms", False),
            Sample("host_cpu_utilization", min(95.0, 30.0 * t ** 0.5 * k), "%", False)]


POINTS = [("rr", {"proto": "udp"}), ("fio", {"pattern": "randread"}),
          ("redis", {"connections": 1}), ("redis", {"connections": 10}),
          ("mysql", {"threads": 1}), ("mysql", {"threads": 8})]


def figure_store(tmp_path: Path, run_id: str = "f1", slower: Mapping[str, float] = SLOWER,
                 hostname: str = "h", reps: int = 3) -> tuple[SQLiteStore, str]:
    """A stored run with every point the studies' figures need, in native and runc."""
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run(run_id, "figures", FIGURES_PLAN, 1, {"hostname": hostname, "cpus": 2})
    for env in slower:
        store.put_environment(EnvRecord(run_id, env, env, True, "",
                                        EnvironmentDescription.from_stored({}), {}, {}))
    for rep in range(1, reps + 1):
        for workload, params in POINTS:
            for env, k in slower.items():
                store.commit_cell(run_id, CellKey(env, workload, params, rep), "1",
                                  CellOutcome(CellStatus.OK, "",
                                              figure_samples(workload, params, k)), 0, 1)
    store.set_run_status(run_id, "complete", 2)
    return store, run_id


HOSTILE_HOST = "<script>alert('host')</script>\x1b[31m\x07"
HOSTILE_CPU = '"><img src=x onerror=alert(1)>'
HOSTILE_PLAN = """
name = "hostile"
description = "</pre><script>alert('plan')</script>"
repetitions = 2
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
[[workloads]]
name = "compress"
params = { corpus_mib = 1 }
"""


def hostile_store(tmp_path: Path) -> tuple[SQLiteStore, str]:
    """A stored run whose host name, CPU model and plan carry markup, with results."""
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r1", "hostile", HOSTILE_PLAN, 1,
                     {"hostname": HOSTILE_HOST, "cpu_model": HOSTILE_CPU, "cpus": 2})
    params = {"corpus_mib": 1, "level": 2, "seed": 1, "threads": 0}
    for rep, (a, b) in enumerate([(10.0, 9.0), (10.5, 9.2), (9.8, 9.1)], start=1):
        for env, v in (("native", a), ("runc", b)):
            store.commit_cell("r1", CellKey(env, "compress", params, rep), "1",
                              CellOutcome(CellStatus.OK, "",
                                          [Sample("throughput", v, "MB/s", True)]), 0, 1)
    store.set_run_status("r1", "complete", 2)
    return store, "r1"


def self_contained(page: str) -> None:
    """The page fetches nothing from outside and runs no script."""
    assert "<script" not in page.lower()
    assert not re.search(r"""\b(src|href)\s*=\s*["']?(https?:|//)""", page, re.I)
    assert "<link" not in page.lower() and "@import" not in page


# -- a run for the data exports (long format, results.json's schema) ----------------------------

LONG_PLAN = 'name = "long"\nrepetitions = 3\n'


def long_store(tmp_path: Path, run_id: str = "d1") -> tuple[SQLiteStore, str]:
    """A stored run with every kind of cell the exports carry: three metrics (one the
    environment's host CPU) at two compress levels in native, runc and an emulated qemu (3
    repetitions and a warm-up each, telemetry on native's and runc's), a failed cell, an n/a
    cell with other parameters (a text and a float one), an environment that did not run, and
    the run's phases. 26 cells, 74 rows of the long format (a cell without samples is one
    row)."""
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run(run_id, "long", LONG_PLAN, 1, {"hostname": "h", "cpus": 2})
    store.put_environment(EnvRecord(run_id, "native", "native", True, "",
                                    EnvironmentDescription.from_stored({}), {}, {"ready": 0}))
    store.put_environment(EnvRecord(run_id, "runc", "runc", True, "",
                                    EnvironmentDescription.from_stored({"network": "bridge"}), {},
                                    {"ready": 0.03}))
    store.put_environment(EnvRecord(run_id, "qemu", "qemu", True, "",
                                    EnvironmentDescription.from_stored(
                                        {"accelerator": "tcg", "emulated": "yes"}),
                                    {}, {}))
    store.put_environment(EnvRecord(run_id, "gone", "crun", False, "crun is not installed",
                                    EnvironmentDescription.from_stored({}), {}, {}))
    slower = {"native": 1.0, "runc": 1.1, "qemu": 5.0}
    for env, k in slower.items():
        cost = DATA / "cost" / f"{env}-compress-1.json"
        for level in (1, 9):
            params = {"level": level, "threads": 0}
            for rep in (0, 1, 2, 3):  # 0: the warm-up
                key = CellKey(env, "compress", params, max(rep, 1), warmup=rep == 0)
                watched = (TelemetrySummary.from_json(json.loads(cost.read_text())), {}) \
                    if cost.is_file() and rep else None
                samples = [Sample("throughput", (50.0 + rep) / level / k, "MB/s"),
                           Sample("ratio", 3.0 + level / 10, "x", False),
                           Sample("env_host_cpu_s", 0.1 * k, "s", False,
                                  {"by_program": {env: 0.1 * k}})]
                store.commit_cell(run_id, key, "1",
                                  CellOutcome(CellStatus.OK, "", samples, watched),
                                  100.0 + rep, 101.5 + rep)
    store.commit_cell(run_id, CellKey("runc", "compress", {"level": 9, "threads": 0}, 4), "1",
                      CellOutcome(CellStatus.FAILED, "SanityError: xz output size differs"),
                      110.0, 111.0)
    store.commit_cell(run_id, CellKey("qemu", "rr", {"proto": "udp", "seconds": 1.5}, 1), "1",
                      CellOutcome(CellStatus.NOT_APPLICABLE, "no network path to measure"),
                      112.0, 112.0)
    store.put_run_meta(run_id, "phases", {"wall_s": 60.0, "report_s": 1.0,
                                          "seconds": {"workload": 50.0, "store": 2.0}})
    store.set_run_status(run_id, "complete", 120.0)
    return store, run_id


class GoneEnvironment(EnvironmentBase):
    """test only: a kind that is never available here (as a runtime not installed is)."""

    kind: ClassVar[str] = "test-gone"
    description: ClassVar[str] = "test only: never available"
    isolation: ClassVar[Isolation] = Isolation.CONTAINER
    supports_numa: ClassVar[bool] = False
    leak_finders: ClassVar[tuple[LeakFinder, ...]] = ()
    options: ClassVar[tuple[ParamSpec, ...]] = ()
    networks: ClassVar[tuple[str, ...]] = NETWORKS
    storages: ClassVar[tuple[str, ...]] = STORAGES

    @classmethod
    def version_command(cls) -> VersionCommand | None:
        return None

    fix: ClassVar[str] = "install test-gone"  # what its refusal tells the user to do

    def available(self) -> Availability:
        return Availability.no(f"{self.kind} is not installed here", self.fix)

    def start(self, spec: EnvSpec) -> Instance:
        raise Unavailable(self.available())


# -- what isotax left, seen without asking isotax ------------------------------------------------

TEMP_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"))
_OWNER_VAR = b"ISOTAX_OWNER="


def owned_processes(ledger_prefix: str = "") -> list[str]:
    """"PID command line" of every process on this host (this one aside) whose environment
    names an isotax owner (ISOTAX_OWNER, which everything isotax starts inherits), or only
    the owner whose ledger name starts with ledger_prefix ("<pid>-"): read from /proc."""
    mark = _OWNER_VAR + ledger_prefix.encode()
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes()
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        if any(item.startswith(mark) for item in env.split(b"\0")):
            words = cmd.replace(b"\0", b" ").decode(errors="replace")
            out.append(f"{name} {words[:150]}")
    return out


def temp_entries() -> set[str]:
    """The isotax-named (itx-*) files and folders in the temporary folders."""
    return {str(p) for d in TEMP_DIRS if d.is_dir() for p in d.glob("itx-*")}
