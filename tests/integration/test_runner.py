"""Runner mechanics on the real native environment with small test workloads: commit per cell,
failures stored without numbers, interruption and --resume without repeating cells,
a workload that finds out while it runs that it does not apply, and an environment that
cannot run here: skipped where the plan marks it optional, else the run is refused."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import ClassVar

import pytest
from support import RUNNER_PLAN, EchoCounter, GoneEnvironment, ran, requires_root_and

from isotax import protocols
from isotax.analysis.report_data import analyze
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellStatus, NotApplicable, Sample
from isotax.plan import parse_plan
from isotax.protocols import (
    Availability,
    EnvSpec,
    FigureHints,
    Instance,
    LoadGen,
    Params,
    ParamSpec,
    Port,
    Unavailable,
)
from isotax.report import json_report, markdown
from isotax.run.runner import Runner
from isotax.run.schedule import new_run_id
from isotax.store.sqlite import SQLiteStore
from isotax.telemetry import envcpu
from isotax.workloads.base import BaseWorkload, register

# Each test runs the native environment, whose CPU accounting group needs root.
pytestmark = requires_root_and(root_for="the native environment's CPU accounting cgroup")


@pytest.fixture
def setup(tmp_path: Path, echo_workload: type):
    plan = parse_plan(RUNNER_PLAN)
    store = SQLiteStore(tmp_path / "isotax.db")
    image = ImageArtifacts("test", tmp_path / "image")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, RUNNER_PLAN, plan.seed, {"hostname": "h"})
    yield plan, store, image, run_id
    store.close()


def test_run_commits_every_cell(setup) -> None:
    plan, store, image, run_id = setup
    status = Runner(plan, RUNNER_PLAN, store, image, log=lambda m: None).run(run_id)
    assert status == "complete"
    cells = store.cells(run_id)
    # 2 environments x 2 points x 3 rounds, and a warm-up per environment x workload
    assert len(cells) == 14 and all(c.status is CellStatus.OK for c in cells)
    assert {c.samples[0].value for c in cells} == {1.0, 2.0}
    # every run also carries what the environment's own host processes used: natively there
    # are none (this test's image has no itx-ready holder), so nothing
    cpu = [s for c in cells for s in c.samples if s.metric == envcpu.METRIC]
    assert len(cpu) == 14 and all(s.value == 0 and not s.labels["by_program"] for s in cpu)
    md = markdown.render(analyze(store, run_id))
    assert "## CPU of the environments' own host processes" in md
    assert envcpu.METRIC not in md.split("## Results")[1].split("###")[0]  # not in Table 1
    envs = {e.name: e for e in store.environments(run_id)}
    assert envs["native"].available and envs["native"].tools["sh"] == "dash"
    assert store.get_run(run_id).status == "complete"


def test_failed_sanity_is_stored_without_numbers(setup) -> None:
    plan, store, image, run_id = setup
    EchoCounter.fail_at = 6
    Runner(plan, RUNNER_PLAN, store, image, log=lambda m: None).run(run_id)
    failed = [c for c in store.cells(run_id) if c.status is CellStatus.FAILED]
    assert len(failed) == 1
    assert "checksum mismatch" in failed[0].reason and not failed[0].samples


def test_interrupt_then_resume_repeats_nothing(setup) -> None:
    plan, store, image, run_id = setup
    EchoCounter.interrupt_at = 7
    status = Runner(plan, RUNNER_PLAN, store, image, log=lambda m: None).run(run_id)
    assert status == "interrupted"
    first = store.cells(run_id)
    assert len(first) == 6 and store.get_run(run_id).status == "interrupted"
    EchoCounter.interrupt_at = None
    status = Runner(plan, RUNNER_PLAN, store, image, log=lambda m: None).run(run_id)
    assert status == "complete"
    after = store.cells(run_id)
    assert len(after) == 14
    idents = [(c.key.ident) for c in after]
    assert len(set(idents)) == 14
    assert [c.id for c in after[:6]] == [c.id for c in first]  # first part kept as it was
    assert EchoCounter.calls == 14 + 1  # the interrupted call, then exactly the missing ones


@register
class SometimesWorkload(BaseWorkload):
    """value 2 does not apply to `native2`; it finds that out only when it runs there."""

    name: ClassVar[str] = "test-sometimes"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "test only"
    params: ClassVar[tuple[ParamSpec, ...]] = (ParamSpec("value", int, 7, "number to echo"),)
    tools: ClassVar[dict[str, tuple[str, ...]]] = {}
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[dict[str, Port]] = {}
    packages: ClassVar[tuple[str, ...]] = ()
    figures: ClassVar[FigureHints] = FigureHints()
    runs: ClassVar[Counter[tuple[str, int]]] = Counter()

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        env = inst.spec.name  # type: ignore[attr-defined]
        SometimesWorkload.runs[(env, params["value"])] += 1
        if env == "native2" and params["value"] == 2:
            raise NotApplicable("the CPU refuses an instruction this build uses")
        out = inst.exec(["sh", "-c", f"echo {params['value']}"], timeout=10).check()
        return [Sample("value", float(out.stdout), "units")]


def test_not_applicable_is_stored_once_per_point_and_reported(tmp_path: Path,
                                                               echo_workload: type) -> None:
    text = RUNNER_PLAN.replace('"test-echo"', '"test-sometimes"')
    SometimesWorkload.runs.clear()
    with ran(text, ImageArtifacts("t", tmp_path / "i"), tmp_path) as (store, run_id):
        cells = store.cells(run_id)
        d = analyze(store, run_id)
    na = [c for c in cells if c.status is CellStatus.NOT_APPLICABLE]
    # the 3 repetitions of that one point (the warm-up ran the first point), none with a number
    assert len(na) == 3 and not any(c.samples for c in na)
    assert {(c.key.environment, c.key.params["value"]) for c in na} == {("native2", 2)}
    assert all("refuses an instruction" in c.reason for c in na)
    # found out once: the other repetitions of the point did not run again
    assert SometimesWorkload.runs[("native2", 2)] == 1
    assert SometimesWorkload.runs[("native", 2)] == 3
    assert not d.failures and not any("failed" in w for w in d.warnings)
    md = markdown.render(d)
    assert "## Not applicable" in md and "refuses an instruction" in md
    assert "## Failures" not in md
    row = next(line for line in md.splitlines() if line.startswith("| test-sometimes | value=2"))
    assert row.rstrip(" |").endswith("n/a")
    doc = json_report.render(d)
    assert '"reason": "the CPU refuses an instruction this build uses"' in doc


class _Elsewhere(GoneEnvironment):
    """test only: a kind that is not available here (a runtime this host lacks)."""

    kind: ClassVar[str] = "test-elsewhere"
    fix: ClassVar[str] = "install it"


class _Breaks(_Elsewhere):
    """test only: available, but its start fails (a VM that does not boot)."""

    kind: ClassVar[str] = "test-breaks"

    def available(self) -> Availability:
        return Availability.yes()

    def start(self, spec: EnvSpec) -> Instance:
        raise Unavailable(Availability.no("test-breaks: the VM did not boot",
                                          f"see {spec.workdir}/console.log"))


def _with(kind: str, optional: bool) -> str:
    """RUNNER_PLAN with native2 replaced by an environment of `kind`."""
    return RUNNER_PLAN.replace('name = "native2"\nkind = "native"',
                               f'name = "other"\nkind = "{kind}"\noptional = '
                               f"{str(optional).lower()}")


@pytest.fixture
def other_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    for cls in (_Elsewhere, _Breaks):
        monkeypatch.setitem(protocols.ENVIRONMENTS, cls.kind, cls)


def test_an_optional_environment_unavailable_here_is_skipped(
        tmp_path: Path, echo_workload: type, other_kinds: None) -> None:
    """optional = true: a yellow "not run" line, the rest measured, the run complete."""
    text = _with("test-elsewhere", optional=True)
    said: list[str] = []
    plan = parse_plan(text)
    store = SQLiteStore(tmp_path / "isotax.db")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, text, plan.seed, {"hostname": "h"})
    image = ImageArtifacts("test", tmp_path / "image")
    assert Runner(plan, text, store, image, log=said.append).run(run_id) == "complete"
    cells = store.cells(run_id)
    assert len(cells) == 7 and {c.key.environment for c in cells} == {"native"}
    assert "[yellow]other: not run: unavailable: test-elsewhere is not installed here " \
           "(fix: install it)[/]" in said
    assert not {e.name: e for e in store.environments(run_id)}["other"].available
    store.close()


def test_an_environment_that_fails_to_start_refuses_the_run(
        tmp_path: Path, echo_workload: type, other_kinds: None) -> None:
    """Not optional, and its start fails after native started: refused in one line naming
    it, why and the fix; nothing measured, native stopped again."""
    text = _with("test-breaks", optional=False)
    plan = parse_plan(text)
    store = SQLiteStore(tmp_path / "isotax.db")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, text, plan.seed, {"hostname": "h"})
    runner = Runner(plan, text, store, ImageArtifacts("test", tmp_path / "image"),
                    log=lambda m: None)
    assert runner.run(run_id) == "refused"
    assert runner.refusal.startswith(
        "refused: environment 'other' (test-breaks) cannot run here: unavailable: test-breaks: "
        "the VM did not boot (fix: see ")
    assert runner.refusal.endswith(
        "; fix that, or mark it optional = true in the plan to run without it")
    assert store.cells(run_id) == [] and not runner.started
    assert store.get_run(run_id).status == "refused"
    store.close()
