"""One environment as a run found it, typed: its facts (isotax.facts), the load generator's
path to it, its resources as the parity probe saw them (or why they could not be probed),
what it holds on the host when idle, and what it showed it is (the identity check).

The runner builds one per started environment and keeps it typed; the store keeps it as the
environments row's describe_json (its report lines, the typed facts under FACTS_KEY, the
parity probe's "parity.*" lines), and `EnvironmentDescription.from_stored` is the one place
that reads such a row back, runs stored by older versions of isotax included. Nothing else
reads a stored description's keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from isotax.facts import Facts, display_lines, stored_description, stored_facts
from isotax.host.parity import Resources, problems

# The stored lines the runner adds to the facts' own (their keys are the stored format's).
LOADGEN_PATH = "loadgen_path"
PARITY_ERROR = "parity.error"
HOST_MEMORY = "host_memory"
IDENTITY = "identity"


@dataclass(frozen=True)
class EnvironmentDescription:
    facts: Facts
    loadgen_path: str = ""  # the load generator's path to it, in words ("" without one)
    resources: Resources | None = None  # the parity probe's; None where it could not run
    resources_error: str = ""  # why the probe failed, where it did
    host_memory: str = ""  # what it holds on the host when idle, in words
    identity: str = ""  # "<isolation>: <what it showed>", "" where it could not show it
    # The describe_json a store gave (from_stored), kept verbatim: an older run's lines are
    # shown as it wrote them, and a run copied to another store keeps its row as it was.
    # None for a description the runner built: lines() words it from the fields.
    stored: Mapping[str, Any] | None = field(default=None, compare=False)

    def lines(self) -> dict[str, str]:
        """The report's lines for the environment, name -> words."""
        return display_lines(self.to_stored())

    def to_stored(self) -> dict[str, Any]:
        """The environments row's describe_json (a stored one as it was): the facts' display
        lines, the typed facts under FACTS_KEY, then the runner's lines."""
        if self.stored is not None:
            return dict(self.stored)
        out = stored_description(self.facts)
        if self.loadgen_path:
            out[LOADGEN_PATH] = self.loadgen_path
        if self.resources is not None:
            out.update(self.resources.as_describe())
        if self.resources_error:
            out[PARITY_ERROR] = self.resources_error
        if self.host_memory:
            out[HOST_MEMORY] = self.host_memory
        if self.identity:
            out[IDENTITY] = self.identity
        return out

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> EnvironmentDescription:
        """A stored describe_json read back; an environment that never started (an empty
        description) reads as facts of kind "?" and nothing else."""
        lines = display_lines(stored)
        return cls(facts=stored_facts(stored), loadgen_path=lines.get(LOADGEN_PATH, ""),
                   resources=Resources.from_describe(lines),
                   resources_error=lines.get(PARITY_ERROR, ""),
                   host_memory=lines.get(HOST_MEMORY, ""), identity=lines.get(IDENTITY, ""),
                   stored=dict(stored))

    @classmethod
    def unstarted(cls) -> EnvironmentDescription:
        """An environment that never started: nothing is known of it (stored as {})."""
        return cls.from_stored({})

    @classmethod
    def of_facts(cls, facts: Facts) -> EnvironmentDescription:
        """What is known of an instance before the runner has probed it: its facts."""
        return cls(facts=facts)


def parity_problems(described: Mapping[str, EnvironmentDescription], baseline: str
                    ) -> list[tuple[str, str]]:
    """(environment, problem) for every difference from the baseline's resources
    (isotax.host.parity.problems), and each environment whose resources could not be
    probed."""
    base = described.get(baseline)
    out: list[tuple[str, str]] = []
    for name, d in described.items():
        if name == baseline:
            continue
        if d.resources_error:
            out.append((name, f"{name}: resources could not be probed: {d.resources_error}"))
            continue
        if base is not None and base.resources is not None and d.resources is not None:
            out += [(name, p) for p in problems(name, d.resources, baseline, base.resources,
                                                d.facts, base.facts)]
    return out
