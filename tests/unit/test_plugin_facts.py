"""Every registered environment kind declares its facts (EnvironmentBase names them): a kind
that lacks one fails here, named with the fact, instead of being skipped without a word by the
identity check, the leak check, the fingerprint or the runner's NUMA decision. And those
consumers read the facts from the registry, never a list of kinds."""

from __future__ import annotations

from typing import ClassVar

import pytest

from isotax import protocols
from isotax.environments.base import EnvironmentBase, undeclared_facts
from isotax.facts import Facts, Reach
from isotax.host.facts.fingerprint import runtime_version_commands
from isotax.protocols import (
    Availability,
    EnvSpec,
    Instance,
    Isolation,
    LeakFinder,
    ParamSpec,
    VersionCommand,
)
from isotax.run import identity, leaks

KINDS = protocols.environments()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_registered_kind_declares_every_fact(kind: str) -> None:
    cls = KINDS[kind]
    missing = undeclared_facts(cls)
    assert not missing, f"environment kind {kind!r} lacks: {'; '.join(missing)}"
    assert issubclass(cls, EnvironmentBase), f"{kind!r} does not inherit EnvironmentBase"
    assert cls.kind == kind


class _Half(EnvironmentBase):
    kind: ClassVar[str] = "test-half"
    description: ClassVar[str] = "test only: declares nothing but its name"

    def available(self) -> Availability:
        return Availability.yes()

    def start(self, spec: EnvSpec) -> Instance:
        raise NotImplementedError


def test_a_kind_that_lacks_a_fact_is_named_with_it() -> None:
    assert undeclared_facts(_Half) == [
        "isolation: not declared", "supports_numa: not declared",
        "leak_finders: not declared", "options: not declared", "networks: not declared",
        "storages: not declared", "version_command(): not declared"]

    class Wrong(_Half):
        isolation = "vm"  # type: ignore[assignment]  # a word, not an Isolation
        supports_numa: ClassVar[bool] = False
        leak_finders: ClassVar[tuple[LeakFinder, ...]] = ()
        options: ClassVar[tuple[ParamSpec, ...]] = ("accel",)  # type: ignore[assignment]
        networks: ClassVar[tuple[str, ...]] = ("host", "slirp")
        storages: ClassVar[tuple[str, ...]] = ()

        @classmethod
        def version_command(cls) -> VersionCommand | None:
            return ("qemu", "--version")  # type: ignore[return-value]

    said = undeclared_facts(Wrong)
    assert said[:4] == ["isolation: 'vm' is not a Isolation",
                        "options: 'accel' is not a ParamSpec",
                        "networks: 'slirp' is not one of host, bridge, none, pod, service",
                        "storages: empty"]
    assert said[4].startswith("version_command(): ('qemu', '--version') is neither")

    class NoStart(EnvironmentBase):
        kind: ClassVar[str] = "test-nostart"
        description: ClassVar[str] = "test only"
        isolation: ClassVar[Isolation] = Isolation.HOST
        supports_numa: ClassVar[bool] = False
        leak_finders: ClassVar[tuple[LeakFinder, ...]] = ()
        options: ClassVar[tuple[ParamSpec, ...]] = ()
        networks: ClassVar[tuple[str, ...]] = ("host",)
        storages: ClassVar[tuple[str, ...]] = ("volume",)

        @classmethod
        def version_command(cls) -> VersionCommand | None:
            return None

    assert undeclared_facts(NoStart) == ["available(): not declared", "start(): not declared"]


def test_the_host_kind_is_found_by_its_isolation() -> None:
    host = protocols.kinds_with(Isolation.HOST)
    assert host and all(protocols.isolation_of(k) is Isolation.HOST for k in host)
    assert protocols.isolation_of("no-such-kind") is None


def _fake(kind: str, isolation: Isolation, finders: tuple[LeakFinder, ...]) -> type:
    return type(f"Fake{kind}", (_Half,), {
        "kind": kind, "isolation": isolation, "supports_numa": False, "leak_finders": finders,
        "options": (), "networks": ("host",), "storages": ("volume",),
        "version_command": classmethod(lambda cls: VersionCommand("fakevmm", ("true",)))})


def test_identity_reads_the_declared_isolation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kind isotax has never seen is checked as what it declares (no table to edit)."""
    monkeypatch.setitem(protocols.ENVIRONMENTS, "test-vmm", _fake("test-vmm", Isolation.VM, ()))
    assert identity.declared(Facts("test-vmm", Reach.NONE)) is Isolation.VM
    assert identity.declared(Facts("not-registered", Reach.NONE)) is None
    # An instance whose runtime decides says so in its facts (an engine running runsc: a
    # sandbox); its kind's declared isolation otherwise.
    assert identity.declared(Facts("docker", Reach.BRIDGE, isolation=Isolation.SANDBOX)) \
        is Isolation.SANDBOX
    assert identity.declared(Facts("docker", Reach.BRIDGE)) is Isolation.CONTAINER


def test_shared_leak_finders_are_asked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def shared() -> list[str]:
        calls.append("shared")
        return ["thing itx-1 (rm itx-1)"]

    def own() -> list[str]:
        calls.append("own")
        return []

    fakes = {"a": _fake("a", Isolation.VM, (shared,)),
             "b": _fake("b", Isolation.VM, (shared, own))}
    monkeypatch.setattr(protocols, "environments", lambda: fakes)
    assert leaks.environment_leaks() == ["thing itx-1 (rm itx-1)"]
    assert sorted(calls) == ["own", "shared"]


def test_the_fingerprint_asks_each_runtime_once() -> None:
    commands = runtime_version_commands()
    declared = {c.version_command() for c in KINDS.values()} - {None}
    assert set(commands) == {v.name for v in declared if v is not None}
    assert sum(1 for c in KINDS.values() if (v := c.version_command()) and v.name == "qemu") > 1
    assert commands["qemu"][-1] == "--version"
