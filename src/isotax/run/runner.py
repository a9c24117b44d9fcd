"""The runner: start every environment once, run the matrix in a seeded interleaved order,
commit each cell the moment it ends, and tear everything down whatever happens.

Order: first the warm-ups (every environment x workload, `warmups` times, in a seeded random
order), then `repetitions` rounds; each round runs every environment x workload
x parameters once, in its own seeded random order. Interleaving spreads slow drifts of the host
(other tenants, thermal, page cache) over every environment instead of loading them onto one.
While one environment is measured the others are paused (cgroup freezer, QMP stop), so an idle
VM's timer ticks don't steal CPU from the measurement.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from isotax import protocols
from isotax.analysis import warmups
from isotax.host import owners
from isotax.host.facts import numa, versions
from isotax.host.facts.description import parity_problems
from isotax.host.facts.fingerprint import fingerprint
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.base import LoadGenRefused
from isotax.loadgen.choose import open_loadgen
from isotax.model import CellKey, CellStatus, NotApplicable, RunStatus, Sample, SanityError
from isotax.plan import Plan
from isotax.protocols import (
    Availability,
    ExecError,
    Instance,
    Isolation,
    LaunchingWorkload,
    LoadGen,
    PlatformLost,
    StopIncomplete,
    Unavailable,
)
from isotax.run import memory
from isotax.run.applicability import why_not_applicable
from isotax.run.cell_runs import CellRuns, per_run
from isotax.run.clock import PhaseClock
from isotax.run.deadline import Deadline
from isotax.run.finish import finish_cell
from isotax.run.interrupts import interrupts_for_this_process_only, no_interrupts
from isotax.run.launcher import EnvLauncher
from isotax.run.lines import cell_words, describe_cell
from isotax.run.measuring import Overlap
from isotax.run.restarts import META_KEY, Restarts
from isotax.run.rounds import AddedRounds
from isotax.run.schedule import schedule
from isotax.run.starting import EnvironmentStarter, Started
from isotax.store.base import CellOutcome, DiskFull, Store
from isotax.telemetry import envcpu, observe

Log = Callable[[str], None]


class Runner:
    def __init__(self, plan: Plan, plan_text: str, store: Store, image: ImageArtifacts,
                 log: Log, progress: Any = None) -> None:
        self.plan = plan
        self.plan_text = plan_text
        self.store = store
        self.image = image
        self.log = log
        self.progress = progress  # a rich Progress, or None
        # The environments: started, what each one is, what it showed it is (run.starting).
        self.envs = EnvironmentStarter(plan, store, image, log)
        self.loadgen: LoadGen | None = None
        self.workdir = Path("/nonexistent")  # set by run()
        self.multi_node = len(numa.nodes()) > 1
        # Environments that died mid-run and their restarts (run.restarts); run() takes in the
        # records a resumed run already holds.
        self.lives = Restarts(plan.restarts, [])
        self.refusal = ""  # why a refused run was refused, in one line with the fix
        self.lost = ""  # what stopped the run (protocols.PlatformLost), in one line
        # Other runs measuring on this host while a cell ran (run.measuring), from the store
        # on --resume.
        self.overlap = Overlap()
        self.clock = PhaseClock()  # where the wall time goes (run_meta["phases"])
        # Verdicts counted after each round, and the rounds added for undecided ones.
        self.rounds = AddedRounds(plan, store, self.clock, log)
        self.cell_runs = CellRuns(store, "", 0.0, 1, {})  # run() sets the run's

    @property
    def started(self) -> dict[str, Started]:
        """The environments started and not stopped yet (EnvironmentStarter's)."""
        return self.envs.started

    def _unneeded_warmups(self, run_id: str) -> set[tuple[str, str]]:
        """The (environment, workload)s this host's history says need no warm-up (plan
        warmups_from = "history"), each said once."""
        if self.plan.warmups == 0 or self.plan.warmups_from != "history":
            return set()
        kinds = {e.name: e.kind for e in self.plan.run_environments if e.name in self.started}
        why = warmups.unneeded(self.store, self.store.get_run(run_id).host, run_id, kinds)
        if why:
            self.log(f"warm-ups: {len(why)} environment x workload(s) not warmed up: their "
                     "newest warm-up on this host did not differ from their measured runs")
        return set(why)

    def _stop_environments(self) -> None:
        with no_interrupts(), self.clock.phase("environments"):
            for name, st in list(self.started.items()):
                # Teardown goes on whatever one step of it says.
                with contextlib.suppress(Exception):
                    st.instance.resume()
                self._stop_one(name, st.instance)
            self.started.clear()

    def _stop_one(self, name: str, inst: Instance) -> None:
        """Instance.stop, whose one exception names what is left; the teardown goes on."""
        try:
            inst.stop()
        except StopIncomplete as e:
            self.log(f"[red]{name}: {e}[/]")
        except Exception as e:  # outside the contract: a bug in the kind's stop
            self.log(f"[red]{name}: stop failed ({type(e).__name__}: {e}); `isotax doctor "
                     "--fix` removes what it left[/]")

    # -- cells ---------------------------------------------------------------------------
    def _run_cell(self, key: CellKey) -> CellOutcome:
        st = self.started[key.environment]
        workload = protocols.workloads()[key.workload]()
        inst = Deadline(st.instance, self.plan.timeout_s)
        pkey = f"{key.workload}|{key.params_key}"
        prepare_s = run_s = 0.0
        if pkey not in st.prepared:
            t0 = time.monotonic()
            st.prepared[pkey] = self._prepare(workload, inst, key)
            prepare_s = time.monotonic() - t0
        ended = st.prepared[pkey]
        if ended is not None:
            return CellOutcome.ended(ended[0], ended[1], prepare_s)
        # Node-local share of the cell's allocations, where there is more than one node.
        numastat_before = numa.counters() if self.multi_node else None
        try:
            launching = isinstance(workload, LaunchingWorkload)
            # The long-lived instance is paused while a launching workload runs: its guest is
            # not asked, and what the fresh instances cost the host shows as hidden work.
            watch: Any = contextlib.nullcontext(None) if key.warmup else observe.observed(
                st.instance, self.envs.isolation[key.environment], self.loadgen,
                observe.Settings(self.plan.telemetry.interval_s, self.plan.telemetry.perf),
                read_guest=not launching)
            env_cpu: Sample | None = None
            runs = 1
            if isinstance(workload, LaunchingWorkload):
                with watch as obs:
                    t0 = time.monotonic()
                    samples = self._launching(workload, key)
                    run_s = time.monotonic() - t0
            else:
                cpu_before = envcpu.snapshot(st.instance)
                with watch as obs:
                    t0 = time.monotonic()
                    samples, runs = self.cell_runs.measure(
                        key, lambda: workload.run(inst, key.params, self.loadgen))
                    run_s = time.monotonic() - t0
                if samples:
                    env_cpu = per_run(envcpu.cpu_sample(cpu_before,
                                                        envcpu.snapshot(st.instance)), runs)
            if samples and obs is not None and obs.error:
                self.log(f"[yellow]{key.environment} {key.workload}: {obs.error}[/]")
        except NotApplicable as e:
            # Found out while running (an emulated CPU refusing an instruction): the other
            # repetitions of this point would find the same, so they end at once too.
            st.prepared[pkey] = (CellStatus.NOT_APPLICABLE, str(e))
            return CellOutcome.ended(CellStatus.NOT_APPLICABLE, str(e), prepare_s, run_s)
        except (SanityError, ExecError, OSError, TimeoutError, ValueError, Unavailable,
                RuntimeError) as e:
            return CellOutcome.ended(CellStatus.FAILED, f"{type(e).__name__}: {e}", prepare_s,
                                     run_s)
        if not samples:
            return CellOutcome.ended(CellStatus.FAILED, "the workload returned no samples",
                                     prepare_s, run_s)
        share = (numa.local_share(numastat_before, numa.counters())
                 if numastat_before is not None else None)
        try:  # a workload's work/in_flight hook that fails fails the cell, not the run
            done = finish_cell(workload, key.params, samples, env_cpu, share, obs, runs)
        except (SanityError, ValueError, TypeError, KeyError, ArithmeticError) as e:
            return CellOutcome.ended(CellStatus.FAILED, f"{type(e).__name__}: {e}", prepare_s,
                                     run_s)
        return CellOutcome(CellStatus.OK, "", tuple(done.samples), done.telemetry, prepare_s,
                           run_s)

    def _prepare(self, workload: Any, inst: Instance, key: CellKey
                 ) -> tuple[CellStatus, str] | None:
        """Prepare a workload point once per instance: None when it is ready to run, else
        the status and reason every cell of the point gets."""
        why = why_not_applicable(workload, inst, key.params)
        if why:
            return CellStatus.NOT_APPLICABLE, why
        try:
            workload.prepare(inst, key.params, self.loadgen)
        except NotApplicable as e:
            return CellStatus.NOT_APPLICABLE, str(e)
        except (SanityError, ExecError, OSError, TimeoutError) as e:
            return CellStatus.FAILED, f"prepare failed: {e}"
        return None

    def _launching(self, workload: LaunchingWorkload, key: CellKey) -> list[Sample]:
        """A workload that starts its own instances of the cell's environment (the runner's
        long-lived one stays paused); every one it leaves running is stopped here."""
        entry = next(e for e in self.plan.run_environments if e.name == key.environment)
        env = protocols.environments()[entry.kind]()
        spec = self.envs.spec(entry, self.workdir / entry.name / "launched")
        launcher = EnvLauncher(env, spec, time.monotonic() + self.plan.timeout_s)
        main = self.started[key.environment].instance
        main.pause()  # fresh instances are the subject: the long-lived one stays out of it
        try:
            return workload.launch_and_measure(launcher, key.params, self.loadgen)
        finally:
            with no_interrupts():
                launcher.close()
                shutil.rmtree(spec.workdir, ignore_errors=True)
                main.resume()

    def run(self, run_id: str) -> RunStatus:
        """Run (or finish) run_id, as a pipeline: what the run recorded before, the load
        generator, the environments, the checks that may refuse the run, the cells and the
        rounds; each step returns a status that ends the run, or None to go on. Returns the
        final status."""
        done = self.store.done_cells(run_id)
        self._restore(run_id)
        workdir = Path(owners.mark(tempfile.mkdtemp(prefix="itx-run-", dir="/var/tmp")))
        self.workdir = workdir
        status = RunStatus.FAILED
        owner = os.getpid()
        try:
            with interrupts_for_this_process_only(), contextlib.ExitStack() as stack:
                status = (self._open_loadgen(run_id, stack)
                          or self._start(run_id, workdir, stack)
                          or self._refused()
                          or self._measure(run_id, done))
        except KeyboardInterrupt:
            if os.getpid() != owner:  # a forked helper of a library: never tear down for it
                os._exit(1)
            status = RunStatus.INTERRUPTED
            self.log(f"[yellow]interrupted: resume with `isotax run --resume {run_id}`[/]")
        except PlatformLost as e:
            # Nothing can run or restart until it is back: stop, keep what is committed.
            status = RunStatus.INTERRUPTED
            self.lost = str(e)
            self.log(f"[red]{e}: the run stops; resume it with `isotax run --resume {run_id}` "
                     "once it answers again[/]")
        except DiskFull:
            status = RunStatus.INTERRUPTED  # resumable once space is freed; the caller says how
            raise
        finally:
            self._finish(run_id, status, sys.exc_info()[1], workdir)
        return status

    def _restore(self, run_id: str) -> None:
        """What the run recorded before a resume: other runs measuring beside it, deaths (the
        bound counts only the restarts since this start), phases, rounds, cell lengths; the
        host's fingerprint and the versions the run is made with."""
        meta = self.store.run_meta(run_id)
        self.overlap = Overlap(meta.get("concurrent"))
        earlier = meta.get(META_KEY, [])
        self.lives = Restarts(self.plan.restarts, earlier if isinstance(earlier, list) else [])
        phases = meta.get("phases")
        self.clock = PhaseClock(phases if isinstance(phases, dict) else None)
        self.rounds = AddedRounds(self.plan, self.store, self.clock, self.log)
        self.cell_runs = CellRuns(self.store, run_id, self.plan.verdicts.cell_s,
                                  self.plan.verdicts.runs_per_cell, meta)
        host = dict(self.store.get_run(run_id).host) or fingerprint()
        self.store.update_host(run_id, host)
        if versions.META_KEY not in meta:  # the first start's, as the fingerprint is
            # Beside the fingerprint: the Python packages and host tools the run is made with.
            self.store.put_run_meta(run_id, versions.META_KEY, versions.collect())

    def _open_loadgen(self, run_id: str, stack: contextlib.ExitStack) -> RunStatus | None:
        """The load generator where a workload needs one (closed when the stack unwinds)."""
        wls = protocols.workloads()
        if not any(wls[w.name].needs_loadgen for w in self.plan.workloads):
            return None
        try:
            with self.clock.phase("loadgen"):
                self.loadgen = stack.enter_context(
                    open_loadgen(self.plan, self.image))
        except LoadGenRefused as e:
            self.refusal = f"refused: {e}"
            return RunStatus.REFUSED
        # Which load generator the results used, for the report.
        self.store.put_run_meta(run_id, "loadgen", self.loadgen.describe().to_stored())
        return None

    def _start(self, run_id: str, workdir: Path, stack: contextlib.ExitStack
               ) -> RunStatus | None:
        # Unwinds first (LIFO): environments stop before the load generator goes.
        stack.callback(self._stop_environments)
        self.clock.add("setup", time.monotonic() - self.clock.started)
        with self.clock.phase("environments"):
            self.refusal = self.envs.start_all(run_id, workdir, self.loadgen)
        if self.refusal:  # an environment the plan needs cannot run here
            return RunStatus.REFUSED
        if self.plan.baseline not in self.started:
            self.log(f"[red]the baseline {self.plan.baseline!r} did not start; nothing to "
                     "compare against[/]")
            return RunStatus.FAILED
        return None

    def _refused(self) -> RunStatus | None:
        """An environment that is not what the plan declares, or (parity = "refuse")
        unequal resources: the refusal names every problem itself, the one line a user reads
        where the run's log is not shown (a fleet's host: isotax.fleet.probe)."""
        mislabelled = self.envs.mislabelled
        for m in mislabelled:
            self.log(f"[red]identity: {m}[/]")
        if mislabelled:
            self.refusal = ("refused: an environment is not what the plan declares ("
                            + "; ".join(mislabelled) + "); fix its kind or runtime in "
                            "the plan, or the host's runtime setup")
            return RunStatus.REFUSED
        base = self.started.get(self.plan.baseline)
        if base is not None and self.envs.isolation.get(self.plan.baseline) is Isolation.HOST:
            away = [(n, f) for n, st in self.started.items()
                    if (f := st.instance.facts()).elsewhere]
            if away:
                name, f = away[0]
                self.refusal = (f"refused: {name} runs on {f.elsewhere}, not on this host, "
                                f"where the baseline {self.plan.baseline!r} runs; name one of "
                                "the pods as the plan's baseline (baseline = \"NAME\")")
                return RunStatus.REFUSED
        unequal = [p for _, p in parity_problems(self.envs.described, self.plan.baseline)]
        for p in unequal:
            self.log(f"[yellow]parity: {p}[/]")
        if unequal and self.plan.parity == "refuse":
            self.refusal = ("refused: the environments do not get equal resources ("
                            + "; ".join(unequal) + "); make those changes, or set parity = "
                            "\"flag\" to run and have the report list the differences")
            return RunStatus.REFUSED
        return None

    def _measure(self, run_id: str, done: set[str]) -> RunStatus:
        """The fixed rounds' cells not committed yet, then the added rounds."""
        cells = [k for k in schedule(self.plan, list(self.started),
                                     self._unneeded_warmups(run_id)) if k.ident not in done]
        self.log(f"{len(cells)} cells to run ({len(done)} already committed)")
        self.rounds.begin(run_id, fresh=not done)
        self._run_cells(run_id, cells)
        self.rounds.run(run_id, list(self.started), self._run_cells)
        return RunStatus.COMPLETE

    def _finish(self, run_id: str, status: RunStatus, ending: BaseException | None,
                workdir: Path) -> None:
        """Teardown whatever the stack did not reach, then the phases and the status; a full
        disk refuses these rows too, and then the error that ended the run is the one
        raised, not this one (the run stays "running": resumable)."""
        self._stop_environments()  # idempotent
        self.loadgen = None
        shutil.rmtree(workdir, ignore_errors=True)
        try:
            self.store.put_run_meta(run_id, "phases", self.clock.meta())
            self.store.set_run_status(run_id, status, time.time())
        except DiskFull as e:
            if ending is None:
                raise
            if not isinstance(ending, DiskFull):
                self.log(f"[red]the run's status was not stored: {e}[/]")

    def _run_cells(self, run_id: str, cells: Sequence[CellKey],
                   may_start: Callable[[CellKey], bool] | None = None,
                   phase: str = "fixed") -> None:
        """Run and commit cells in order; `may_start` (asked before each) ends the list early
        when it says no (added rounds: the time is spent). `phase` names the list for the
        progress display ("fixed", "round 5"). At the end of each measured round the
        verdicts are counted again for the display."""
        task = (self.progress.add_task("cells", total=len(cells), phase=phase,
                                       verdicts=self.rounds.note)
                if self.progress else None)
        active: str | None = None
        wversions = {n: c.version for n, c in protocols.workloads().items()}
        clock = self.clock
        for i, key in enumerate(cells):
            if may_start is not None and not may_start(key):
                break
            switching = active != key.environment
            with clock.phase("environments"):
                if switching and active is not None:
                    self._pause(run_id, active)
                active = key.environment
                # Why the cell fails without running: its environment is given up, or died as
                # it was resumed ("" when it can run; a dead one is started again first).
                blocked = self._ready_for(run_id, key, resume=switching)
            if self.progress is not None:
                self.progress.update(task, description=f"{key.environment} {key.workload}")
            t0 = time.time()
            self.overlap.start()
            out = (CellOutcome.ended(CellStatus.FAILED, blocked) if blocked
                   else self._run_cell_or_death(run_id, key))
            t1 = time.time()
            took = t1 - t0
            clock.add("prepare", out.prepare_s)
            if key.warmup:
                clock.add("warmup", took - out.prepare_s)
            else:
                clock.add("workload", out.run_s)
                clock.add("telemetry", took - out.run_s - out.prepare_s)
            with clock.phase("store"):
                self.store.commit_cell(run_id, key, wversions[key.workload], out, t0, t1)
                if self.overlap.end(key.ident):  # another run measured meanwhile: the report
                    self.store.put_run_meta(run_id, "concurrent", self.overlap.seen)
                memory.give_back()  # a long run's heap stays flat (run.memory)
            self.log(describe_cell(key, out.status, out.reason, list(out.samples)))
            round_ended = not key.warmup and (i + 1 == len(cells) or
                                              cells[i + 1].repetition != key.repetition)
            if round_ended:  # count the verdicts for the display
                self.rounds.count(run_id, list(self.started))
            if self.progress is not None:
                if round_ended:
                    self.progress.update(task, verdicts=self.rounds.note)
                self.progress.advance(task)
        if active is not None:
            with clock.phase("environments"):
                self._pause(run_id, active)
        if task is not None and may_start is not None:  # an added round's bar: not kept
            self.progress.remove_task(task)

    # -- an environment that dies (run.restarts) -------------------------------------------
    def _run_cell_or_death(self, run_id: str, key: CellKey) -> CellOutcome:
        """_run_cell; a cell that fails (or raises) while its instance is no longer alive fails
        with the death as its reason, and the dead instance is stopped."""
        inst = self.started[key.environment].instance
        try:
            out = self._run_cell(key)
        except PlatformLost:
            raise
        except Exception as e:
            if not _why_dead(inst):
                raise
            out = CellOutcome.ended(CellStatus.FAILED, f"{type(e).__name__}: {e}")
        if out.status is CellStatus.FAILED and (why := _why_dead(inst)):
            died = self._died(run_id, key.environment, why, cell_words(key))
            out = replace(out, reason=f"{died}; the cell saw: {out.reason[:300]}")
        return out

    def _ready_for(self, run_id: str, key: CellKey, resume: bool) -> str:
        """Before one of an environment's cells: "" when its instance can run it (a dead one is
        started again first, restarts allowing; a paused one resumed when `resume`, once
        Instance.alive() says it did not die while paused), else the reason the cell fails
        without running."""
        name, lives = key.environment, self.lives
        if lives.given_up(name):
            return lives.given_up(name)
        if lives.dead(name):
            if lives.may_restart(name):
                self._restart(run_id, name)  # the new instance runs: nothing to resume
            if lives.given_up(name):
                self.log(f"[red]{name}: {lives.given_up(name)}: its remaining cells fail[/]")
            self.store.put_run_meta(run_id, META_KEY, lives.meta())
            return lives.given_up(name)
        if resume:
            inst = self.started[name].instance
            if why := _why_dead(inst):  # died while paused: no cell of it to fail
                self._died(run_id, name, why, "")
                return self._ready_for(run_id, key, resume=False)  # restarted, or given up
            try:
                inst.resume()
            except Exception as e:
                why = _why_dead(inst) or f"resume failed: {type(e).__name__}: {e}"
                return self._died(run_id, name, why, cell_words(key))
        return ""

    def _pause(self, run_id: str, name: str) -> None:
        """Pause a live instance; one that cannot be paused died (its cell is already stored)."""
        lives = self.lives
        if lives.dead(name) or lives.given_up(name):
            return
        inst = self.started[name].instance
        try:
            inst.pause()
        except Exception as e:
            self._died(run_id, name, _why_dead(inst) or
                       f"pause failed: {type(e).__name__}: {e}", "")

    def _died(self, run_id: str, name: str, why: str, cell: str) -> str:
        """Record that name's instance died and stop it (stop() removes all it held); the
        reason the cell it died in fails with."""
        lives = self.lives
        reason = lives.died(name, cell, why, time.time())
        self.log(f"[red]{name}: {reason}" + (f" (in {cell})" if cell else " (between its "
                 "cells)") + "; stopping what is left of it[/]")
        with no_interrupts():
            self._stop_one(name, self.started[name].instance)
        self.store.put_run_meta(run_id, META_KEY, lives.meta())
        return reason

    def _restart(self, run_id: str, name: str) -> None:
        """A new instance of a dead environment from the same plan entry, for its remaining
        cells: its workloads are prepared again. A restart that fails gives it up."""
        lives = self.lives
        entry = next(e for e in self.plan.run_environments if e.name == name)
        self.log(f"{name}: restarting it (restart {lives.restarts_of(name) + 1} of at most "
                 f"{self.plan.restarts}) after it died: {lives.dead(name)}")
        t0 = time.monotonic()
        got = self.envs.start_one(entry, protocols.environments()[entry.kind](),
                              Availability.yes(), self.workdir)
        took = time.monotonic() - t0
        if isinstance(got, str):
            lives.restart_failed(name, got)
            return
        self.envs.restarted(name, got, self.loadgen)
        lives.restarted(name, took)
        ready = got.milestones.get("ready", float("nan"))
        self.log(f"{name}: restarted: ready in {ready:.2f} s ({took:.1f} s in all); its "
                 "workloads are prepared again")


def _why_dead(inst: Instance) -> str:
    """Instance.alive(), for the runner: a check that itself breaks says nothing (but a lost
    platform stops the run)."""
    try:
        return inst.alive()
    except PlatformLost:
        raise
    except Exception:
        return ""
