"""What every workload shares: the base class with the defaults of its facts, its
registration and small helpers. The contract itself (Workload, LaunchingWorkload, ParamSpec,
LoadGen) is in isotax.protocols: prepare inside an instance, run once, return samples.

A workload never times itself on the host: it runs the real tool inside the instance and
parses the tool's own output (or isotax's guest timer, `itx-time`) with a pure parser.
A run whose output fails its sanity check raises SanityError: the runner stores the failure
with its reason and no number.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, TypeVar

from isotax.image.recipe import ImageHook
from isotax.model import Sample, SanityError
from isotax.protocols import (
    WORKLOADS,
    AnyWorkload,
    Completed,
    FigureHints,
    Instance,
    LoadGen,
    Needs,
    Params,
    ParamSpec,
    Port,
    Reach,
)

# The facts a workload class must declare itself: BaseWorkload gives them no value, and
# tests/unit/test_workload_facts.py fails, naming the workload and the fact, for one that
# lacks any (an empty value, `ports = {}`, says "none" on purpose).
REQUIRED_FACTS = ("name", "version", "description", "params", "tools", "needs_loadgen",
                  "ports", "packages", "figures")
# The hooks BaseWorkload gives a default to; a workload overrides what it knows better.
HOOKS = ("work", "in_flight", "needs_network", "not_applicable", "prepare", "host_needs")


class BaseWorkload:
    """The defaults of every workload; a workload module subclasses it, declares its facts and
    overrides the hooks it needs, then implements `run` (isotax.protocols.Workload) or
    `launch_and_measure` (LaunchingWorkload).

    Facts every class declares (REQUIRED_FACTS; no default, so none is forgotten silently):
      name, version, description  the registry key, the driver's version (bump on change),
                                  one line for `isotax workloads`;
      params                      its ParamSpecs;
      tools                       tool -> argv printing its version (recorded per run);
      needs_loadgen               True when a client runs in the load generator;
      client_packages             (default: none) the Debian packages of its load-generator
                                  clients: a load generator over SSH must have the image's
                                  versions of them (isotax.loadgen.ssh checks, installs);
      ports                       name -> Port its servers listen on ({} without a server):
                                  engines publish them, the leak finder knows them;
      packages                    the Debian packages its image needs (the image recipe gets
                                  every registered workload's, from its caller);
      figures                     FigureHints: how the report draws it (bars, concurrency
                                  axes, latency panels, ...); FigureHints() for tables only;
      spreads_over_endpoints      (default: False) its server runs in every endpoint behind
                                  a Service, each connection served where it lands.

    Hooks, with their defaults here (HOOKS):
      work(params, samples)       how much work one run did, (amount, unit), in the unit its
                                  cost is quoted in (GB, request, transaction, I/O); None (the
                                  default): the run is the unit;
      in_flight(params)           the requests it keeps outstanding at once by design (rr 1,
                                  fio iodepth); None (the default): it runs flat out;
      needs_network(params)       whether this point needs a path from the load generator;
                                  default: needs_loadgen (startup narrows it per probe);
      not_applicable(inst, params) why this point does not apply to that instance, in one
                                  line; None (the default): it applies. The runner checks the
                                  rules every workload shares (network) first;
      prepare(inst, params, loadgen) once per instance and parameter set, before warm-ups;
                                  default: nothing;
      host_needs(params)          what this point asks of the host at the least, from its
                                  parameters alone (protocols.Needs: memory in the
                                  environment, host memory beside it, open files in one
                                  process, disk): isotax.run.feasibility refuses a plan at
                                  load whose point cannot fit this host; default Needs():
                                  nothing worth checking.
    """

    name: ClassVar[str]
    version: ClassVar[str]
    description: ClassVar[str]
    params: ClassVar[Sequence[ParamSpec]]
    tools: ClassVar[Mapping[str, Sequence[str]]]
    needs_loadgen: ClassVar[bool]
    client_packages: ClassVar[Sequence[str]] = ()
    ports: ClassVar[Mapping[str, Port]]
    packages: ClassVar[Sequence[str]]
    image_hooks: ClassVar[Sequence[ImageHook]] = ()
    figures: ClassVar[FigureHints]
    headline: ClassVar[str] = ""  # the first metric the run reports
    spreads_over_endpoints: ClassVar[bool] = False  # protocols.WorkloadFacts says when True

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str] | None:
        return None

    def in_flight(self, params: Params) -> int | None:
        return None

    def needs_network(self, params: Params) -> bool:
        return self.needs_loadgen

    def not_applicable(self, inst: Instance, params: Params) -> str | None:
        return None

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        pass

    def host_needs(self, params: Params) -> Needs:
        return Needs()


def missing_facts(cls: type) -> list[str]:
    """The REQUIRED_FACTS a workload class lacks, and the HOOKS it cannot be asked."""
    return [f for f in REQUIRED_FACTS if not hasattr(cls, f)] + [
        h for h in HOOKS if not callable(getattr(cls, h, None))]


# The secret of this isotax process's servers (Redis's password, MariaDB's user's, netperf's
# passphrase): drawn once per process (a run; a resumed run draws its own), so that a server
# isotax starts answers only its own load generator's clients.
MIB = 1024 * 1024  # bytes in a MiB, for workloads that size files and memory
SERVER_SECRET = f"itx{secrets.token_hex(12)}"


def need_loadgen(loadgen: LoadGen | None) -> LoadGen:
    """The load generator, for a workload that cannot run without one."""
    if loadgen is None:
        raise SanityError("this workload needs the load generator (the runner creates it)")
    return loadgen


def require_runnable(inst: Instance, argv: Sequence[str]) -> None:
    """A workload's server can run in the environment (its version command succeeds there);
    else a SanityError with its exit status and words, and the fix."""
    done = inst.exec(list(argv), 60)
    if done.returncode != 0:
        raise SanityError(f"{argv[0]} is not runnable in the environment ({done.returncode}): "
                          f"{done.stderr.strip()[:200]} (rebuild the image: isotax image build)")


def client_tool_version(lg: LoadGen, argv: tuple[str, ...],
                        parse: Callable[[str], str]) -> str:
    """The version of a client tool as the load generator has it (this host's for the local
    one, the remote machine's over SSH), parsed from `argv`'s output; "unknown" when it cannot
    be told. Asked once per load generator and tool."""
    key = (lg.where, argv)
    if key not in _CLIENT_VERSIONS:
        try:
            _CLIENT_VERSIONS[key] = parse(lg.exec(list(argv), 30).stdout)
        except (ValueError, OSError, SanityError):
            return "unknown"
    return _CLIENT_VERSIONS[key]


_CLIENT_VERSIONS: dict[tuple[str, tuple[str, ...]], str] = {}


R = TypeVar("R")


def client_result(done: Completed, tool: str, timeout: float, parse: Callable[[str], R]) -> R:
    """A load generator's client run, parsed: SanityError where it timed out (exit 124),
    where its output does not parse (the parser's own words, which name the tool's error),
    or where it exited non-zero all the same."""
    if done.returncode == 124:
        raise SanityError(f"{tool} timed out after {timeout:.0f} s")
    result = parse(done.stdout + "\n" + done.stderr)
    if done.returncode != 0:
        raise SanityError(f"{tool} exited {done.returncode}: {done.stderr.strip()[:200]}")
    return result


def put_text(inst: Instance, path: str, text: str, timeout: float = 30) -> None:
    """Write a small text file inside an instance (exec has no stdin, so it goes as an arg)."""
    inst.exec(["sh", "-c", 'printf %s "$1" > "$2"', "sh", text, path], timeout).check()


W = TypeVar("W", bound=type[AnyWorkload])


def register(cls: W) -> W:
    """Class decorator: record a workload in the registry (isotax.protocols)."""
    WORKLOADS[cls.name] = cls
    return cls


def starts_not_behind_a_service(inst: Instance) -> str | None:
    """not_applicable for a workload of starts (startup's bursts, density): a Service in front
    of an instance adds nothing to its start or its idle memory, so the instance's own network
    measures it (a pod's: the pod network), and the same numbers are not measured twice."""
    if inst.facts().reach is Reach.SERVICE:
        return ("a Service in front adds nothing to a start or to idle memory: the "
                "instance's own network (a pod's pod network) measures it")
    return None
