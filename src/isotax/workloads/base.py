"""The workload protocol: prepare inside an instance, run once, return samples.

A workload never times itself on the host: it runs the real tool inside the instance and
parses the tool's own output (or isotax's guest timer, `itx-time`) with a pure parser.
A run whose output fails its sanity check raises SanityError: the runner stores the failure
with its reason and no number.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from isotax.environments.base import Completed, Instance
from isotax.model import Sample, SanityError

Params = Mapping[str, Any]


@dataclass(frozen=True)
class ParamSpec:
    """One parameter a workload accepts: its type, default and meaning (shown by `workloads`)."""

    name: str
    type: type
    default: Any
    help: str
    minimum: float | None = None
    choices: tuple[Any, ...] | None = None

    def problem(self, value: Any) -> str | None:
        """What is wrong with a value for this parameter, in the user's words; None if fine."""
        ok = isinstance(value, self.type) and not (self.type is int and isinstance(value, bool))
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            return f"{value!r} should be {self.type.__name__}"
        if self.minimum is not None and value < self.minimum:
            return f"{value!r} is below {self.minimum:g}"
        if self.choices is not None and value not in self.choices:
            return f"{value!r} is not one of: {', '.join(map(str, self.choices))}"
        return None


class LoadGen(Protocol):
    """The studies' "other machine": a network namespace joined to the host by a veth pair.
    Network clients run here, so every environment, native included, is reached over a real
    network path and adds only its own layers (bridge, NAT, tap + virtio, ...)."""

    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        """Run a client inside the load generator's namespace."""

    def target(self, inst: Instance, port: int, proto: str = "tcp") -> tuple[str, int]:
        """Where a client reaches a server listening on `port` inside `inst` (installing the
        port mapping a bridged container needs, as Docker's -p does; removed at close)."""

    def path(self, inst: Instance) -> str:
        """The layers between the load generator and `inst`, in words, for the report."""


class Workload(Protocol):
    """Runs in one long-lived instance of each environment, which the runner starts."""

    name: ClassVar[str]
    version: ClassVar[str]  # version of isotax's driver for this workload (bump on change)
    description: ClassVar[str]
    params: ClassVar[Sequence[ParamSpec]]
    tools: ClassVar[Mapping[str, Sequence[str]]]  # tool -> argv that prints its version
    # True for workloads with a network client: the runner then creates the load generator
    # and passes it; otherwise `loadgen` is None.
    needs_loadgen: ClassVar[bool]

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        """Once per instance and parameter set, before warm-ups (e.g. make the corpus)."""

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]: ...


@dataclass(frozen=True)
class Launched:
    """A fresh instance from a Launcher, and when it was asked for (time.monotonic())."""

    instance: Instance
    t0: float  # just before the environment's start(): its milestones count from here

    def since(self) -> float:
        """Seconds from the request to now."""
        return time.monotonic() - self.t0


class Launcher(Protocol):
    """Starts fresh instances of the cell's environment, exactly as the plan defines it (the
    runner's own long-lived instance stays paused meanwhile)."""

    def launch(self) -> Launched:
        """Start one; raises Unavailable or another exception (after removing what it made)
        when it does not start."""

    def stop(self, launched: Launched) -> float:
        """Stop it and remove everything it made; seconds the stop took. Idempotent."""


@runtime_checkable
class LaunchingWorkload(Protocol):
    """A workload whose subject is the starting of instances (startup, density): it gets a
    Launcher instead of running inside the environment's long-lived instance. The runner stops
    whatever it leaves running, on failure and Ctrl-C too."""

    name: ClassVar[str]
    version: ClassVar[str]
    description: ClassVar[str]
    params: ClassVar[Sequence[ParamSpec]]
    tools: ClassVar[Mapping[str, Sequence[str]]]
    needs_loadgen: ClassVar[bool]

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        """As Workload.prepare, on the runner's long-lived instance (e.g. check a tool)."""

    def launch_and_measure(self, launcher: Launcher, params: Params,
                           loadgen: LoadGen | None) -> list[Sample]: ...


AnyWorkload = Workload | LaunchingWorkload

REGISTRY: dict[str, type[AnyWorkload]] = {}


def register(cls: type[AnyWorkload]) -> type[AnyWorkload]:
    REGISTRY[cls.name] = cls
    return cls


def need_loadgen(loadgen: LoadGen | None) -> LoadGen:
    """The load generator, for a workload that cannot run without one."""
    if loadgen is None:
        raise SanityError("this workload needs the load generator (the runner creates it)")
    return loadgen


@functools.cache
def host_tool_version(argv: tuple[str, ...], parse: Callable[[str], str]) -> str:
    """The version of a client tool that runs on the host (in the load generator), parsed
    from `argv`'s output; "unknown" when it cannot be told. Asked once per process."""
    from isotax.environments.native import run_host

    try:
        return parse(run_host(list(argv), 30).stdout)
    except (ValueError, OSError):
        return "unknown"


def put_text(inst: Instance, path: str, text: str, timeout: float = 30) -> None:
    """Write a small text file inside an instance (exec has no stdin, so it goes as an arg)."""
    inst.exec(["sh", "-c", 'printf %s "$1" > "$2"', "sh", text, path], timeout).check()
