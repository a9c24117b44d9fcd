"""A started emulated environment is announced at once, through a real run (issue 15)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar

from support import requires_root_and

from isotax.environments.base import register
from isotax.environments.native import Native
from isotax.facts import Facts
from isotax.image.artifacts import ImageArtifacts
from isotax.model import Sample
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
)
from isotax.run.runner import Runner
from isotax.run.schedule import new_run_id
from isotax.store.sqlite import SQLiteStore
from isotax.workloads.base import BaseWorkload
from isotax.workloads.base import register as wl_register

# Each test runs the native environment, whose CPU accounting group needs root.
pytestmark = requires_root_and(root_for="the native environment's CPU accounting cgroup")


@wl_register
class Echo(BaseWorkload):
    name: ClassVar[str] = "test-echo-emu"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = "test only"
    params: ClassVar[tuple[ParamSpec, ...]] = ()
    tools: ClassVar[dict[str, tuple[str, ...]]] = {}
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[dict[str, Port]] = {}
    packages: ClassVar[tuple[str, ...]] = ()
    figures: ClassVar[FigureHints] = FigureHints()

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        out = inst.exec(["sh", "-c", "echo 1"], timeout=10).check()
        return [Sample("value", float(out.stdout), "units")]


@register
class PretendEmulated(Native):
    """Native, saying in advance and once started that it is emulated (as a TCG VM does)."""

    kind: ClassVar[str] = "test-pretend-emulated"
    description: ClassVar[str] = "test only: native, describing itself as emulated"

    def available(self) -> Availability:
        return Availability(True, "TCG here, because this is a test")

    def start(self, spec: EnvSpec) -> Instance:
        inst = super().start(spec)
        real = inst.facts

        def facts() -> Facts:
            return dataclasses.replace(real(), accelerator="tcg", emulated=True,
                                       accelerator_reason="the test asks for it")

        inst.facts = facts  # type: ignore[method-assign]
        return inst


def test_the_run_announces_emulation_before_and_at_start(tmp_path: Path) -> None:
    text = ('name = "t-emu"\nrepetitions = 1\nwarmups = 0\n'
            '[[environments]]\nname = "native"\nkind = "native"\n'
            '[[environments]]\nname = "emu"\nkind = "test-pretend-emulated"\n'
            '[[workloads]]\nname = "test-echo-emu"\n')
    plan = parse_plan(text)
    store = SQLiteStore(tmp_path / "isotax.db")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, text, plan.seed, {"hostname": "h"})
    lines: list[str] = []
    try:
        status = Runner(plan, text, store, ImageArtifacts("t", tmp_path / "i"),
                        log=lines.append).run(run_id)
    finally:
        store.close()
    assert status == "complete", lines
    first = lines.index("emu: TCG here, because this is a test")
    starting = next(i for i, ln in enumerate(lines) if ln.startswith("starting "))
    assert first < starting  # said before anything starts
    assert not any(ln.startswith("native: ") and "here" in ln for ln in lines)
    ready = lines.index(next(ln for ln in lines if ln.startswith("emu: ready in")))
    assert lines[ready + 1] == (
        "[yellow]emu: runs under TCG software emulation (emulated): the test asks for it; its "
        "ratios will measure the emulator, not the overhead of hardware virtualisation[/]")
