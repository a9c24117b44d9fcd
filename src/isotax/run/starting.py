"""Starting a run's environments (the Runner's first step): each one started, its facts
stored with the load generator's path, its parity probe, its idle footprint and what it
showed it is (the identity check); an environment that cannot run is recorded with why, and
refuses the run unless the plan marks it optional."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from isotax import protocols
from isotax.facts import Facts
from isotax.host.facts import numa, parity
from isotax.host.facts.description import EnvironmentDescription
from isotax.image.artifacts import ImageArtifacts
from isotax.model import CellStatus
from isotax.plan import EnvironmentEntry, Plan
from isotax.protocols import (
    Availability,
    ElsewhereNode,
    Environment,
    EnvSpec,
    Evidence,
    ExecError,
    Instance,
    Isolation,
    LoadGen,
    NodeIdentity,
    PlatformLost,
    Unavailable,
)
from isotax.run import identity
from isotax.run.lines import cannot_run, emulation_notice
from isotax.run.tools import tool_versions
from isotax.store.base import EnvRecord, Store
from isotax.telemetry import footprint


@dataclass
class Started:
    """An environment the run started, and its workload points' preparation."""

    instance: Instance
    # workload|params_key -> None once prepared, or why every cell of that point ends at once
    # (its preparation failed, or the point does not apply to this environment)
    prepared: dict[str, tuple[CellStatus, str] | None] = field(default_factory=dict)


class EnvironmentStarter:
    """The run's environments, started (the Runner's first step) and kept: what each one is
    (described), what it showed it is (isolation), and those that are not what the plan
    declares (mislabelled). The Runner asks it for a start, a restart or a launch's spec."""

    def __init__(self, plan: Plan, store: Store, image: ImageArtifacts,
                 log: Callable[[str], None]) -> None:
        self.plan, self.store, self.image, self.log = plan, store, image, log
        self.started: dict[str, Started] = {}
        # Per started environment, what the run found it to be (its EnvRecord's description).
        self.described: dict[str, EnvironmentDescription] = {}
        # What each started environment showed it is (run.identity), for telemetry: where its
        # work shows. Its kind's declared isolation where it could not show it (the run is
        # refused then, before any cell).
        self.isolation: dict[str, Isolation] = {}
        # Environments that are not what the plan declares (identity.py): they fail the run.
        self.mislabelled: list[str] = []
        self.host_identity = identity.host_facts()  # what every instance is compared with

    def start_all(self, run_id: str, workdir: Path, loadgen: LoadGen | None) -> str:
        """Start the plan's environments under workdir, each recorded in the store as it
        starts (or with why it cannot run); "" or the refusal, in one line, of a run whose
        needed environment cannot run here (what started is in self.started)."""
        kinds = protocols.environments()
        envs = {e.name: kinds[e.kind]() for e in self.plan.run_environments}
        avail = {name: env.available() for name, env in envs.items()}
        # Before anything starts, what an environment available here has to say in advance
        # (a VM's accelerator: "TCG here, because ..."), one line each.
        for name, a in avail.items():
            if a.ok and a.reason:
                self.log(f"{name}: {a.reason}")
        # An environment the plan needs (not `optional`) that cannot run here refuses the run
        # before anything is started or measured; an optional one is skipped, said in yellow.
        needed = [e for e in self.plan.run_environments
                  if not avail[e.name].ok and not e.optional]
        for entry in needed:
            self.store.put_environment(EnvRecord(
                run_id, entry.name, entry.kind, False, f"unavailable: {avail[entry.name]}",
                EnvironmentDescription.unstarted(), {}, {}))
        if needed:
            return cannot_run(needed[0], f"unavailable: {avail[needed[0].name]}",
                              len(needed) - 1)
        for entry in self.plan.run_environments:
            started = self.start_one(entry, envs[entry.name], avail[entry.name], workdir)
            if isinstance(started, str):
                self.store.put_environment(EnvRecord(
                    run_id, entry.name, entry.kind, False, started,
                    EnvironmentDescription.unstarted(), {}, {}))
                if not entry.optional:
                    return cannot_run(entry, started)
                self.log(f"[yellow]{entry.name}: not run: {started}[/]")
                continue
            self.started[entry.name] = Started(started)
            ready = started.milestones.get("ready", float("nan"))
            self.log(f"{entry.name}: ready in {ready:.2f} s")
            facts = started.facts()
            emulated = emulation_notice(entry.name, facts)
            if emulated:
                self.log(f"[yellow]{emulated}[/]")
            resources, unprobed = None, ""
            try:
                resources = parity.probe(started)
            except (ValueError, ExecError) as e:
                unprobed = str(e)
            node = started.node_identity() if isinstance(started, ElsewhereNode) else None
            shown = self._prove_identity(entry.name, started, facts, node)
            describe = EnvironmentDescription(
                facts, loadgen_path=loadgen.path(started) if loadgen else "",
                resources=resources, resources_error=unprobed,
                host_memory=footprint.idle_words(started),
                isolation=self.isolation[entry.name] if shown is not None else None,
                evidence=shown, node=node)
            self.described[entry.name] = describe
            self.store.put_environment(EnvRecord(
                run_id, entry.name, entry.kind, True, "", describe,
                tool_versions(started, self.plan), dict(started.milestones)))
            started.pause()
        return ""

    def restarted(self, name: str, inst: Instance, loadgen: LoadGen | None) -> None:
        """A dead environment's new instance: its facts and path are the new one's; its
        probes stand from its first start."""
        self.started[name].instance = inst
        self.started[name].prepared = {}
        self.described[name] = replace(
            self.described.get(name) or EnvironmentDescription(inst.facts()),
            facts=inst.facts(), loadgen_path=loadgen.path(inst) if loadgen is not None else "")

    def _prove_identity(self, name: str, inst: Instance, facts: Facts,
                        node: NodeIdentity | None) -> Evidence | None:
        """What the instance shows of itself (None where it could not show it), and in
        self.isolation what that makes it; a mismatch with what it declares is kept in
        self.mislabelled and refuses the run. An instance on another machine (node) is
        compared with that machine's kernel and boot (its Node object's), not this host's."""
        host = self.host_identity
        try:
            shown = identity.probe(inst)
        except (ValueError, ExecError) as e:
            self.isolation[name] = identity.declared(facts) or Isolation.CONTAINER
            self.mislabelled.append(f"{name}: could not show what it is ({e})")
            return None
        if node is not None:
            host = node.as_host(shown.version)
        self.isolation[name] = identity.detected(shown, host)
        wrong = identity.mismatch(facts, shown, host)
        if wrong:
            self.mislabelled.append(f"{name}: {wrong}")
        return shown

    def spec(self, entry: EnvironmentEntry, workdir: Path) -> EnvSpec:
        """The EnvSpec of a plan entry, its instance's files under workdir."""
        return EnvSpec(
            name=entry.name, kind=entry.kind, image=self.image,
            workdir=workdir, vcpus=entry.vcpus, memory_mib=entry.memory_mib,
            network=entry.network, storage=entry.storage, numa_node=entry.numa_node,
            options=dict(entry.options),
        )

    def start_one(self, entry: EnvironmentEntry, env: Environment, avail: Availability,
                  workdir: Path) -> Instance | str:
        """A started instance of env (whose availability here is avail), or why the
        environment cannot run here."""
        if not avail.ok:
            return f"unavailable: {avail}"
        if entry.numa_node is not None:
            host_nodes = numa.nodes()
            if entry.numa_node not in host_nodes:
                return (f"unavailable: NUMA node {entry.numa_node} does not exist here (nodes: "
                        f"{', '.join(map(str, host_nodes)) or 'none'}); fix numa_node")
            if not env.supports_numa:  # the kind's declared fact
                return (f"unavailable: {entry.kind} does not place CPUs and memory on a NUMA "
                        "node yet; remove numa_node for it")
        spec = self.spec(entry, workdir / entry.name)
        spec.workdir.mkdir(parents=True, exist_ok=True)
        self.log(f"starting {entry.name} ({entry.kind}) ...")
        try:
            return env.start(spec)
        except Unavailable as e:
            return f"unavailable: {e.availability}"
        except PlatformLost:
            raise  # the run stops: no environment of the kind can start now
        except Exception as e:
            # One environment that fails to start must not cost the others their results;
            # start() removes what it made before raising.
            return f"failed to start: {type(e).__name__}: {e}"
