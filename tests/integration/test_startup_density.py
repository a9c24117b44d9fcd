"""startup and density for real: fresh instances natively, in runc (bridge + NAT) and in the
QEMU VM (TCG here, labelled emulated), then nothing left behind; and the runner's launcher
stopping what a failing workload left running."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from support import image_where, ours, ran, started, why_not_root_and

from isotax import protocols
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import NamespaceLoadGen
from isotax.model import CellStatus, Sample, SanityError
from isotax.protocols import (
    PHASES,
    EnvSpec,
    FigureHints,
    Launcher,
    LoadGen,
    Params,
    ParamSpec,
    Port,
)
from isotax.run.launcher import EnvLauncher
from isotax.workloads.base import BaseWorkload, register
from isotax.workloads.density import Density
from isotax.workloads.pod_startup import PodStartup
from isotax.workloads.startup import Startup

ENVS = {"native": ("native", "host"), "runc-bridge": ("runc", "bridge"),
        "qemu": ("qemu", "bridge")}


def _why_not() -> str | None:
    return why_not_root_and("nsenter", "iptables", "redis-server", "redis-cli",
                            root_for="containers, network namespaces and the VM's tap")


image = image_where(_why_not)


@pytest.fixture(params=list(ENVS))
def launcher(request: pytest.FixtureRequest, image: ImageArtifacts,
             tmp_path: Path) -> Iterator[EnvLauncher]:
    kind, net = ENVS[request.param]
    name = f"test-launch-{request.param}"
    # The environment must work here at all (skips with the reason where it does not).
    with started(name, kind, net, image, tmp_path / "probe"):
        pass
    env = protocols.environments()[kind]()
    spec = EnvSpec(name=name, kind=kind, image=image, workdir=tmp_path / "launched",
                   network=net, memory_mib=1024 if kind == "qemu" else None)
    lau = EnvLauncher(env, spec, deadline=float("inf"))
    try:
        yield lau
    finally:
        lau.close()
    assert lau.live == 0 and not any((tmp_path / "launched").glob("launch-*"))
    assert ours(name, "redis") == []


def _emulated(launcher: EnvLauncher) -> bool:
    return launcher.spec.kind == "qemu"


@pytest.mark.integration
def test_startup_phases(launcher: EnvLauncher, loadgen: NamespaceLoadGen) -> None:
    # The emulated VM boots in seconds: two starts, ready when it takes a command; elsewhere
    # three starts, ready when a redis-server in it answers PING from the load generator.
    vm = _emulated(launcher)
    params = {"starts": 2 if vm else 3, "ready": "exec" if vm else "redis",
              "ready_timeout_s": 120.0}
    samples = {s.metric: s for s in Startup().launch_and_measure(launcher, params, loadgen)}
    assert set(samples) == {f"{p}{s}_ms" for p in (*PHASES, "stop") for s in ("", "_p95")}
    per = samples["ready_ms"].labels["per_start_ms"]
    assert len(per["ready"]) == params["starts"]
    for i in range(params["starts"]):  # every start in order, each phase after the request
        assert 0 <= per["create"][i] <= per["started"][i] <= per["ready"][i]
        assert 0 <= per["first_instruction"][i] <= per["ready"][i]
    assert samples["ready_ms"].value <= samples["ready_p95_ms"].value
    if vm:
        assert "kernel" in per and samples["first_instruction_ms"].value > 500
    else:
        # A redis-server must start and answer after the instance is up.
        assert samples["ready_ms"].value > samples["first_instruction_ms"].value
        assert per["instance_ready"][0] < per["ready"][0]


@pytest.mark.integration
def test_density_counts_every_instance_and_removes_them(launcher: EnvLauncher) -> None:
    n = 2 if _emulated(launcher) else 3
    params = {"max_instances": n, "min_available_mib": 512, "settle_s": 0.5}
    samples = {s.metric: s for s in Density().launch_and_measure(launcher, params, None)}
    assert samples["instances"].value == n
    curve = samples["instances"].labels["curve"]
    assert [c["instances"] for c in curve] == list(range(1, n + 1))
    # More instances never take less memory in total (PSS splits shared pages, it does not
    # lose them).
    totals = [c["total_mib"] for c in curve]
    assert all(b > a * 0.9 for a, b in itertools.pairwise(totals))
    idle = samples["idle_instance_mib"].value
    by_prog = samples["idle_instance_mib"].labels["idle_by_program_mib"]
    kind = launcher.spec.kind
    if kind == "qemu":
        assert any(p.startswith("qemu-system") for p in by_prog) and idle > 50
    elif kind == "runc":
        assert "itx-ready" in by_prog  # the container's PID 1 ...
        assert samples["idle_instance_mib"].labels["idle_kernel_mib"] is not None  # + cgroup
    else:
        assert list(by_prog) == ["itx-ready"] and idle < 4
    assert launcher.live == 0


@pytest.mark.integration
def test_memory_floor_stops_the_sweep(image: ImageArtifacts, tmp_path: Path) -> None:
    env = protocols.environments()["native"]()
    spec = EnvSpec(name="test-floor", kind="native", image=image, workdir=tmp_path)
    lau = EnvLauncher(env, spec, deadline=float("inf"))
    # A floor above what the host has: not even one instance may start.
    params = {"max_instances": 3, "min_available_mib": 10 ** 7, "settle_s": 0.0}
    with pytest.raises(SanityError, match="MemAvailable would fall below"):
        Density().launch_and_measure(lau, params, None)
    assert lau.live == 0


# -- the runner's side ---------------------------------------------------------------------

class _Seen:
    pids: ClassVar[list[int]] = []


@register
class LaunchTwiceThenFail(BaseWorkload):
    """Leaves two instances running and fails: the runner must stop both."""

    name: ClassVar[str] = "test-launch-fail"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "test only"
    params: ClassVar[tuple[ParamSpec, ...]] = ()
    tools: ClassVar[dict[str, tuple[str, ...]]] = {}
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[dict[str, Port]] = {}
    packages: ClassVar[tuple[str, ...]] = ()
    figures: ClassVar[FigureHints] = FigureHints()

    def launch_and_measure(self, launcher: Launcher, params: Params,
                           loadgen: LoadGen | None) -> list[Sample]:
        for _ in range(2):
            _Seen.pids += list(launcher.launch().instance.host_pids())
        raise SanityError("failed on purpose with two instances up")


PLAN = """
name = "t-launch"
seed = 1
repetitions = 1
warmups = 0
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "test-launch-fail"
[[workloads]]
name = "startup"
params = { starts = 2, ready = "exec" }
"""


@pytest.mark.integration
def test_runner_stops_what_a_failing_launch_left(image: ImageArtifacts, tmp_path: Path) -> None:
    _Seen.pids = []
    with ran(PLAN, image, tmp_path) as (store, run_id):
        cells = {c.key.workload: c for c in store.cells(run_id)}
    failed = cells["test-launch-fail"]
    assert failed.status is CellStatus.FAILED and "on purpose" in failed.reason
    assert len(_Seen.pids) == 2
    for pid in _Seen.pids:  # stopped (or the PID reused by something else entirely)
        comm = Path(f"/proc/{pid}/comm")
        assert not comm.exists() or comm.read_text().strip() != "itx-ready"
    ok = cells["startup"]
    assert ok.status is CellStatus.OK
    assert {s.metric for s in ok.samples} >= {"create_ms", "ready_ms", "ready_p95_ms"}


@pytest.mark.integration
def test_launched_instances_leave_the_long_lived_ones_scratch_alone(
        image: ImageArtifacts, tmp_path: Path) -> None:
    # Same environment name, same process: a launched native instance once shared (and at
    # its stop removed) the runner's own instance's scratch directory.
    with started("native", "native", "host", image, tmp_path / "main") as main:
        env = protocols.environments()["native"]()
        lau = EnvLauncher(env, EnvSpec(name="native", kind="native", image=image,
                                       workdir=tmp_path / "launched"), deadline=float("inf"))
        launched = lau.launch()
        assert launched.instance.scratch != main.scratch
        lau.stop(launched)
        assert Path(main.scratch).is_dir()
        assert main.exec(["sh", "-c", 'echo x > "$TMPDIR/f"'], 10).returncode == 0


@pytest.mark.integration
def test_pod_startup_bursts_time_every_start_and_leave_none_running(
        launcher: EnvLauncher) -> None:
    # One start() a thread at the rate (runc-bridge: three containers' bridges and veths made
    # at once), beside one already running; the emulated VM two, one after the other.
    vm = _emulated(launcher)
    params = {"pods": 2 if vm else 3, "rate": 0.0 if vm else 20.0, "running": 0 if vm else 1,
              "timeout_s": 300.0}
    samples = {s.metric: s for s in PodStartup().launch_and_measure(launcher, params, None)}
    assert next(iter(samples)) == "started_ms"
    per = samples["started_ms"].labels["per_start"]
    assert len(per) == params["pods"]
    assert len({p["name"] for p in per}) == params["pods"]
    for p in per:
        assert 0 <= p["ms"]["create"] <= p["ms"]["started"] <= p["ms"]["ready"]
    for phase in PHASES:
        assert samples[f"{phase}_ms"].value <= samples[f"{phase}_p99_ms"].value \
            <= samples[f"{phase}_max_ms"].value
    assert samples["started_max_ms"].value == pytest.approx(
        max(p["ms"]["started"] for p in per), abs=1e-3)
    launcher.close()  # the fixture checks that nothing is left
