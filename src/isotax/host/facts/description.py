"""One environment as a run found it, typed (EnvironmentDescription): its facts
(isotax.facts), the load generator's path to it, its resources as the parity probe saw them
(or why they could not be probed), what it holds on the host when idle, what it showed it is
(the identity probe's evidence and the isolation detected from it) and, for an instance on
another machine, that machine.

The runner builds one per started environment (run/starting.py) and keeps it typed; parity,
the analysis and the report read it. The store keeps it as the environments row's
describe_json:

    {<the report's lines>..., "facts": {<Facts, versioned>}, "record": {<the rest, versioned>}}

The report's lines are words (the facts' display, "loadgen_path", the probe's "parity.*",
"host_memory", "identity"); the typed parts sit under FACTS_KEY and RECORD_KEY, and nothing
is read back from the words. `EnvironmentDescription.from_stored` is the one reader of such a
row, and `_converted` the one converter of a row stored before the resources were typed (no
RECORD_KEY "resources"; before issue 42): its parity lines give the resources back, its
identity words stay words (no evidence, isolation or node), and its facts are read by
isotax.facts.stored_facts, from its words where it has no FACTS_KEY. A stored row is kept as
it was: copied to another store, it is written back verbatim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from isotax.facts import FACTS_KEY, Facts, stored_description, stored_facts
from isotax.host.facts.parity import Resources, problems
from isotax.protocols import Evidence, Isolation, NodeIdentity

RECORD_KEY = "record"  # where a stored description keeps the record's typed parts
RECORD_VERSION = 2  # 1: issue 42 (isolation, evidence, node); 2: the resources, typed

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
    isolation: Isolation | None = None  # what the identity check found it is
    evidence: Evidence | None = None  # what it showed of itself (None: it could not show)
    node: NodeIdentity | None = None  # the machine it runs on, where that is not this host
    # The describe_json a store gave (from_stored), kept verbatim: an older run's lines are
    # shown as it wrote them, and a run copied to another store keeps its row as it was.
    # None for a description the runner built: its lines are worded from the fields.
    stored: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def identity(self) -> str:
        """"<isolation>: <what it showed>", "" where it could not show it."""
        if self.isolation is not None and self.evidence is not None:
            return f"{self.isolation}: {self.evidence.words()}"
        return str((self.stored or {}).get(IDENTITY, ""))

    def lines(self) -> dict[str, str]:
        """The report's lines for the environment, name -> words."""
        return _words(self.to_stored())

    def to_stored(self) -> dict[str, Any]:
        """The environments row's describe_json (a stored one as it was)."""
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
        out[RECORD_KEY] = {
            "version": RECORD_VERSION,
            "isolation": self.isolation.value if self.isolation is not None else None,
            "evidence": dataclasses.asdict(self.evidence) if self.evidence else None,
            "node": dataclasses.asdict(self.node) if self.node else None,
            "resources": dataclasses.asdict(self.resources) if self.resources else None,
        }
        return out

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any]) -> EnvironmentDescription:
        """A stored describe_json read back and checked; ValueError naming the field where
        it does not hold what isotax writes (a row from elsewhere). An environment that never
        started (an empty description) reads as facts of kind "?" and nothing else."""
        lines = _words(stored)
        try:
            facts = stored_facts(stored)
        except (ValueError, TypeError) as e:
            raise ValueError(f"its facts do not hold what isotax writes ({e})") from None
        record = stored.get(RECORD_KEY)
        isolation = evidence = node = None
        if record is not None:
            isolation, evidence, node = _record_parts(record)
        if isinstance(record, Mapping) and "resources" in record:
            resources = _resources(record["resources"])
        else:
            resources = _converted(lines)
        return cls(facts=facts, loadgen_path=lines.get(LOADGEN_PATH, ""),
                   resources=resources, resources_error=lines.get(PARITY_ERROR, ""),
                   host_memory=lines.get(HOST_MEMORY, ""), isolation=isolation,
                   evidence=evidence, node=node, stored=dict(stored))

    @classmethod
    def unstarted(cls) -> EnvironmentDescription:
        """An environment that never started: nothing is known of it (stored as {})."""
        return cls.from_stored({})


def _words(stored: Mapping[str, Any]) -> dict[str, str]:
    """A stored description's report lines: all but its typed parts."""
    return {k: str(v) for k, v in stored.items() if k not in (FACTS_KEY, RECORD_KEY)}


def _record_parts(record: Any) -> tuple[Isolation | None, Evidence | None, NodeIdentity | None]:
    """RECORD_KEY's typed parts; ValueError naming what does not fit."""
    if not isinstance(record, Mapping):
        raise ValueError(f"{RECORD_KEY!r} is not an object")
    version = record.get("version")
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"{RECORD_KEY}.version is {version!r}, not a version isotax writes")
    iso = record.get("isolation")
    if iso is not None and iso not in {i.value for i in Isolation}:
        raise ValueError(f"{RECORD_KEY}.isolation is {iso!r}, not one of "
                         f"{', '.join(i.value for i in Isolation)}")

    def strings(name: str, cls: type[Any]) -> Any:
        raw = record.get(name)
        if raw is None:
            return None
        names = [f.name for f in dataclasses.fields(cls)]
        if not isinstance(raw, Mapping) or any(not isinstance(raw.get(n), str) for n in names):
            raise ValueError(f"{RECORD_KEY}.{name} is not an object of the strings "
                             f"{', '.join(names)}")
        return cls(**{n: raw[n] for n in names})

    return (Isolation(iso) if iso is not None else None, strings("evidence", Evidence),
            strings("node", NodeIdentity))


def _resources(raw: Any) -> Resources | None:
    """RECORD_KEY's resources, typed; ValueError naming what does not fit."""
    if raw is None:
        return None
    kinds: dict[str, tuple[type, ...]] = {
        "cpus": (int,), "memory_mib": (int,), "thp": (str,), "mtu": (int, type(None)),
        "offloads": (dict,), "hugepages": (str,), "cpu_quota": (int, float, type(None)),
        "cgroup": (str,),
        "shm_mib": (int, type(None))}  # absent (None) in a record stored before the probe had it
    if not isinstance(raw, Mapping):
        raise ValueError(f"{RECORD_KEY}.resources is not an object")
    for name, types in kinds.items():
        value = raw.get(name)
        if isinstance(value, bool) or not isinstance(value, types):
            raise ValueError(f"{RECORD_KEY}.resources.{name} is {value!r}, not what the "
                             "parity probe gives")
    offloads = raw["offloads"]
    if any(not isinstance(v, str) for v in offloads.values()):
        raise ValueError(f"{RECORD_KEY}.resources.offloads holds a value that is no word")
    quota = raw["cpu_quota"]
    return Resources(raw["cpus"], raw["memory_mib"], raw["thp"], raw["mtu"], dict(offloads),
                     raw["hugepages"], float(quota) if quota is not None else None,
                     raw["cgroup"], raw.get("shm_mib"))


def _converted(lines: Mapping[str, str]) -> Resources | None:
    """The resources of a row stored before they were typed, from its parity lines (the one
    place they are read back); ValueError where those lines are not the probe's."""
    try:
        return Resources.from_describe(lines)
    except (ValueError, KeyError) as e:
        raise ValueError(f"its parity lines do not hold the probe's resources ({e})") from None


def parity_problems(described: Mapping[str, EnvironmentDescription], baseline: str
                    ) -> list[tuple[str, str]]:
    """(environment, problem) for every difference from the baseline's resources
    (isotax.host.facts.parity.problems), and each environment whose resources could not be
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
