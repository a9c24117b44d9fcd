"""What every workload shares: its registration and small helpers. The contract itself
(Workload, LaunchingWorkload, ParamSpec, LoadGen) is in isotax.protocols: prepare inside an
instance, run once, return samples.

A workload never times itself on the host: it runs the real tool inside the instance and
parses the tool's own output (or isotax's guest timer, `itx-time`) with a pure parser.
A run whose output fails its sanity check raises SanityError: the runner stores the failure
with its reason and no number.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from isotax.model import SanityError
from isotax.protocols import WORKLOADS, AnyWorkload, Instance, LoadGen


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


def register(cls: type[AnyWorkload]) -> type[AnyWorkload]:
    """Class decorator: record a workload in the registry (isotax.protocols)."""
    WORKLOADS[cls.name] = cls
    return cls
