"""What a run's metadata holds, key by key: the typed schema of each value (pydantic). A value
is checked against its key's schema when it is stored (Store.put_run_meta: an unknown key, or
a value that does not fit, is refused with the key named), and read back typed (RunMeta). A
stored value that no longer fits (a run stored by an older isotax) reads as absent, never as
a crash; copying a run between stores keeps its values verbatim (verbatim=True).

Each schema names the fields its readers use, typed; the producers' other fields are kept
(extra="allow"), so a producer may add one without a change here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Generic, Literal, TypeVar, cast, overload

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from isotax.protocols.loadgen_description import LoadGenDescription

T = TypeVar("T")


class _Part(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Phases(_Part):
    """Where the run's wall time went (isotax.run.clock), and the report's time."""

    wall_s: float | None = None
    report_s: float | None = None
    seconds: dict[str, float] = {}


# The load generator the results used: its own description (LoadGen.describe()), declared
# beside the LoadGen protocol it belongs to.
LoadGenMeta = LoadGenDescription


class KubernetesMeta(_Part):
    """The cluster a run's pods ran on when it was not the local one (isotax run
    --kubeconfig): a resumed run goes back to it."""

    kubeconfig: str
    pod_image: str = ""


class ImageMeta(_Part):
    """The workload image the run's environments (all but native) ran: its recipe hash, its
    Debian release and why that one (isotax.image.distribution.Choice.meta), and the host's
    release beside it. Absent in runs stored before the release was a choice (bookworm)."""

    hash: str = ""
    kernel: str = ""
    distribution: str = ""
    version: str = ""
    chosen_by: str = ""  # plan, option, host or fallback
    host_distribution: str = ""  # "" where the host is no release isotax builds
    host_os: str = ""

    def words(self) -> str:
        """"Debian 13 (trixie)", or "" for a run that recorded none."""
        return f"Debian {self.version} ({self.distribution})" if self.distribution else ""

    def line(self) -> str:
        """The report header's sentence: which release, why, and whether native's tools can
        be the image's versions; "" for a run that recorded no release."""
        if not self.distribution:
            return ""
        why = {"plan": "chosen by the plan's [image] distribution",
               "option": "chosen by --distribution",
               "host": "the host's own release",
               "fallback": "isotax's default for a host of another release"}.get(
                   self.chosen_by, self.chosen_by)
        out = (f"Workload image: {self.words()}, {why} (recipe {self.hash or '?'}, kernel "
               f"{self.kernel or '?'}).")
        if self.host_distribution != self.distribution:
            out += (f" The host is {self.host_os or 'another release'}: native ran the "
                    "host's packages, not the image's versions.")
        return out


class VersionsMeta(_Part):
    """The Python and host tool versions the run used (isotax.host.facts.versions.record)."""

    python: str = "?"
    python_packages: dict[str, str]
    host_tools: dict[str, str] = {}


class DeathMeta(_Part):
    """An environment that died mid-run, and what came of it (isotax.run.restarts.Death)."""

    environment: str = "?"
    cell: str = ""
    why: str = ""
    outcome: str = ""


class ReachMeta(_Part):
    """What this host's run could decide (isotax.analysis.reach), in numbers and words."""

    sd: float | None = None
    pairs: int | None = None
    smallest: float | None = None
    budget_5pct_s: float | None = None
    budget_5pct_by_workload_s: dict[str, float | None] = {}
    words: str = ""


class RatioMeta(_Part):
    """One headline ratio's verdict as the run ended it (sequential.ratio_fields)."""

    environment: str = ""
    workload: str = ""
    params: str = ""
    metric: str = ""
    verdict: str = ""
    margin: float | None = None
    margin_source: str = ""
    pairs: int | None = None
    # What it borrowed (isotax.analysis.borrowing): absent in runs stored before borrowing.
    borrowed_dof: float | None = None
    borrowed_ss: float | None = None
    borrowed_from: str = ""
    borrowed_runs: list[str] = []  # the stored runs it came from, newest first (absent before)
    # The confidence sequence's mixture width (verdicts.prior_width): absent before it was
    # chosen per ratio, when every ratio had verdicts.PRIOR_G.
    prior_g: float | None = None


class SequentialMeta(_Part):
    """The verdicts and the added rounds (isotax.analysis.sequential.to_meta)."""

    settings: dict[str, Any] = {}
    repetitions: int | None = None
    max_repetitions: int | None = None
    ended: str | None = None
    rounds: int = 0
    added_cells: int = 0
    spent_s: float = 0.0
    decided: int | None = None
    total: int | None = None
    counts: dict[str, int] = {}
    ratios: list[RatioMeta] = []


class ConcurrentRun(_Part):
    """Another run that measured on this host while cells of this one ran."""

    pid: int | None = None
    cells: list[str] = []


class FleetMeta(_Part):
    """Which fleet a host's run belongs to, and the host's machine."""

    id: str = ""
    host: str = ""
    address: str = ""
    machine: dict[str, Any] = {}


class ClaimsMeta(_Part):
    """What `isotax claims` measured a run for: each claims file's text by the name it was
    given (a user's; the built-in ones ship with isotax), so that its report judges them
    again, and why the host had no KVM, so that a KVM claim it left out reads as not
    measurable here."""

    files: dict[str, str] = {}
    no_kvm: str = ""  # why the host had no KVM when it planned the run ("" where it had)


SCHEMA: dict[str, Any] = {
    "budget_s": float,  # --budget: the deadline a resumed run keeps
    "pairing": Literal["blocks", "shuffled rounds"],  # how rounds paired environments
    "concurrent": dict[str, ConcurrentRun],  # run id -> what measured beside this one
    "fingerprint_forced": list[str],  # host differences a --resume --force mixed in
    "loadgen": LoadGenMeta,
    "kubernetes": KubernetesMeta,
    "phases": Phases,
    "reach": ReachMeta,
    "sequential": SequentialMeta,
    "restarts": list[DeathMeta],  # isotax.run.restarts: each death and restart
    "image": ImageMeta,  # the workload image: hash, Debian release, why that one
    "versions": VersionsMeta,  # isotax.host.facts.versions: packages and tools the run used
    "cell_runs": dict[str, int],  # isotax.analysis.cell_length: runs per cell, per point
    "fleet": FleetMeta,
    "claims": ClaimsMeta,  # isotax claims: the claims files the run was measured for
    "adaptive": dict[str, Any] | None,  # the added rounds' meta before issue 28 (read: none)
}


@cache
def _adapter(key: str) -> TypeAdapter[Any]:
    return TypeAdapter(SCHEMA[key])


def check(key: str, value: Any) -> None:
    """ValueError unless `value` fits `key`'s schema; one line naming the key."""
    if key not in SCHEMA:
        raise ValueError(f"run meta key {key!r} has no schema (isotax.store.run_meta.SCHEMA: "
                         f"{', '.join(sorted(SCHEMA))})")
    try:
        _adapter(key).validate_python(value)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "value"
        raise ValueError(f"run meta {key!r}: {where}: {first.get('msg')}") from e


class MetaKey(Generic[T]):
    """One key of RunMeta, read typed under its own attribute name: the stored value where it
    fits SCHEMA, else what `empty` makes (None without one)."""

    def __init__(self, empty: Callable[[], T] | None = None) -> None:
        self.empty = empty
        self.key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.key = name

    @overload
    def __get__(self, meta: None, owner: type) -> MetaKey[T]: ...

    @overload
    def __get__(self, meta: RunMeta, owner: type) -> T: ...

    def __get__(self, meta: RunMeta | None, owner: type) -> MetaKey[T] | T:
        if meta is None:
            return self
        value = meta.typed(self.key)
        if value is None and self.empty is not None:
            return self.empty()
        return cast(T, value)


@dataclass(frozen=True)
class RunMeta:
    """A run's metadata read back typed: each key's value, or None where the run has none (or
    an older isotax stored one that no longer fits)."""

    raw: Mapping[str, Any]

    def typed(self, key: str) -> Any:
        if key not in self.raw or key not in SCHEMA:
            return None
        try:
            return _adapter(key).validate_python(self.raw[key])
        except ValidationError:
            return None

    # The keys readers use, each under its SCHEMA name. Unannotated on purpose: descriptors,
    # not dataclass fields. A list or dict key reads empty where the run has none.
    budget_s = MetaKey[float | None]()
    pairing = MetaKey[str | None]()
    phases = MetaKey[Phases | None]()
    reach = MetaKey[ReachMeta | None]()
    sequential = MetaKey[SequentialMeta | None]()
    fleet = MetaKey[FleetMeta | None]()
    claims = MetaKey[ClaimsMeta | None]()
    loadgen = MetaKey[LoadGenMeta | None]()
    image = MetaKey[ImageMeta | None]()
    versions = MetaKey[VersionsMeta | None]()
    restarts = MetaKey[list[DeathMeta]](list)
    concurrent = MetaKey[dict[str, ConcurrentRun]](dict)
    fingerprint_forced = MetaKey[list[str]](list)
    cell_runs = MetaKey[dict[str, int]](dict)
