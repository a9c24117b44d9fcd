"""What every environment shares: the base class of every kind (EnvironmentBase: the facts it
declares and the hooks' defaults), its registration, the startup stopwatch, the guest helper's
ready marker, the guest PATH, and NUMA binding. The contract itself (Environment, Instance,
EnvSpec, Availability, Isolation) is in isotax.protocols.

An Environment is a *kind* of place to run (native, runc, crun, qemu, ...). `start()` gives an
Instance: one running container or VM, from the shared workload image, that workloads drive
through `exec()`. Every Instance is stopped by the runner in a `finally`, on success, failure
and Ctrl-C; `stop()` must be idempotent and must remove every resource the instance created.
"""

from __future__ import annotations

import contextlib
import functools
import re
import shutil
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from isotax.host.facts.numa import node_cpuset, placement_words
from isotax.parsers import procfs
from isotax.protocols import (
    ENVIRONMENTS,
    NETWORKS,
    STORAGES,
    Availability,
    Burst,
    Environment,
    EnvironmentFacts,
    EnvSpec,
    Instance,
    Isolation,
    ParamSpec,
    SocketStack,
    StopIncomplete,
    Unavailable,
    VersionCommand,
)


def bound_cpus(who: str, spec: EnvSpec) -> str | None:
    """The cpuset CPU list of an instance bound to the plan's numa_node (the node's CPUs, the
    first vcpus of them where the plan limits the count); None when it is not bound. A node
    that cannot hold it makes the environment unavailable, with the fix."""
    if spec.numa_node is None:
        return None
    try:
        return node_cpuset(spec.numa_node, spec.vcpus)
    except ValueError as e:
        raise Unavailable(Availability.no(f"{who}: {e}", "fix numa_node in the plan")) from e


def limit_words(spec: EnvSpec, node_cpus: str | None, how: str = "cpuset") -> dict[str, str]:
    """A container's "cpus", "memory" and "numa" lines for the report: its NUMA node's CPUs
    (bound by `how`), the plan's vcpus as a cpuset, or no limit; its memory limit or none."""
    return {
        "cpus": f"{node_cpus} ({how})" if node_cpus is not None
        else f"0-{spec.vcpus - 1} (cpuset)" if spec.vcpus else "all (no limit)",
        "memory": f"{spec.memory_mib} MiB (limit)" if spec.memory_mib else "no limit",
        "numa": placement_words(spec.numa_node, how, node_cpus),
    }


def mem_total_bytes() -> int:
    """The host's memory (MemTotal), what an instance without a memory limit may use; 1 GiB
    where /proc/meminfo does not say."""
    return procfs.parse_meminfo(Path("/proc/meminfo").read_text()).get("MemTotal", 1 << 30)


# -- is an instance still there (Instance.alive) ---------------------------------------------

def exit_words(returncode: int) -> str:
    """How a child process ended, from Popen.returncode: "killed by signal 9 (SIGKILL)",
    "exited with status 1". Pure."""
    if returncode < 0:
        try:
            name = f" ({signal.Signals(-returncode).name})"
        except ValueError:
            name = ""
        return f"killed by signal {-returncode}{name}"
    return f"exited with status {returncode}"


def process_gone(pid: int) -> str:
    """"" while host process pid runs, else "exited" (a zombie not yet reaped has too): /proc
    only, for a process this process did not start (no exit status to ask)."""
    try:
        st = procfs.parse_pid_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError):
        return "exited"
    return "exited" if st.state in ("Z", "X") else ""


class _Stoppable(Protocol):
    _stopped: bool


_S = TypeVar("_S", bound=_Stoppable)


def stops_once(stop: Callable[[_S], None]) -> Callable[[_S], None]:
    """Instance.stop's idempotence, in one place: the first call stops, every later one (the
    runner's after a failed start's own, then Ctrl-C's) returns at once. The instance keeps
    `_stopped`, which its other methods read too."""

    @functools.wraps(stop)
    def once(self: _S) -> None:
        if self._stopped:
            return
        self._stopped = True
        stop(self)

    return once


class Removals:
    """What one stop() removes: every removal tried, whatever the one before did; then
    done() raises StopIncomplete naming what could not be removed (Instance.stop's
    contract)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.failed: list[str] = []

    def attempt(self, name: str, remove: Callable[[], object]) -> None:
        try:
            remove()
        except Exception as e:  # the contract: try the rest, then say what is left
            self.failed.append(f"{name} ({type(e).__name__}: {str(e).strip()[:200]})")

    def release(self, name: str, release: Callable[[], list[str]]) -> None:
        """A removal that returns what it could not undo instead of raising (a hugepage
        reservation's release, a bind mount's umount): a non-empty list is a failure."""
        self.attempt(name, lambda: _none_left(release()))

    def done(self) -> None:
        if self.failed:
            raise StopIncomplete(f"{self.what}: could not remove " + "; ".join(self.failed)
                                 + "; `isotax doctor --fix` removes what is left")


def _none_left(left: list[str]) -> None:
    if left:
        raise RuntimeError("; ".join(left))


def undo_start(stop: Callable[[], None]) -> None:
    """stop() of an instance whose start failed: the start's own error is what the caller
    needs; what stop could not remove is left to the leak finders (`isotax doctor --fix`)."""
    with contextlib.suppress(StopIncomplete):
        stop()


def start_or_undo(start: Callable[[], None], stop: Callable[[], None]) -> None:
    """start() of a new instance; where it fails (or is interrupted), stop() removes what it
    made (undo_start) and start's own error is raised."""
    try:
        start()
    except BaseException:
        undo_start(stop)
        raise


def log_tail(path: Path, lines: int = 3) -> str:
    """The last lines of a log an instance's process wrote (a runtime's, a console), joined
    with " | " for a one-line reason; "(no output)" where it has none or cannot be read."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no output)"
    return " | ".join(text[-lines:]) or "(no output)"


def remove_tree(path: Path) -> None:
    """Remove a directory tree isotax made; one already gone is fine, one that cannot be
    removed raises (a Removals attempt names it)."""
    if path.exists() or path.is_symlink():
        shutil.rmtree(path)


class Stopwatch:
    """Milestones relative to a start time, for startup reporting."""

    def __init__(self, t0: float | None = None) -> None:
        self.t0 = time.monotonic() if t0 is None else t0  # EnvSpec.requested_at, if given
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> float:
        self.marks[name] = time.monotonic() - self.t0
        return self.marks[name]


# isotax's guest helper that marks the first instruction (and holds a container open as PID 1).
READY_HELPER = "/opt/isotax/bin/itx-ready"
READY_MARKER = "ITX-READY"


def parse_ready_marker(text: str) -> int | None:
    """The CLOCK_MONOTONIC ns of the first `ITX-READY <ns>` line, None when unstamped."""
    m = re.search(rf"^{READY_MARKER} (\d+)\s*$", text, re.MULTILINE)
    return int(m.group(1)) if m else None


# PATH inside every environment: isotax's helpers first, then Debian's usual directories.
GUEST_PATH = "/opt/isotax/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GUEST_ENV = {"PATH": GUEST_PATH, "HOME": "/root", "LANG": "C.UTF-8"}


class EnvironmentBase(EnvironmentFacts):
    """The base class of every environment kind (directly, or through its family's base: OCI
    runtimes, engines, QEMU). A new kind is one module: a subclass with its facts, registered
    with @register.

    Facts a kind must declare (no default here, so none is left out silently:
    tests/unit/test_plugin_facts.py names a registered kind and the fact it lacks):

      kind               the registry key, the plan's `kind` (e.g. "runc")
      description        one line for `isotax envs`
      isolation          Isolation.HOST, CONTAINER, SANDBOX or VM: what an instance must show
                         it is (run/identity.py), and how the rest of isotax finds the baseline
                         or a VM without naming a kind
      supports_numa      whether it binds CPUs and memory to the plan's numa_node (a plan
                         that sets numa_node for a kind that does not is refused at load)
      leak_finders       functions that find what its instances leave behind if isotax is
                         killed (run/leaks.py calls each once, however many kinds share it);
                         () where it leaves nothing of its own
      options            the plan's `options` it reads, as ParamSpecs (name, type, default,
                         meaning, choices or bounds), as workloads declare their params; ()
                         for none. The plan refuses at load an option not declared here or a
                         value that does not fit its spec, naming the kind's options
      networks           the plan `network` values it can do, of protocols.NETWORKS (a VM:
                         bridge and none, never the host's stack); the plan refuses the others
      storages           the plan `storage` values it can do, of protocols.STORAGES (vm9p:
                         volume only, its root being a read-only share)
      version_command()  classmethod: how to ask its runtime's version (the fingerprint
                         records each runtime once), or None where it has no runtime of its own
      available()        whether it works here, or why not and the fix; never raises
      start(spec)        a running Instance; raises Unavailable (after removing what it made)

    Hooks with a default here:

      doctor_notes()                classmethod: lines `isotax doctor` prints for the kind
                                    beyond its availability; default none
      recognises(release, dmesg)    classmethod: whether an instance's kernel, seen from
                                    inside, is this kind's own (gVisor's user-space kernel
                                    says so); the identity check asks every sandbox kind;
                                    default False
      network_layer(network)        classmethod: what a network stacks on and what it is
                                    (a pod's Service: on the pod network, DNAT and SNAT),
                                    for the layers' words; default None (one layer)
      bursts(spec)                  its own Burst (protocols.starts: many instances started
                                    at a rate, timed from the platform's events); default
                                    None (the launcher's: start() from threads)
    """

    # The facts' types are declared once, by protocols.EnvironmentFacts (inherited: attributes
    # only, no value); a kind declares each as a ClassVar with its value. version_command()
    # has no default either (see undeclared_facts).

    @classmethod
    def doctor_notes(cls) -> list[str]:
        return []

    @classmethod
    def recognises(cls, release: str, dmesg: str) -> bool:
        return False

    @classmethod
    def network_layer(cls, network: str) -> tuple[str, str] | None:
        return None

    @classmethod
    def options_problem(cls, network: str, options: Mapping[str, Any]) -> str | None:
        return None

    def bursts(self, spec: EnvSpec) -> Burst | None:
        return None

    def available(self) -> Availability:
        raise NotImplementedError(f"{type(self).__name__} declares no available()")

    def start(self, spec: EnvSpec) -> Instance:
        raise NotImplementedError(f"{type(self).__name__} declares no start()")


# The facts EnvironmentBase leaves to each kind, and what a declared value must be.
REQUIRED_FACTS: dict[str, type | tuple[type, ...]] = {
    "kind": str, "description": str, "isolation": Isolation, "supports_numa": bool,
    "leak_finders": tuple, "options": tuple, "networks": tuple, "storages": tuple,
}


def undeclared_facts(cls: type) -> list[str]:
    """The facts a registered environment class lacks or declares wrongly, one phrase each
    ("isolation: not declared"); empty when it declares them all. Runs nothing on the host:
    version_command() only says how a runtime would be asked."""
    out = []
    for fact, kind in REQUIRED_FACTS.items():
        value = getattr(cls, fact, None)
        if value is None:
            out.append(f"{fact}: not declared")
        elif not isinstance(value, kind):
            out.append(f"{fact}: {value!r} is not a {getattr(kind, '__name__', kind)}")
        elif isinstance(value, str) and not value:
            out.append(f"{fact}: empty")
    finders = getattr(cls, "leak_finders", None)
    if isinstance(finders, tuple):
        out += [f"leak_finders: {f!r} is not callable" for f in finders if not callable(f)]
    options = getattr(cls, "options", None)
    if isinstance(options, tuple):
        out += [f"options: {o!r} is not a ParamSpec" for o in options
                if not isinstance(o, ParamSpec)]
    for fact, words in (("networks", NETWORKS), ("storages", STORAGES)):
        said = getattr(cls, fact, None)
        if isinstance(said, tuple):
            if not said:
                out.append(f"{fact}: empty")
            out += [f"{fact}: {w!r} is not one of {', '.join(words)}" for w in said
                    if w not in words]
    version = getattr(cls, "version_command", None)
    if not callable(version):
        out.append("version_command(): not declared")
    else:
        try:
            v = version()
        except Exception as e:
            out.append(f"version_command(): raised {type(e).__name__}: {e}")
        else:
            if v is not None and not (isinstance(v, VersionCommand) and v.name and v.argv):
                out.append(f"version_command(): {v!r} is neither a VersionCommand nor None")
    for method in ("available", "start"):
        if getattr(cls, method, None) is getattr(EnvironmentBase, method):
            out.append(f"{method}(): not declared")
    return out


def register(cls: type[Environment]) -> type[Environment]:
    """Class decorator: record an environment kind in the registry (isotax.protocols)."""
    ENVIRONMENTS[cls.kind] = cls
    return cls


def gvisor_socket_stack(network: str) -> SocketStack:
    """What serves a gVisor sandbox's sockets: the host's stack through the Sentry on the
    host's network (hostinet), else gVisor's own netstack. Shared by every kind that can run
    runsc (the gvisor kind, and the engines with runtime = "runsc")."""
    return SocketStack.GVISOR_HOSTINET if network == "host" else SocketStack.GVISOR_NETSTACK
