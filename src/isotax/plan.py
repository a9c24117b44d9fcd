"""The plan file: environments x workloads x parameters, in TOML.

A plan is validated into frozen pydantic models. Every problem is reported as ONE line that
names the place in the file, the problem and the fix (PlanError); the CLI turns it into exit 2.

    name = "quick"
    seed = 1
    repetitions = 3          # measured repetitions per cell, interleaved across environments:
                             # the minimum per side before a verdict
    warmups = 1              # unmeasured runs per environment x workload, first
    timeout_s = 900          # one workload run
    restarts = 2             # an environment that dies (QEMU killed, ...) is restarted at most
                             # this often; past that its remaining cells fail, the run goes on
    parity = "refuse"        # unequal resources (host.facts.parity): refuse to run, or "flag"

    warmup_points = "workload"  # warm up each environment x workload once (or "point": each)

    [verdicts]               # optional: how each headline ratio is decided
    margin = "auto"          # equivalence margin (0.02 = ±2%); auto: max(2%, host's A/A noise)
    max_repetitions = 10     # above repetitions: add rounds where they decide a ratio
    budget_s = 300           # wall time the added rounds may take (optional)
    deadline_s = 540         # no added cell that would end after this much of the run (optional)

    [loadgen]                # optional: where network clients run (default: a network namespace
    host = "ssh://root@lg.example:22"   # on this host); a second machine reached over SSH
    key_file = "/root/.ssh/id_ed25519"  # optional: the SSH key (default: ssh's own choice)
    known_hosts = "/root/.ssh/known_hosts"  # optional: host keys checked strictly (default:
                             # ssh's own files); an unknown host key refuses the run
    install = true           # install the image's client tool versions there with apt where
                             # they differ (false: refuse instead)

    [image]                  # optional: the workload image every environment but native runs
    distribution = "trixie"  # its Debian release: bookworm | trixie (default: the host's own
                             # release when it is one of those, else bookworm); native uses the
                             # host's packages, so only the host's release gives the same bits

    [[environments]]
    name = "runc-bridge"     # a label, unique in the plan; "native" is the baseline by default
    kind = "runc"            # see `isotax envs`
    network = "bridge"       # host | bridge | none (a pod: pod | host | service)
    storage = "volume"       # volume | rootfs: where disk workloads write
    vcpus = 2                # optional; VMs get it as -smp, containers as a cpuset
    memory_mib = 2048
    numa_node = 0            # optional: CPUs and memory on this NUMA node (unset: scheduler)
    options = { accel = "auto" }   # kind-specific: each kind declares its own (see its module)
    optional = true          # may be skipped when unavailable here (default false: an
                             # environment that cannot start fails the run, naming the fix)

    [[workloads]]
    name = "compress"        # see `isotax workloads`
    params = { level = 2, threads = [1, 2] }   # a list is a sweep axis (cartesian product)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from isotax import protocols
from isotax.image import distribution

BUILTIN_PLANS = ("quick", "full", "layers", "contrasts", "kubernetes", "kubernetes-2node",
                 "pod-startup", "studies")
# The baseline's default: a plan *label* (an environment's name), not a kind. The built-in
# plans name their host environment so; a plan that names it otherwise sets `baseline`.
DEFAULT_BASELINE = "native"


class PlanError(Exception):
    """A plan that cannot run; the message is one line: where, what, and the fix."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EnvironmentEntry(_Frozen):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,23}$")
    kind: str
    # Checked against the kind's networks even when left at its default (a VM has no "host").
    network: Literal["host", "bridge", "none", "pod", "service"] = Field(
        default="host", validate_default=True)
    # Where disk workloads write: "volume" (native: a host directory; container: a bind-mounted
    # host directory; VM: a second virtio-blk disk) or "rootfs" (container: its layered
    # overlay rootfs; VM: its root disk). Same underlying host filesystem in every case.
    storage: Literal["volume", "rootfs"] = Field(default="volume", validate_default=True)
    vcpus: int | None = Field(default=None, ge=1, le=1024)
    memory_mib: int | None = Field(default=None, ge=128)
    # Pin the environment's CPUs and memory to this NUMA node; unset: the scheduler decides.
    numa_node: int | None = Field(default=None, ge=0, le=1023)
    # Kind-specific, each checked against what the kind declares (Environment.options).
    options: dict[str, Any] = Field(default_factory=dict)
    # May be skipped when it turns out unavailable here when the run starts (a yellow "not
    # run" line, the others measured); otherwise that fails the run, naming it and the fix.
    optional: bool = False

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        known = protocols.environment_kinds()
        if v not in known:
            raise ValueError(f"unknown environment kind {v!r}; use one of: {', '.join(known)}")
        return v

    @field_validator("network", "storage")
    @classmethod
    def _kind_can(cls, v: str, info: ValidationInfo) -> str:
        """A network or storage the kind declares it can do (a VM has no host network)."""
        kind = info.data.get("kind")  # absent: an unknown kind, reported on its own
        if kind is None:
            return v
        env = protocols.environments()[kind]
        can = env.networks if info.field_name == "network" else env.storages
        if v not in can:
            raise ValueError(f"kind {kind!r} cannot do {info.field_name} = {v!r}; use "
                             f"{' or '.join(repr(c) for c in can)}")
        return v

    @field_validator("options")
    @classmethod
    def _declared_options(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Each option one the kind declares, of the type and among the choices it says."""
        kind = info.data.get("kind")
        if kind is None:
            return v
        specs = {s.name: s for s in protocols.environments()[kind].options}
        for key, value in v.items():
            spec = specs.get(key)
            problem = spec.problem(value) if spec is not None else (
                f"is not an option of kind {kind!r}; its options: {', '.join(specs)}"
                if specs else f"is not an option: kind {kind!r} takes none; remove it")
            if problem:
                raise _at(key, problem)
        together = protocols.environments()[kind].options_problem(
            str(info.data.get("network", "")), v)
        if together:
            raise ValueError(together)
        return v


def _at(key: str, message: str) -> PydanticCustomError:
    """An error at `key` inside the field being validated (options.accel): parse_plan adds
    the key to the place it names."""
    return PydanticCustomError("plan_at", "{message}", {"at": key, "message": message})


class WorkloadEntry(_Frozen):
    name: str
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_workload(self) -> WorkloadEntry:
        known = protocols.workloads()
        if self.name not in known:
            raise ValueError(
                f"unknown workload {self.name!r}; use one of: {', '.join(sorted(known))}"
            )
        specs = {p.name: p for p in known[self.name].params}
        for key, value in self.params.items():
            if key not in specs:
                raise ValueError(
                    f"workload {self.name!r} has no parameter {key!r}; "
                    f"its parameters: {', '.join(specs) or 'none'}"
                )
            for v in value if isinstance(value, list) else [value]:
                problem = specs[key].problem(v)
                if problem:
                    raise ValueError(f"{self.name}.{key} = {problem}")
            if isinstance(value, list) and not value:
                raise ValueError(f"{self.name}.{key} is an empty sweep; give at least one value")
        return self

    def combinations(self) -> list[dict[str, Any]]:
        """Defaults overlaid with the plan's values, one dict per point of the sweep."""
        base = {p.name: p.default for p in protocols.workloads()[self.name].params}
        axes = {k: (v if isinstance(v, list) else [v]) for k, v in self.params.items()}
        keys = sorted(axes)
        out = []
        for values in itertools.product(*(axes[k] for k in keys)):
            out.append({**base, **dict(zip(keys, values, strict=True))})
        return out


class Verdicts(_Frozen):
    """[verdicts]: how every headline ratio to the baseline is decided (isotax.analysis.verdicts)
    and, when max_repetitions is above the plan's repetitions, where more interleaved rounds go
    after the fixed ones: to the ratios still undecided, the cheapest to decide first, until
    each is decided or cannot be within the cap, or the time is spent
    (isotax.analysis.sequential)."""

    # The equivalence margin, as a fraction of the ratio: "equivalent" means the whole
    # confidence sequence lies within ±margin. "auto": the larger of 2% and this host's A/A
    # noise floor for the workload point (from the run's own A/A copy with aa = true, else
    # from the newest stored A/A run of the same host).
    margin: float | Literal["auto"] = "auto"
    confidence: float = Field(default=0.95, ge=0.5, le=0.999)
    # Measured repetitions per point at most; above `repetitions`, rounds are added where
    # they decide something. Unset: the fixed rounds only.
    max_repetitions: int | None = Field(default=None, ge=1, le=1000)
    budget_s: float | None = None  # wall time of the added rounds' cells, at most
    # The whole run's wall time: no added cell starts unless, by its point's mean cell time,
    # it ends before this much has passed since the run started.
    deadline_s: float | None = None
    # Borrow each ratio's pair spread from this host's stored block-paired runs of the same
    # point (isotax.analysis.borrowing), where today's pairs do not refuse it.
    borrow: bool = True
    # Cell length (isotax.analysis.cell_length): a point whose first measured run in an
    # environment takes less than cell_s seconds runs its workload several times in each of
    # its cells there (enough to fill cell_s, at most runs_per_cell), and the cell's value
    # is their mean. 0: one run per cell.
    cell_s: float = Field(default=0.0, ge=0, le=3600)
    runs_per_cell: int = Field(default=8, ge=1, le=100)

    @field_validator("margin")
    @classmethod
    def _fraction(cls, v: float | str) -> float | str:
        if isinstance(v, float | int) and not 0 < v < 1:
            raise ValueError(f"{v!r} is not a fraction of the ratio; give e.g. 0.02 for ±2%, "
                             'or "auto"')
        return v

    @field_validator("budget_s", "deadline_s")
    @classmethod
    def _positive(cls, v: float | None) -> float | None:
        if v is not None and v <= 0:
            raise ValueError(f"{v!r} is no time; give seconds")
        return v


class TelemetrySettings(_Frozen):
    """[telemetry]: what isotax watches while each measured run runs (isotax.telemetry.observe)."""

    # Seconds between samples of /proc (per-CPU time, every thread, disks, links); 0 keeps
    # only the readings at both ends of the run.
    interval_s: float = Field(default=0.5, ge=0, le=60)
    # Host-wide perf software events (context switches, migrations, page faults) per run.
    perf: bool = True


class LoadGenSettings(_Frozen):
    """[loadgen]: where the network workloads' clients run (isotax.loadgen). No host: a
    network namespace on this host (the default); host = "ssh://[user@]HOST[:PORT]": a second
    machine over SSH, as the studies had; node = "NODE": a pod on that Kubernetes node (the
    second node of `isotax cluster up --nodes 2` is itx-node2), the second machine inside the
    cluster."""

    host: str | None = None
    node: str | None = Field(default=None, min_length=1, max_length=253)
    key_file: str | None = None
    known_hosts: str | None = None
    port: int | None = Field(default=None, ge=1, le=65535)  # overrides the URL's port
    install: bool = True
    # The seconds a connection (or a reconnection after a lost one) may take.
    connect_timeout_s: int = Field(default=10, ge=1, le=300)

    @field_validator("host")
    @classmethod
    def _ssh_url(cls, v: str | None) -> str | None:
        if v is not None:
            ssh_url_parts(v)  # raises ValueError naming the problem
        return v

    @model_validator(mode="after")
    def _one_place(self) -> LoadGenSettings:
        if self.host is not None and self.node is not None:
            raise ValueError("[loadgen] names both a host and a Kubernetes node; keep one "
                             "(host for a machine over SSH, node for a pod on that node)")
        return self

    @property
    def remote(self) -> bool:
        return self.host is not None

    def destination(self) -> tuple[str, str, int]:
        """(user, host, port) of the SSH load generator; user defaults to root, port to 22
        (or `port`)."""
        if self.host is None:
            raise ValueError("the load generator is local: it has no SSH destination")
        user, host, port = ssh_url_parts(self.host)
        return user, host, self.port or port


class ImageSettings(_Frozen):
    """[image]: the workload image (isotax.image). `distribution` is the Debian release it is
    built from (image.distribution.DISTRIBUTIONS); None: the host's own where isotax builds
    it, else image.distribution.FALLBACK. The run records which, and why."""

    distribution: str | None = None

    @field_validator("distribution")
    @classmethod
    def _known(cls, v: str | None) -> str | None:
        return None if v is None else distribution.check(v)


def ssh_url_parts(url: str) -> tuple[str, str, int]:
    """(user, host, port) of "ssh://[user@]host[:port]"; ValueError with the fix otherwise."""
    u = urlsplit(url)
    fix = 'write it as "ssh://root@HOST" or "ssh://USER@HOST:PORT"'
    if u.scheme != "ssh":
        raise ValueError(f"{url!r} is not an ssh:// URL; {fix}")
    try:
        port = u.port or 22
    except ValueError:
        raise ValueError(f"{url!r} has no valid port; {fix}") from None
    if not u.hostname or u.path not in ("", "/") or u.query or u.fragment or u.password:
        raise ValueError(f"{url!r} is not a plain SSH destination (a host, and optionally a "
                         f"user and a port, nothing else); {fix}")
    return u.username or "root", u.hostname, port


class Plan(_Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,47}$")
    description: str = ""
    seed: int = 1
    repetitions: int = Field(default=3, ge=1, le=1000)
    warmups: int = Field(default=1, ge=0, le=100)
    timeout_s: float = Field(default=900, gt=0)
    # An environment that dies mid-run (its QEMU, sandbox or daemon gone) fails the cell it
    # died in and is started again for its remaining cells, at most this many times; past that
    # (or when a restart fails) its remaining cells fail with the reason. The run goes on.
    restarts: int = Field(default=2, ge=0, le=100)
    baseline: str = DEFAULT_BASELINE
    # Environments with unequal CPUs, memory, THP, hugepages, MTU or NIC offloads (host.parity):
    # "refuse" stops the run before it measures; "flag" runs and lists them in the report.
    parity: Literal["refuse", "flag"] = "refuse"
    # A/A: the baseline runs a second time under the name "<baseline>-aa", interleaved like
    # every other environment, so the report can say how large a difference this host's noise
    # alone makes (the noise floor) and call anything smaller "within noise".
    aa: bool = False
    # Warm-ups run the first point of each environment x workload ("workload"), or every
    # point of its sweep ("point"): one warm-up primes caches, JITs and page cache for all.
    warmup_points: Literal["workload", "point"] = "workload"
    # "history": an environment x workload whose newest warm-up on this host (a stored run)
    # did not differ from its measured runs is not warmed up again; "always": every one is.
    warmups_from: Literal["history", "always"] = "history"
    verdicts: Verdicts = Field(default_factory=Verdicts)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    loadgen: LoadGenSettings = Field(default_factory=LoadGenSettings)
    image: ImageSettings = Field(default_factory=ImageSettings)
    environments: list[EnvironmentEntry] = Field(min_length=1)
    workloads: list[WorkloadEntry] = Field(min_length=1)

    @property
    def aa_name(self) -> str:
        return aa_name_of(self.baseline)

    @property
    def run_environments(self) -> list[EnvironmentEntry]:
        """What the run starts: the plan's environments, and the A/A copy of the baseline
        when `aa` is set."""
        return [*self.environments, *([_aa_entry(self)] if self.aa else [])]

    @model_validator(mode="after")
    def _consistent(self) -> Plan:
        names = [e.name for e in self.environments]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(
                f"environment name {sorted(dup)[0]!r} is used twice; names must be unique"
            )
        if self.baseline not in names:
            raise ValueError(
                f"the baseline {self.baseline!r} is not among the environments; add "
                f'[[environments]] name = "{self.baseline}" kind = "{_host_kind()}", or set '
                "baseline"
            )
        if any(e.optional for e in self.environments if e.name == self.baseline):
            raise ValueError(f"the baseline {self.baseline!r} is optional, but a run without "
                             "it has nothing to compare with; remove optional = true from it")
        if self.aa and self.aa_name in names:
            raise ValueError(f"aa = true runs the baseline again as {self.aa_name!r}, which is "
                             "already an environment's name; rename that environment")
        cap = self.verdicts.max_repetitions
        if cap is not None and cap < self.repetitions:
            raise ValueError(f"verdicts.max_repetitions ({cap}) is below repetitions "
                             f"({self.repetitions}), the fixed rounds every point gets; raise "
                             "it or lower repetitions")
        # A workload may be listed more than once (fio: sequential 1m and random 4k), but a
        # point of the matrix may not: it would be measured twice under one identity.
        seen: set[tuple[str, str]] = set()
        for w in self.workloads:
            for combo in w.combinations():
                point = (w.name, repr(sorted(combo.items())))
                if point in seen:
                    raise ValueError(
                        f"workload {w.name!r} lists the same parameters twice: "
                        f"{', '.join(f'{k}={v}' for k, v in sorted(combo.items()))}; "
                        "remove one entry or make their parameters differ"
                    )
                seen.add(point)
        return self


def _host_kind() -> str:
    """The kind that runs on the host itself (isolation host), for the baseline's fix."""
    return next(iter(protocols.kinds_with(protocols.Isolation.HOST)), "?")


def aa_name_of(baseline: str) -> str:
    """The A/A canary's environment name for a baseline (plan `aa`): "<baseline>-aa"."""
    return f"{baseline}-aa"


@dataclasses.dataclass(frozen=True)
class StoredPlan:
    """A stored run's plan read back for its report: typed, with the Plan model's own
    defaults. Through the model where the stored text still validates; else (a workload or
    an option this isotax no longer has) setting by setting, each default taken from the
    model's field, so that no reader spells a default again."""

    name: str
    repetitions: int
    baseline: str
    aa: bool
    warmup_points: str
    verdicts: Verdicts
    # The environments as written (name, kind, numa_node, options, ...): raw, since a stored
    # one may name a kind this isotax no longer has.
    environments: tuple[Mapping[str, Any], ...]
    workload_names: tuple[str, ...]  # in the plan's order

    @property
    def aa_name(self) -> str:
        return aa_name_of(self.baseline)

    @property
    def canary(self) -> str | None:
        """The A/A canary's environment name, None without one."""
        return self.aa_name if self.aa else None


def read_stored_plan(text: str) -> StoredPlan:
    """A stored plan's settings (StoredPlan); a text that is not TOML at all reads as the
    defaults (a store this isotax wrote always holds TOML)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        raw = {}
    envs = tuple(e for e in raw.get("environments", []) if isinstance(e, Mapping))
    names = tuple(str(w.get("name", "")) for w in raw.get("workloads", [])
                  if isinstance(w, Mapping))
    try:
        plan = Plan.model_validate(raw)
        return StoredPlan(plan.name, plan.repetitions, plan.baseline, plan.aa,
                          plan.warmup_points, plan.verdicts, envs, names)
    except ValidationError:
        pass
    fields = Plan.model_fields

    def setting(key: str, kind: type) -> Any:
        value = raw.get(key, fields[key].default)
        return value if isinstance(value, kind) else fields[key].default

    try:
        verdicts = Verdicts.model_validate(raw.get("verdicts") or {})
    except ValidationError:
        verdicts = Verdicts()
    return StoredPlan(str(raw.get("name", "")), setting("repetitions", int),
                      setting("baseline", str), setting("aa", bool),
                      setting("warmup_points", str), verdicts, envs, names)


def _aa_entry(plan: Plan) -> EnvironmentEntry:
    base = next(e for e in plan.environments if e.name == plan.baseline)
    return base.model_copy(update={"name": plan.aa_name})


def _where(loc: tuple[Any, ...], raw: Mapping[str, Any]) -> str:
    """Turn a pydantic location into the plan's words, e.g. environments[2] (\"vm\").kind."""
    parts: list[str] = []
    node: Any = raw
    for item in loc:
        if isinstance(item, int):
            label = ""
            if isinstance(node, list) and item < len(node) and isinstance(node[item], dict):
                label = f' ("{node[item].get("name", "")}")' if node[item].get("name") else ""
            parts[-1] += f"[{item}]{label}"
            node = node[item] if isinstance(node, list) and item < len(node) else None
        else:
            parts.append(str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return ".".join(parts)


def parse_plan(text: str, source: str = "plan") -> Plan:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PlanError(f"{source}: not valid TOML ({e}); fix the syntax at that place") from None
    if "adaptive" in raw:
        # [adaptive] narrowed intervals toward a width; [verdicts] decides each ratio instead.
        raise PlanError(f"{source}: adaptive: [adaptive] was replaced by [verdicts] (each ratio "
                        "decided sequentially); write [verdicts] with max_repetitions and "
                        "budget_s instead (target has no counterpart: margin is the "
                        "equivalence margin)")
    try:
        return Plan.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        where = _where(tuple(err["loc"]), raw)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "plan_at":  # a key inside the field (options.accel)
            where = f"{where}.{err.get('ctx', {}).get('at', '?')}"
        if err["type"] == "extra_forbidden":
            msg = "is not a plan setting; remove it or check its spelling"
        elif err["type"] == "missing":
            msg = "is required; add it"
        more = f" (and {len(e.errors()) - 1} more problem(s))" if len(e.errors()) > 1 else ""
        prefix = f"{source}: {where}: " if where else f"{source}: "
        raise PlanError(f"{prefix}{msg}{more}") from None


def plan_source(name_or_path: str) -> str:
    """How one-line errors name a plan given to load_plan: "built-in plan 'quick'", or its
    path."""
    if name_or_path in BUILTIN_PLANS and not Path(name_or_path).exists():
        return f"built-in plan {name_or_path!r}"
    return str(Path(name_or_path))


def load_plan(name_or_path: str) -> tuple[Plan, str]:
    """A built-in plan name (quick, full) or a path. Returns the plan and its exact text."""
    path = Path(name_or_path)
    if name_or_path in BUILTIN_PLANS and not path.exists():
        text = resources.files("isotax.plans").joinpath(f"{name_or_path}.toml").read_text()
        return parse_plan(text, plan_source(name_or_path)), text
    if not path.is_file():
        raise PlanError(
            f"plan {name_or_path!r} not found; "
            f"give a TOML file or one of: {', '.join(BUILTIN_PLANS)}"
        )
    try:
        # TOML is UTF-8 by definition: read it so, whatever the locale says.
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise PlanError(
            f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset {e.start}); "
            "save the plan as UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None
    except OSError as e:
        raise PlanError(f"{path}: cannot be read ({e.strerror}); give a readable TOML file"
                        ) from None
    return parse_plan(text, str(path)), text


def parse_budget(text: str) -> float:
    """Seconds of a --budget: "60m", "1h", "90s" or plain seconds; ValueError naming the fix."""
    units = {"s": 1, "m": 60, "h": 3600}
    t = text.strip().lower()
    unit = units.get(t[-1:])
    number = t[:-1] if unit is not None else t
    try:
        seconds = float(number) * (unit or 1)
    except ValueError:
        raise ValueError(f"--budget {text!r} is not a duration; give e.g. 60m, 1h or 600s") \
            from None
    if not 60 <= seconds <= 7 * 24 * 3600:
        raise ValueError(f"--budget {text!r} is outside 1 minute to 7 days; give e.g. 60m")
    return seconds


def with_budget(plan: Plan, seconds: float) -> Plan:
    """The plan with its run's wall time set to `seconds`: [verdicts] deadline_s is the budget
    and max_repetitions grows with it (the plan's cap times budget / its deadline, at least the
    plan's), so the added rounds may spend the whole budget where they decide most."""
    vs = plan.verdicts
    cap = vs.max_repetitions or plan.repetitions
    scale = seconds / vs.deadline_s if vs.deadline_s else 1.0
    grown = min(1000, max(cap, math.ceil(cap * scale), plan.repetitions + 1))
    return plan.model_copy(update={"verdicts": vs.model_copy(
        update={"deadline_s": seconds, "max_repetitions": grown})})

