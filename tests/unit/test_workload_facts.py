"""Every registered workload declares its own facts (isotax.workloads.base.BaseWorkload names
them): a new workload that forgets one fails here, naming itself and the fact, instead of
being silently incomplete (no port published, no package in the image, no figure).

Pure: the registry and the classes only, nothing started."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from isotax import protocols
from isotax.image.recipe import BASE_PACKAGES, Recipe
from isotax.protocols import CpuCurve, FigureHints, LatencyPanel, ParamSpec, Port
from isotax.workloads.base import HOOKS, REQUIRED_FACTS, BaseWorkload, missing_facts


def _problems(name: str, cls: Any) -> list[str]:
    """What is wrong with one registered workload class, one line each."""
    lacks = missing_facts(cls)
    if lacks:
        return [f"workload {name!r} lacks {fact!r}" for fact in lacks]
    out: list[str] = []

    def bad(fact: str, why: str) -> None:
        out.append(f"workload {name!r}: {fact} {why}")

    if cls.name != name:
        bad("name", f"is {cls.name!r}, registered as {name!r}")
    for fact in ("version", "description"):
        if not isinstance(getattr(cls, fact), str) or not getattr(cls, fact):
            bad(fact, "should be a non-empty string")
    if not all(isinstance(p, ParamSpec) for p in cls.params):
        bad("params", "should be ParamSpecs")
    if not isinstance(cls.tools, Mapping):
        bad("tools", "should map a tool to the argv that prints its version")
    if not isinstance(cls.needs_loadgen, bool):
        bad("needs_loadgen", "should be True or False")
    if not isinstance(cls.ports, Mapping) or not all(
            isinstance(p, Port) for p in cls.ports.values()):
        bad("ports", "should map a name to a Port ({} without a server)")
    else:
        for pname, port in cls.ports.items():
            if not port.server:
                bad("ports", f"{pname!r} names no server program (the leak finder needs it)")
            if not port.protocols or set(port.protocols) - {"tcp", "udp"}:
                bad("ports", f"{pname!r} has protocols {port.protocols!r}: tcp and/or udp")
        if cls.needs_loadgen and not cls.ports:
            bad("ports", "are none, but a client in the load generator needs a server port")
    if isinstance(cls.packages, str) or not isinstance(cls.packages, Sequence) or not all(
            isinstance(p, str) and p for p in cls.packages):
        bad("packages", "should be a sequence of Debian package names (() for none)")
    else:
        # A tool whose version is asked of dpkg must be a package the image gets.
        for tool, argv in cls.tools.items():
            if argv and argv[0] == "dpkg-query" and argv[-1] not in cls.packages:
                bad("packages", f"lack {argv[-1]!r}, whose version `tools` asks of dpkg "
                                f"(tool {tool!r})")
    if not isinstance(cls.figures, FigureHints):
        bad("figures", "should be a FigureHints (FigureHints() for tables only)")
    else:
        params = {p.name for p in cls.params}
        for axis in cls.figures.concurrency:
            if axis not in params:
                bad("figures", f"draw a concurrency sweep of {axis!r}, not a parameter")
        if cls.figures.latency_panels and not cls.figures.concurrency:
            bad("figures", "have latency panels but no concurrency axis to draw them along")
        if not all(isinstance(lp, LatencyPanel) and lp.latencies
                   for lp in cls.figures.latency_panels):
            bad("figures", "latency panels should be LatencyPanels with latency metrics")
        curve = cls.figures.cpu_curve
        if curve is not None and (not isinstance(curve, CpuCurve) or curve.axis not in params):
            bad("figures", "cpu_curve should be a CpuCurve along one of the parameters")
    return out


def test_every_registered_workload_declares_every_fact() -> None:
    registered = protocols.workloads()
    assert registered, "no workload registered: the registry found no plugin"
    problems = [line for name, cls in sorted(registered.items())
                for line in _problems(name, cls)]
    assert not problems, "\n".join(problems)


def test_the_checker_names_the_workload_and_the_missing_fact() -> None:
    """Nothing is skipped silently: a class without a fact or a hook is reported."""

    class Forgetful(BaseWorkload):
        name: ClassVar[str] = "test-forgetful"
        version: ClassVar[str] = "1"
        description: ClassVar[str] = "test only"
        params: ClassVar[Sequence[ParamSpec]] = ()
        tools: ClassVar[Mapping[str, Sequence[str]]] = {}
        needs_loadgen: ClassVar[bool] = False
        ports: ClassVar[Mapping[str, Port]] = {}
        figures: ClassVar[FigureHints] = FigureHints()

    assert _problems("test-forgetful", Forgetful) == [
        "workload 'test-forgetful' lacks 'packages'"]

    class NoBase:
        name = "test-nobase"

    lacks = missing_facts(NoBase)
    assert set(lacks) == (set(REQUIRED_FACTS) - {"name"}) | set(HOOKS)


def test_the_base_class_gives_every_hook_a_default() -> None:
    class Minimal(BaseWorkload):
        needs_loadgen: ClassVar[bool] = True

    w = Minimal()
    assert w.work({}, []) is None
    assert w.in_flight({}) is None
    assert w.needs_network({}) is True  # by default, needs_loadgen
    assert w.not_applicable(None, {}) is None  # type: ignore[arg-type]
    assert w.prepare(None, {}, None) is None  # type: ignore[func-returns-value,arg-type]
    for hook in HOOKS:
        assert hook in BaseWorkload.__doc__, f"BaseWorkload's docstring does not name {hook}"
    for fact in REQUIRED_FACTS:
        assert fact in BaseWorkload.__doc__, f"BaseWorkload's docstring does not name {fact}"


def test_ports_are_each_one_servers() -> None:
    """Two workloads may share a server (startup's redis probe is the redis workload's), but
    a port number belongs to one server program."""
    servers: dict[int, set[str]] = {}
    for port in protocols.workload_ports():
        servers.setdefault(port.number, set()).add(port.server)
    assert all(len(s) == 1 for s in servers.values()), servers


def test_the_image_gets_every_workloads_packages_once() -> None:
    packages = protocols.workload_packages()
    assert len(packages) == len(set(packages))
    for name, cls in protocols.workloads().items():
        assert set(cls.packages) <= set(packages), name
    recipe = Recipe.for_workloads(packages)
    assert recipe.packages[:len(BASE_PACKAGES)] == BASE_PACKAGES
    assert set(recipe.packages) == set(BASE_PACKAGES) | set(packages)
    # The order the caller passes them in does not name another image.
    assert Recipe.for_workloads(reversed(packages)).base_hash() == recipe.base_hash()


def test_an_unknown_workload_gets_the_default_hints() -> None:
    """A stored run may name a workload no longer registered: its report draws tables only."""
    assert protocols.figure_hints("test-no-such-workload") == FigureHints()


@pytest.mark.parametrize("hook", HOOKS)
def test_the_protocols_declare_every_hook(hook: str) -> None:
    for proto in (protocols.Workload, protocols.LaunchingWorkload):
        assert hasattr(proto, hook), f"{proto.__name__} does not declare {hook}"


@pytest.mark.parametrize("fact", REQUIRED_FACTS)
def test_the_protocols_declare_every_fact(fact: str) -> None:
    # Workload and LaunchingWorkload both extend WorkloadFacts.
    assert fact in protocols.WorkloadFacts.__annotations__
    assert protocols.WorkloadFacts in protocols.Workload.__mro__
    assert protocols.WorkloadFacts in protocols.LaunchingWorkload.__mro__


def test_a_workload_with_a_client_names_its_client_packages() -> None:
    """A load generator over SSH gets the image's versions of exactly these (loadgen.ssh):
    a network workload without them would run whatever client that host has."""
    for name, cls in protocols.workloads().items():
        if cls.needs_loadgen:
            assert cls.client_packages, f"{name} runs a client but names no client_packages"
        else:
            assert not cls.client_packages, f"{name} runs no client but names client_packages"


def test_setup_installs_the_workloads_packages_from_the_registry() -> None:
    """scripts/setup.sh names no workload's package: it installs what `isotax workloads
    --packages` prints (each workload's image and client packages), so a new workload is its
    module and its parser, with no line in setup.sh."""
    from click.testing import CliRunner

    from isotax.cli import main

    setup = (Path(__file__).parents[2] / "scripts" / "setup.sh").read_text()
    named = setup[setup.index("PACKAGES=("):setup.index("\n)\n")].split()
    printed = CliRunner().invoke(main, ["workloads", "--packages"]).output.split()
    wanted = {p for cls in protocols.workloads().values()
              for p in (*cls.packages, *cls.client_packages)}
    assert set(printed) == wanted and len(printed) == len(wanted)
    assert wanted & set(named) == set()
    assert "isotax workloads --packages" in setup
