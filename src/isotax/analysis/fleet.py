"""A fleet side by side: one plan run on every host of an inventory (isotax fleet), each
host's isolation tax per environment x workload point x metric, and which hosts differ.

A host's tax is its run's ratio to its own baseline (analyze(): mean in the environment over
mean natively on that host, with its interval and verdict). Whether two hosts' taxes differ is
judged on the ratio of the two taxes by the verdicts' own machinery
(isotax.analysis.between_runs): for a point's headline metric, each host's sequential verdict
(its round-paired log ratios and their confidence sequence, at 2.5% each: together 95%); for
another metric, each of the four groups of values with its confidence sequence at 1.25%. A
host "differs" when that verdict is worse or better against the margin (the larger of the two
hosts' verdict margins for the point, at least verdicts.MIN_MARGIN): the whole interval beyond
it. The row is "equivalent" when every host is decided within the margin, "undecided"
otherwise. Both hold however many rounds each run added before it stopped; the percentile
bootstrap of the four groups that this replaced (2026-11-29) did not, and was too narrow at a
handful of repetitions. Why not "the two hosts' intervals do not overlap": that rule is far
stricter than 95% (two equal 95% intervals only part at about p = 0.006, Schenker & Gentleman
2001). Every host is compared with one reference host (the first in inventory order unless
chosen), not every pair with every other: n - 1 comparisons per row instead of n(n-1)/2, fewer
chance findings (each is still a 5% test: with many hosts and metrics expect an occasional
false "differs"), and one reading: "h3's tax is 0.8x h1's". Where the reference did not
measure a row, the first host that did stands in for that row.

Runs of different plans (their plan text differs) are not put side by side unless forced: the
same environment name could be configured otherwise. The host fingerprint facts that differ
from the reference's (host.fingerprint) are listed, not refused: they are what a fleet shows.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import stats as sps

from isotax.analysis.between_runs import tax_change, taxes_unpaired
from isotax.analysis.report_data import Cell, ReportData, Row
from isotax.analysis.report_warnings import ReportWarning
from isotax.analysis.sequential import RatioState
from isotax.analysis.stats import BOOTSTRAP_RESAMPLES, CONFIDENCE, Ratio
from isotax.analysis.verdicts import MIN_MARGIN, RatioVerdict
from isotax.host.facts.fingerprint import fingerprint_differences
from isotax.model import FORMAT_VERSION, RunStatus
from isotax.store.base import Store, StoreError
from isotax.store.run_meta import RunMeta

DIFFERS = "differs beyond the margin"
WITHIN = "equivalent"
FEW = "undecided"
ONE_HOST = "one host only"
NO_RATIO = "no ratio"  # no host's baseline had a mean to divide by
FLEET_FORMAT = 2  # fleet.json's own version: bump on any change to its fields' meaning (2:
# a host's tax over the reference's is judged by confidence sequences, not a bootstrap)
# A run's warnings that the fleet report repeats per host: what makes a host's taxes differ
# for a reason other than the machine (Fleet.flagged).
FLAGGED = frozenset({ReportWarning.PARITY, ReportWarning.FINGERPRINT_FORCED,
                     ReportWarning.VERSION_MISMATCH, ReportWarning.CONCURRENT})


class FleetError(Exception):
    """A fleet that cannot be reported as asked: one line naming the problem and the fix."""


class NotSideBySide(FleetError):
    """The hosts' runs ran different plans; the message names each and the fix."""


@dataclass(frozen=True)
class HostRun:
    """One host of the fleet: its run (None when it has none in the store) and how it went."""

    name: str
    run_id: str | None
    address: str = ""
    status: str = ""  # the run's status, or the fleet's word for a host without a run
    reason: str = ""
    # The machine it is (machine-id, boot_id: isotax.fleet.machines), as the fleet found it;
    # empty where unknown (runs put side by side with --runs, a fleet before this was kept).
    machine: Mapping[str, str] = field(default_factory=dict)


def apart(vs: Ratio | None) -> bool:
    """A host's tax over the reference's decided worse or better (beyond the margin)."""
    return vs is not None and vs.verdict in ("worse", "better")


@dataclass(frozen=True)
class HostTax:
    tax: Ratio | None  # the environment over the host's baseline (None: no baseline mean)
    n: int  # repetitions in the environment
    n_baseline: int
    emulated: bool  # the environment ran under TCG on this host
    vs_reference: Ratio | None = None  # this tax over the row's reference host's tax


@dataclass
class FleetRow:
    environment: str
    workload: str
    params_key: str
    metric: str
    unit: str
    higher_is_better: bool
    sweep: str  # the sweep's words for this point (threads=8), "" when it has no sweep
    headline: bool  # the point's headline metric (its first)
    reference: str | None = None  # the host the others are compared with here
    taxes: dict[str, HostTax] = field(default_factory=dict)  # in host order

    @property
    def differs(self) -> list[str]:
        """The hosts whose tax is decided worse or better than the reference's."""
        return [h for h, t in self.taxes.items() if apart(t.vs_reference)]

    @property
    def verdict(self) -> str:
        if self.reference is None:
            return NO_RATIO
        compared = [t.vs_reference for h, t in self.taxes.items() if h != self.reference]
        if not compared:
            return ONE_HOST
        if self.differs:
            return DIFFERS
        if all(r is not None and r.verdict == "equivalent" for r in compared):
            return WITHIN
        return FEW


@dataclass
class Fleet:
    fleet_id: str
    reference: str
    hosts: list[HostRun]  # every host, inventory order, those without a run included
    data: dict[str, ReportData]  # per host with a run
    baseline: str
    environments: list[str] = field(default_factory=list)
    rows: list[FleetRow] = field(default_factory=list)
    host_differences: dict[str, list[str]] = field(default_factory=dict)  # vs the reference
    plans: dict[str, list[str]] = field(default_factory=dict)  # plan hash -> its hosts

    @property
    def compared(self) -> list[str]:
        """The hosts with a run, in order: the columns of every table."""
        return [h.name for h in self.hosts if h.name in self.data]

    @property
    def troubled(self) -> list[HostRun]:
        """Hosts without a run or whose run did not complete."""
        return [h for h in self.hosts if h.name not in self.data or h.status != "complete"]

    @property
    def same_machines(self) -> list[list[str]]:
        """Groups of two or more hosts that are one machine (one machine-id, one boot): their
        runs ran one after the other there, so what differs between them is that machine's
        run-to-run variation, not a difference between machines."""
        groups: dict[tuple[str, str], list[str]] = {}
        for h in self.hosts:
            ident = (str(h.machine.get("machine_id", "")), str(h.machine.get("boot_id", "")))
            if all(ident):
                groups.setdefault(ident, []).append(h.name)
        return [g for g in groups.values() if len(g) > 1]

    @property
    def flagged(self) -> dict[str, list[str]]:
        """Per host with a run, what its run flagged that makes its taxes differ for a reason
        other than the machine: unequal resources let through (parity = "flag"), a resume on
        a changed host, tool versions that differ between its environments, another run
        measuring beside it (its report's warnings of those kinds)."""
        return {h: [str(w) for w in d.warnings
                    if getattr(w, "kind", None) in FLAGGED]
                for h, d in self.data.items()}

    def rows_of(self, env: str) -> list[FleetRow]:
        return [r for r in self.rows if r.environment == env]

    def headline_points(self) -> list[tuple[str, str, str]]:
        """(workload, params_key, metric) of each headline row, once, in row order."""
        return list(dict.fromkeys((r.workload, r.params_key, r.metric)
                                  for r in self.rows if r.headline))


def plan_hash(plan_toml: str) -> str:
    return hashlib.sha256(plan_toml.encode()).hexdigest()[:12]


def _ratio_of_taxes(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray,
                    axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (np.mean(a, axis=axis) / np.mean(b, axis=axis)) / (
            np.mean(c, axis=axis) / np.mean(d, axis=axis))


def tax_over_reference(env: Sequence[float], base: Sequence[float], ref_env: Sequence[float],
                       ref_base: Sequence[float], higher_is_better: bool = True, seed: int = 0,
                       resamples: int = BOOTSTRAP_RESAMPLES) -> Ratio | None:
    """One host's tax over the reference's, with the 95% percentile bootstrap interval of the
    four groups resampled independently; None when a tax has no mean to divide by."""
    groups = [np.asarray(x, dtype=float) for x in (env, base, ref_env, ref_base)]
    if any(g.size == 0 for g in groups) or 0 in (groups[1].mean(), groups[2].mean(),
                                                  groups[3].mean()):
        return None
    a, b, c, d = groups
    point = float(_ratio_of_taxes(a, b, c, d))
    if any(g.size < 2 for g in groups):
        return Ratio(point, math.nan, math.nan, higher_is_better)
    if all(np.ptp(g) == 0 for g in groups):
        return Ratio(point, point, point, higher_is_better)
    res = sps.bootstrap(tuple(groups), _ratio_of_taxes, n_resamples=resamples,
                        vectorized=True, paired=False, confidence_level=CONFIDENCE,
                        method="percentile", random_state=np.random.default_rng(seed))
    ci = res.confidence_interval
    low, high = float(ci.low), float(ci.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        low = high = math.nan  # a resample's mean of zero: no interval to stand on
    return Ratio(point, low, high, higher_is_better)


def _collect_rows(data: Mapping[str, ReportData], order: Sequence[str]
                  ) -> tuple[list[str], dict[tuple[str, str, str, str], FleetRow],
                             dict[tuple[str, str, str, str], dict[str, Row]]]:
    """Every environment (not a baseline) and row any host measured, in the first host's
    order then the others'; per row key each host's own Row."""
    envs: list[str] = []
    rows: dict[tuple[str, str, str, str], FleetRow] = {}
    own: dict[tuple[str, str, str, str], dict[str, Row]] = {}
    for host in order:
        d = data[host]
        heads = {(r.workload, r.params_key, r.metric) for r in d.headline_rows()}
        for env in d.columns:
            if env == d.baseline or env == d.aa_env:
                continue
            envs += [env] if env not in envs else []
            for r in d.rows:
                if (r, env) not in d.cells:
                    continue
                key = (env, r.workload, r.params_key, r.metric)
                own.setdefault(key, {})[host] = r
                if key not in rows:
                    rows[key] = FleetRow(env, r.workload, r.params_key, r.metric, r.unit,
                                         r.higher_is_better,
                                         d.sweep_label.get((r.workload, r.params_key), ""),
                                         (r.workload, r.params_key, r.metric) in heads)
    return envs, rows, own


def _cells(d: ReportData, row: Row, env: str) -> tuple[Cell, Cell | None]:
    return d.cells[(row, env)], d.cells.get((row, d.baseline))


def side_by_side(fleet_id: str, hosts: Sequence[HostRun], data: Mapping[str, ReportData],
                 reference: str | None = None, force: bool = False) -> Fleet:
    """The fleet's taxes side by side. data: each host's analyzed run (by host name); hosts
    without one are listed, not compared. Raises FleetError (no host with a run, an unknown
    reference) and NotSideBySide (different plans, unless force)."""
    order = [h.name for h in hosts if h.name in data]
    if not order:
        raise FleetError(f"fleet {fleet_id!r} has no host with a run in the store ("
                         + "; ".join(f"{h.name}: {h.status or 'no run'}"
                                     + (f", {h.reason}" if h.reason else "") for h in hosts)
                         + "); fix those hosts and run the fleet again")
    if reference is None:
        reference = order[0]
    elif reference not in order:
        raise FleetError(f"--reference {reference!r} is not a host of fleet {fleet_id!r} with "
                         f"a run (hosts: {', '.join(order)}); give one of those")
    plans: dict[str, list[str]] = {}
    for h in order:
        plans.setdefault(plan_hash(data[h].run.plan_toml), []).append(h)
    if len(plans) > 1 and not force:
        raise NotSideBySide(
            f"the runs of fleet {fleet_id!r} ran different plans ("
            + "; ".join(f"{', '.join(hs)}: plan {data[hs[0]].run.plan_name} {p}"
                        for p, hs in plans.items())
            + "): their taxes cannot be put side by side; report runs of one plan (--runs), "
              "or pass --force to put them side by side anyway with the plans listed")
    ref = data[reference]
    out = Fleet(fleet_id, reference, list(hosts), {h: data[h] for h in order}, ref.baseline,
                plans=plans)
    out.host_differences = {h: fingerprint_differences(ref.run.host, data[h].run.host)
                            for h in order if h != reference}
    # The reference's rows lead, so its order of environments and points is the tables'.
    envs, rows, own = _collect_rows(data, [reference] + [h for h in order if h != reference])
    out.environments = envs
    seed = int(ref.run.seed)
    # Each host's sequential verdicts by ratio, once (every row looks its own up in them).
    states = {h: d.sequential.by_key() if d.sequential else {} for h, d in data.items()}
    for key, frow in rows.items():
        env = key[0]
        for h in order:
            if h in own[key]:
                d = data[h]
                cell, base = _cells(d, own[key][h], env)
                frow.taxes[h] = HostTax(cell.ratio, cell.summary.n,
                                        base.summary.n if base else 0, d.emulated(env))
        frow.reference = next((h for h in [reference, *order]
                               if h in frow.taxes and frow.taxes[h].tax is not None), None)
        if frow.reference is not None:
            _judge(frow, data, own[key], states, seed)
    # Rows in the reference's order of environments, then of points within each.
    out.rows = sorted(rows.values(), key=lambda r: envs.index(r.environment))
    return out


def _judge(frow: FleetRow, data: Mapping[str, ReportData], own: Mapping[str, Row],
           states: Mapping[str, Mapping[tuple[str, str, str, str], RatioState]],
           seed: int) -> None:
    """Each host's tax over the row's reference's, its interval and verdict
    (isotax.analysis.between_runs); the bootstrap ratio of the mean taxes stays the figure
    where no interval can be had (a value that is not positive)."""
    assert frow.reference is not None
    rc, rb = _cells(data[frow.reference], own[frow.reference], frow.environment)
    key = (frow.environment, frow.workload, frow.params_key, frow.metric)
    ref_state = states[frow.reference].get(key)
    for h, t in frow.taxes.items():
        if h == frow.reference or t.tax is None or rb is None:
            continue
        cell, base = _cells(data[h], own[h], frow.environment)
        if base is None:
            continue
        state = states[h].get(key)
        if state is not None and ref_state is not None:
            margin = max(MIN_MARGIN, state.verdict.margin, ref_state.verdict.margin)
            v: RatioVerdict | None = tax_change(state, ref_state, margin)
        else:
            v = taxes_unpaired(cell.values, base.values, rc.values, rb.values,
                               frow.higher_is_better, MIN_MARGIN)
        if v is not None:
            low, high = (math.nan if e is None else e for e in v.ends)
            r: Ratio | None = Ratio(v.ratio, low, high, frow.higher_is_better,
                                    decided=v.verdict.value)
        else:
            r = tax_over_reference(cell.values, base.values, rc.values, rb.values,
                                   frow.higher_is_better, seed)
            r = replace(r, decided="undecided") if r is not None else None
        if r is not None:
            frow.taxes[h] = replace(t, vs_reference=r)


# -- which runs make the fleet ---------------------------------------------------------------

def fleet_meta(store: Store, run_id: str) -> Mapping[str, Any]:
    """The run's `fleet` meta ({} for a run of no fleet, or one that no longer fits)."""
    meta = RunMeta(store.run_meta(run_id)).fleet
    return meta.model_dump() if meta is not None else {}


def known_fleets(store: Store) -> list[str]:
    """The fleet ids the store's runs carry, oldest first."""
    ids = (str(fleet_meta(store, r.id).get("id", "")) for r in store.list_runs())
    return [i for i in dict.fromkeys(ids) if i]


def fleet_hosts(store: Store, fleet_id: str, state: Mapping[str, Any] | None = None
                ) -> list[HostRun]:
    """The fleet's hosts: those of its state file (inventory order; {"hosts": {name:
    {"run_id", "status", "reason"}}}, read defensively) and every run whose meta names the
    fleet. A host with several runs gets its last complete one, else its last one."""
    by_host: dict[str, list[tuple[str, str, str]]] = {}
    machines: dict[str, dict[str, str]] = {}
    for r in store.list_runs():  # oldest first
        meta = fleet_meta(store, r.id)
        if str(meta.get("id", "")) == fleet_id:
            name = str(meta.get("host") or r.host.get("hostname") or r.id)
            by_host.setdefault(name, []).append((r.id, r.status, str(meta.get("address", ""))))
            machines[name] = _machine(meta.get("machine"))
    listed = state.get("hosts") if isinstance(state, Mapping) else None
    listed = listed if isinstance(listed, Mapping) else {}
    out = []
    for name in [*map(str, listed), *(n for n in by_host if n not in listed)]:
        entry = listed.get(name)
        entry = entry if isinstance(entry, Mapping) else {}
        runs = by_host.get(name, [])
        run = next((x for x in reversed(runs) if x[1] == RunStatus.COMPLETE),
                   runs[-1] if runs else None)
        if run is None and entry.get("run_id"):
            try:
                rec = store.get_run(str(entry["run_id"]))
                run = (rec.id, rec.status, "")
            except StoreError:
                pass
        address = str(entry.get("address") or (run[2] if run else ""))
        reason = str(entry.get("reason") or "")
        machine = _machine(entry.get("machine")) or machines.get(name, {})
        if run is None:
            out.append(HostRun(name, None, address, str(entry.get("status") or "no run"),
                               reason or "no run of it is in the store", machine))
        else:
            out.append(HostRun(name, run[0], address, run[1], reason, machine))
    return out


def _machine(value: Any) -> dict[str, str]:
    """A machine identity ({"machine_id", "boot_id"}) read defensively; {} if not one."""
    if not isinstance(value, Mapping):
        return {}
    ident = {k: str(value.get(k) or "") for k in ("machine_id", "boot_id")}
    return ident if all(ident.values()) else {}


def hosts_of_runs(store: Store, run_ids: Sequence[str]) -> list[HostRun]:
    """Any runs side by side: each named by its fleet meta's host, else its fingerprint's
    hostname (a name taken twice gets the run id beside it). Raises StoreError."""
    out: list[HostRun] = []
    for rid in run_ids:
        r = store.get_run(rid)
        meta = fleet_meta(store, r.id)
        name = str(meta.get("host") or r.host.get("hostname") or r.id)
        if any(h.name == name for h in out):
            name = f"{name} ({r.id})"
        out.append(HostRun(name, r.id, str(meta.get("address", "")), r.status,
                           machine=_machine(meta.get("machine"))))
    return out


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _ratio_json(r: Ratio | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {"ratio": _num(r.ratio), "ci_low": _num(r.ci_low), "ci_high": _num(r.ci_high),
            "verdict": r.verdict}


def to_json(f: Fleet) -> dict[str, Any]:
    """fleet.json: versioned (the store's FORMAT_VERSION and fleet.json's own)."""
    return {
        "format_version": FORMAT_VERSION, "fleet_format_version": FLEET_FORMAT,
        "fleet": f.fleet_id, "reference": f.reference, "baseline": f.baseline,
        "rule": "a host differs when its tax over the reference host's, judged by the "
                "verdicts' confidence sequences (each run's at 2.5%, together 95%), is worse "
                "or better beyond the margin",
        "hosts": [{"name": h.name, "run_id": h.run_id, "address": h.address,
                   "status": h.status, "reason": h.reason, "compared": h.name in f.data,
                   "plan_hash": plan_hash(f.data[h.name].run.plan_toml)
                   if h.name in f.data else None,
                   "fingerprint_differences": f.host_differences.get(h.name, []),
                   "flagged": f.flagged.get(h.name, []), "machine": dict(h.machine)}
                  for h in f.hosts],
        "same_machine": f.same_machines,
        "plans": f.plans,
        "environments": f.environments,
        "rows": [{"environment": r.environment, "workload": r.workload,
                  "params": r.params_key, "metric": r.metric, "unit": r.unit,
                  "higher_is_better": r.higher_is_better, "headline": r.headline,
                  "reference": r.reference, "verdict": r.verdict, "differs": r.differs,
                  "hosts": {h: {**(_ratio_json(t.tax) or {"ratio": None}), "n": t.n,
                                "n_baseline": t.n_baseline, "emulated": t.emulated,
                                "vs_reference": _ratio_json(t.vs_reference)}
                            for h, t in r.taxes.items()}}
                 for r in f.rows],
    }
