"""The runner's side of sequential verdicts (isotax.analysis.sequential decides): every
headline ratio's verdict from what the store holds, counted for the progress display after
each round, and the rounds added after the fixed ones for the ratios still undecided, within
the plan's max_repetitions, budget_s and deadline_s. Each round is decided from the store, so
a resumed run goes on from what it holds."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from isotax.analysis import borrowing, reach, sequential
from isotax.analysis import margins as margin_rules
from isotax.analysis.verdicts import Borrowed, first_bounded_pairs
from isotax.model import CellKey
from isotax.plan import Plan
from isotax.run.clock import PhaseClock
from isotax.store.base import CellRecord, Store
from isotax.store.run_meta import RunMeta

Log = Callable[[str], None]
_NO_LABELS: Mapping[str, Any] = MappingProxyType({})
# The runner's _run_cells: (run_id, cells, may_start, phase).
RunCells = Callable[[str, Sequence[CellKey], Callable[[CellKey], bool], str], None]


class AddedRounds:
    def __init__(self, plan: Plan, store: Store, clock: PhaseClock, log: Log) -> None:
        self.plan, self.store, self.clock, self.log = plan, store, clock, log
        # "40/64 decided, 24 undecided", for the progress display, once a round is in.
        self.note = ""
        # The newest stored A/A run of this host's floors, once looked up (margin "auto").
        self._stored_aa: tuple[Mapping[Any, float], str | None] | None = None
        # Spread borrowed from this host's stored block-paired runs, once looked up.
        self._borrowed: dict[sequential.Point, Borrowed] | None = None
        # The run's committed cells read so far, slimmed (_slim): each assessment reads only
        # the cells committed since, so a run of thousands of cells neither re-reads nor
        # re-allocates its whole history after every round (the soak, docs/faults.md).
        self._cells: list[CellRecord] = []
        self._read: tuple[str, int] = ("", 0)  # (run id, highest cell id read)

    @property
    def cap(self) -> int:
        return max(self.plan.repetitions, self.plan.verdicts.max_repetitions or 0)

    def _margins(self, run_id: str, cells: Sequence[CellRecord]) -> margin_rules.Margins:
        plan = self.plan
        if self._stored_aa is None and isinstance(plan.verdicts.margin, str):
            # Looked up once per process: the stored runs do not change under a run.
            self._stored_aa = margin_rules.stored_aa_floors(
                self.store, self.store.get_run(run_id).host, run_id,
                self.store.run_meta(run_id), plan.baseline)
        return margin_rules.margins_for(self.store, run_id, plan.verdicts.margin, plan.baseline,
                                        plan.aa_name if plan.aa else None, cells,
                                        self._stored_aa)

    def _lent(self, run_id: str) -> dict[sequential.Point, Borrowed]:
        """Per point, the spread this host's stored block-paired runs lend (looked up once per
        process: the stored runs do not change under a run)."""
        if self._borrowed is None:
            host = self.store.get_run(run_id).host
            self._borrowed = borrowing.from_store(self.store, host, run_id, self.plan.baseline)
        # Matched each time: the runs per cell (cell_length) are fixed as points first run.
        kinds = {e.name: e.kind for e in self.store.environments(run_id)}
        return borrowing.for_run(self._borrowed, kinds, self.store.run_meta(run_id),
                                 self.plan.baseline)

    def assess(self, run_id: str, environments: Sequence[str]) -> sequential.Progress:
        """Every headline ratio's verdict from the committed cells of `environments` (those
        that run now: one that did not start on --resume is left as it stands)."""
        plan = self.plan
        with self.clock.phase("store"):
            committed = [c for c in self._committed(run_id)
                         if c.key.environment in environments]
            lent = self._lent(run_id) if plan.verdicts.borrow else {}
        progress = sequential.assess(committed, plan.baseline, self._margins(run_id, committed),
                                     plan.repetitions, self.cap, plan.verdicts.confidence,
                                     borrowed=lent)
        self.note = progress.note()
        return progress

    def _committed(self, run_id: str) -> list[CellRecord]:
        """Every committed cell of the run, slimmed: those read before, and the new ones."""
        if self._read[0] != run_id:
            self._cells, self._read = [], (run_id, 0)
        new = self.store.cells(run_id, after=self._read[1])
        if new:
            self._cells += [_slim(c) for c in new]
            self._read = (run_id, max(c.id for c in new))
        return self._cells

    def count(self, run_id: str, environments: Sequence[str]) -> None:
        """After a measured round: how many headline ratios are decided, for the display."""
        try:
            self.assess(run_id, environments)
        except Exception as e:  # a display must never end a run
            self.log(f"[yellow]verdicts could not be counted: {type(e).__name__}: {e}[/]")

    def run(self, run_id: str, environments: Sequence[str], run_cells: RunCells) -> None:
        """After the fixed rounds: verdicts for every headline ratio and, while some are
        undecided and the plan's limits allow, more interleaved rounds where they decide
        something, run by `run_cells`."""
        plan = self.plan
        fixed, base, cap = plan.repetitions, plan.baseline, self.cap
        settings = plan.verdicts.model_dump()
        params = {(w.name, CellKey("", w.name, p, 0).params_key): p
                  for w in plan.workloads for p in w.combinations()}
        stored = RunMeta(self.store.run_meta(run_id)).sequential
        rounds = stored.rounds if stored is not None else 0
        while True:
            progress = self.assess(run_id, environments)
            decision = (sequential.next_round(progress, base, cap, self._room(progress.spent_s),
                                              plan.aa_name if plan.aa else None)
                        if cap > fixed else sequential.Decision((), sequential.NO_ROUNDS))
            if decision.ended is None and not decision.points:
                decision = sequential.Decision((), sequential.TIME_SPENT)
            with self.clock.phase("store"):
                self.store.put_run_meta(run_id, "sequential", sequential.to_meta(
                    settings, fixed, cap, progress, decision.ended, rounds))
            if decision.ended is not None:
                self.log(f"verdicts: {self.note} ({decision.ended}; "
                         f"{progress.added_cells} cells added in {progress.spent_s:.0f} s)")
                self._say_reach(run_id, progress)
                return
            rounds += 1
            number = progress.next_repetition
            order = sequential.round_order(decision.points, plan.seed, number)
            self.log(f"round {number}: {len(order)} cells for the undecided ratios "
                     f"({self.note})")
            cells = [CellKey(env, wl, params[(wl, pkey)], number) for env, wl, pkey in order]
            run_cells(run_id, cells, self._gate(progress.spent_s, progress.cell_s),
                      f"round {number}")

    def begin(self, run_id: str, fresh: bool) -> None:
        """Before the first cell: a fresh run is marked as paired in blocks (later runs of
        this host may borrow its spread), and the user hears what this host's last run could
        decide (a hint: it never ends a run)."""
        if fresh:
            self.store.put_run_meta(run_id, borrowing.PAIRING, borrowing.BLOCKS)
        with contextlib.suppress(Exception):
            self.say_history(run_id)

    def say_history(self, run_id: str) -> None:
        """Before the first cell: what this host's newest stored run of the same plan could
        decide (its `reach`), so the user knows what to expect before the run spends its
        budget; without one, the newest of another plan, named as such (its ratios and
        budget are another plan's); without any, that there is no history."""
        other = None
        earlier = 0
        for run in margin_rules.host_history(self.store, self.store.get_run(run_id).host,
                                             run_id):
            earlier += 1
            said = RunMeta(self.store.run_meta(run.id)).reach
            if said is None or not said.words:
                continue
            if run.plan_name == self.plan.name:
                self.log(f"this host's last run of this plan ({run.id}): {said.words}")
                return
            other = other or f"this host's last run ({run.id}, plan {run.plan_name}): {said.words}"
        if other:
            self.log(other)
        elif not earlier:
            self.log("no history: this store holds no earlier run of this host, so no ratio "
                     "can borrow a spread; each is decided on its own pairs, none with fewer "
                     f"than {first_bounded_pairs()} (a first run decides fewer), and the next "
                     "run of this plan here borrows this one's")

    def _say_reach(self, run_id: str, progress: sequential.Progress) -> None:
        """What this host can decide (analysis.reach), from the run's questions (not its
        canary): stored and said."""
        plan = self.plan
        got = reach.reach([reach.RatioNoise(r.point, r.sd, r.verdict.n, r.verdict.margin,
                                            r.borrowed)
                           for r in progress.ratios
                           if not (plan.aa and r.environment == plan.aa_name)],
                          progress.cell_s, plan.baseline)
        if got is None:
            return
        with self.clock.phase("store"):
            self.store.put_run_meta(run_id, "reach", {**got.meta(), "words": got.words()})
        self.log(f"reach: {got.words()}")

    def _room(self, spent_s: float) -> float:
        """Seconds the added rounds may still take: what budget_s leaves, and what
        deadline_s leaves of the run's wall time (this process's and earlier ones')."""
        vs = self.plan.verdicts
        room = math.inf if vs.budget_s is None else vs.budget_s - spent_s
        if vs.deadline_s is not None:
            room = min(room, vs.deadline_s - self.clock.meta()["wall_s"])
        return max(0.0, room)

    def _gate(self, spent_s: float, cell_s: Mapping[sequential.Point, float]
              ) -> Callable[[CellKey], bool]:
        """Asked before each cell of an added round: whether it may start, i.e. whether the
        time left holds the cell's point's mean duration (a VM's cell can take 15 s: one
        started just before the deadline would end well past it)."""
        since = time.monotonic()

        def may_start(key: CellKey) -> bool:
            took = cell_s.get((key.environment, key.workload, key.params_key), 0.0)
            room = self._room(spent_s + time.monotonic() - since)
            return room > 0 and room >= took

        return may_start


def _slim(cell: CellRecord) -> CellRecord:
    """A cell as the verdicts read it: its samples without their labels (tool versions, paths,
    percentile tables: most of a stored cell's bytes, and nothing a verdict reads)."""
    return dataclasses.replace(cell, samples=tuple(
        dataclasses.replace(s, labels=_NO_LABELS) for s in cell.samples))
