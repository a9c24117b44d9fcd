"""The fleet's sequence: identity, install, run, collect, per host; machines in parallel.

Each machine (fleet.machines) gets a worker thread that drives Ansible for its hosts: first
it installs isotax on each of them, then runs the plan on each in turn, so that nothing else
the fleet does (an install, another host's run) ever happens on a machine while one of its
hosts measures. The workers only drive Ansible and report; the main thread owns everything
else (the state file, the destination store, the display), fed through one queue: so the
store's connection (SQLite's may not cross threads) and the state file have one writer.

Stores: with PostgreSQL, hosts write into the fleet's store directly and the main thread
adds each run's `fleet` meta as soon as the run is there; with SQLite, each host writes its
own local store, and once its run completed the run playbook exports its bundle, fetches it
here, and the main thread imports it (store.transfer) and adds the meta.
"""

from __future__ import annotations

import json
import queue
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from isotax.fleet import ansible
from isotax.fleet.checkout import pack
from isotax.fleet.inventory import Host
from isotax.fleet.machines import Identity, group_machines, parse_identity, same_machine_lines
from isotax.fleet.progress import FleetDisplay, summary_line
from isotax.fleet.state import FleetState, HostState, save
from isotax.host import owners
from isotax.store.base import Store, StoreError
from isotax.store.bundle import open_bundle
from isotax.store.transfer import RunExists, copy_run, has_run

POLL_S = 15  # seconds between two looks at a running host's run (fleet.probe says the cost)
RUN_TIMEOUT_S = 30 * 24 * 3600  # how long the fleet follows one run: 30 days
TICK_S = 3.0  # seconds between two reads of the running hosts' cells (PostgreSQL)
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


@dataclass
class Fleet:
    """What a fleet run needs: its state (and file), the hosts to run now, the inventory, the
    checkout to install, the destination store (and the URL hosts write to; "" for SQLite),
    the plan's cell count, and how often to look at a run."""

    state: FleetState
    state_file: Path
    hosts: Sequence[Host]
    inventory: Path
    checkout: Path
    store: Store
    store_url: str
    planned: int
    poll_s: int = POLL_S
    timeout_s: int = RUN_TIMEOUT_S
    force: bool = False  # a resumed host's run goes on where its fingerprint changed


class _Controller:
    def __init__(self, fleet: Fleet, display: FleetDisplay, workdir: Path) -> None:
        self.f, self.display, self.workdir = fleet, display, workdir
        self.q: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.cancel = threading.Event()
        self.meta_written: set[str] = set()
        self.fetch_dir = workdir / "fetch"
        self.fetch_dir.mkdir()
        self.plan_file = workdir / "plan.toml"
        self.plan_file.write_text(fleet.state.plan_toml)
        self.tarball, self.digest = workdir / "isotax.tar.gz", ""

    # -- the state file ------------------------------------------------------------------------

    def host(self, name: str) -> HostState:
        return self.f.state.hosts[name]

    def set(self, name: str, status: str | None = None, reason: str | None = None,
            **timings: float) -> None:
        h = self.host(name)
        if status is not None:
            h.status = status
        if reason is not None:
            h.reason = reason
        h.timings.update({k: round(v, 1) for k, v in timings.items()})
        if status in ("complete", "failed", "unreachable"):
            h.ended = time.time()
        save(self.f.state, self.f.state_file)

    def finish(self, name: str, status: str, reason: str = "") -> None:
        self.set(name, status, reason)
        self.display.update(name, status, detail=reason)

    # -- the fleet meta ------------------------------------------------------------------------

    def write_meta(self, name: str) -> bool:
        """The run's `fleet` meta in the destination store, once the run is there."""
        h = self.host(name)
        if name in self.meta_written or not has_run(self.f.store, h.run_id):
            return name in self.meta_written
        self.f.store.put_run_meta(h.run_id, "fleet", fleet_meta(self.f.state, name))
        self.meta_written.add(name)
        return True

    # -- the steps -----------------------------------------------------------------------------

    def identify(self, names: list[str]) -> dict[str, Identity]:
        for n in names:
            self.display.update(n, "connecting")
        out = ansible.run_playbook("identity", self.f.inventory, names, {}, self.workdir,
                                   lambda e: None, self.cancel.is_set)
        found = {}
        for n, o in out.items():
            ident = parse_identity(str(o.results.get("identity", {}).get("stdout", "")))
            if o.status == ansible.OK and ident is not None:
                found[n] = ident
                self.host(n).machine = ident.to_json()
            elif o.status != ansible.CANCELED:
                why = o.reason if o.status != ansible.OK else "no machine-id or boot_id"
                status = "unreachable" if o.status == ansible.UNREACHABLE else "failed"
                self.finish(n, status, why)
        save(self.f.state, self.f.state_file)
        return found

    def worker(self, names: list[str]) -> None:
        """One machine's hosts: install each, then run each in turn."""
        try:
            installed = []
            for n in names:
                if self.cancel.is_set():
                    return
                self.q.put(("phase", n, "installing", {}))
                t0 = time.monotonic()
                out = ansible.run_playbook(
                    "install", self.f.inventory, [n],
                    {"itx_tarball": str(self.tarball), "itx_digest": self.digest},
                    self.workdir, lambda e: None, self.cancel.is_set)[n]
                self.q.put(("installed", n, out, time.monotonic() - t0))
                if out.status == ansible.OK:
                    installed.append(n)
            for i, n in enumerate(installed):
                for later in installed[i + 1:]:
                    self.q.put(("phase", later, "waiting_machine", {"detail": n}))
                if self.cancel.is_set():
                    return
                self.q.put(("phase", n, "starting", {}))
                t0 = time.monotonic()
                out = ansible.run_playbook("run", self.f.inventory, [n], self.run_vars(n),
                                           self.workdir, self.on_run_event(n),
                                           self.cancel.is_set)[n]
                self.q.put(("ran", n, out, time.monotonic() - t0))
        except Exception as e:  # a bug or a broken Ansible: the host fails, the fleet goes on
            for n in names:
                self.q.put(("crashed", n, f"{type(e).__name__}: {e}"))
        finally:
            self.q.put(("worker_done",))

    def run_vars(self, name: str) -> dict[str, Any]:
        run_id = self.host(name).run_id
        # PostgreSQL: the run's status there now, so that the host never opens the store
        # (read here in the worker's thread: a connection of its own, see status_in_store).
        status = self.status_in_store(run_id) if self.f.store_url else ""
        return {"itx_fleet": self.f.state.id, "itx_run_id": run_id,
                "itx_plan": str(self.plan_file), "itx_store": self.f.store_url,
                "itx_status": status or "absent", "itx_fetch_dir": str(self.fetch_dir),
                "itx_poll_s": self.f.poll_s, "itx_timeout_s": self.f.timeout_s,
                "itx_force": self.f.force}

    def status_in_store(self, run_id: str) -> str:
        """The run's status in the PostgreSQL store ("" when absent), from any thread: the
        main thread's connection is its own, so this opens one of its own."""
        from isotax.store.postgres import PostgresStore

        s = PostgresStore(self.f.store_url)
        try:
            return s.get_run(run_id).status if has_run(s, run_id) else ""
        finally:
            s.close()

    def on_run_event(self, name: str) -> Callable[[Mapping[str, Any]], None]:
        def on_event(e: Mapping[str, Any]) -> None:
            data = e.get("event_data") or {}
            task = str(data.get("task") or "")
            if e.get("event") == "runner_on_start" and task == "export the run" and \
                    not self.f.store_url:
                self.q.put(("phase", name, "exporting", {}))
            elif e.get("event") in ("runner_retry", "runner_on_ok") and \
                    task in ("measure", "look at the run"):
                look = _look(data.get("res") or {})
                if look is not None:
                    self.q.put(("look", name, look))
        return on_event

    # -- the main thread's side ----------------------------------------------------------------

    def handle(self, msg: tuple[Any, ...]) -> None:
        kind, name = msg[0], msg[1] if len(msg) > 1 else ""
        if kind == "phase":
            if msg[2] == "installing":
                self.host(name).started = time.time()
                self.set(name, "installing", "")
            elif msg[2] == "starting":
                self.set(name, "running", "")
            self.display.update(name, msg[2], **msg[3])
        elif kind == "installed":
            out, secs = msg[2], msg[3]
            if out.status == ansible.OK:
                fresh = "set up" in out.results
                self.set(name, **({"install_s": secs} if fresh else {"check_s": secs}))
                self.display.log(f"{name}: installed in {secs:.0f} s" if fresh else
                                 f"{name}: isotax is installed already ({secs:.0f} s)")
            elif out.status == ansible.CANCELED:
                self.set(name, "pending", "")
                self.display.update(name, "canceled")
            else:
                self.failed(name, out)
        elif kind == "look":
            self.on_look(name, msg[2])
        elif kind == "ran":
            self.on_ran(name, msg[2], msg[3])
        elif kind == "crashed" and self.host(name).status not in ("complete", "failed",
                                                                  "unreachable"):
            self.finish(name, "failed", f"the fleet's controller failed: {msg[2]}")

    def on_look(self, name: str, look: Mapping[str, Any]) -> None:
        if look.get("waiting"):
            self.display.update(name, "waiting_turn", detail=_waiting_for(str(look["waiting"])))
        elif look.get("live") and self.f.store_url:
            self.display.update(name, "running")  # its cells: from the store (tick)
        elif look.get("live") and look.get("status"):
            self.display.update(name, "running", cells=int(look.get("cells") or 0))

    def tick(self) -> None:
        """PostgreSQL: each running host's cells, and its run's fleet meta once it is there,
        read from the store itself."""
        if not self.f.store_url:
            return
        for name, v in self.display.views.items():
            if v.phase in ("starting", "waiting_turn", "running") and self.write_meta(name):
                self.display.update(name, cells=len(self.f.store.done_cells(
                    self.host(name).run_id)))

    def on_ran(self, name: str, out: ansible.Outcome, secs: float) -> None:
        h = self.host(name)
        self.tick()
        h.timings["run_s"] = round(secs, 1)
        if out.status == ansible.CANCELED:
            self.set(name, reason="the fleet was interrupted: a run started there goes on; "
                                  "--resume follows it")
            self.display.update(name, "canceled")
            return
        # The host's last look at its run (isotax.fleet.probe): its exit status, its words.
        last = _look(out.results.get("measure") or out.results.get("look at the run") or {})
        if out.status != ansible.OK:
            if self.f.store_url:
                self.write_meta(name)  # a partial run is the fleet's too
            stored = (self.f.store.get_run(h.run_id).status if self.f.store_url and
                      has_run(self.f.store, h.run_id) else str((last or {}).get("status")
                                                                 or ""))
            h.refused = refused_plan(last, stored)
            self.failed(name, out)
            return
        if not self.f.store_url:
            self.display.update(name, "importing")
            t0 = time.monotonic()
            why = self.import_bundle(name)
            if why:
                self.finish(name, "failed", why)
                return
            self.set(name, import_s=time.monotonic() - t0)
        status = self.f.store.get_run(h.run_id).status if has_run(self.f.store, h.run_id) \
            else ""
        self.write_meta(name)
        if status == "complete":
            h.refused = False
            self.finish(name, "complete")
            return
        # PostgreSQL: the host said how its run ended; the store says how far it got.
        h.refused = refused_plan(last, status)
        said = str((last or {}).get("reason") or "its run did not complete")
        where = f"run {status} in the store" if status else "its run is not in the store"
        self.finish(name, "failed", f"{said}; {where}")

    def import_bundle(self, name: str) -> str:
        """Import the host's fetched bundle into the store; "" or why it failed."""
        run_id = self.host(name).run_id
        bundle = self.fetch_dir / f"{run_id}.itx.tar.gz"
        where = self.workdir / "import" / run_id
        where.mkdir(parents=True)
        try:
            src, rid = open_bundle(bundle, where)
            try:
                if rid != run_id:
                    return f"the bundle fetched from {name} holds run {rid}, not {run_id}"
                copy_run(src, run_id, self.f.store)
            finally:
                src.close()
        except RunExists:
            pass  # imported by an earlier attempt that ended before saying so
        except StoreError as e:
            return f"its run could not be imported: {e}"
        finally:
            shutil.rmtree(where, ignore_errors=True)
            bundle.unlink(missing_ok=True)
        return ""

    def failed(self, name: str, out: ansible.Outcome) -> None:
        status = "unreachable" if out.status == ansible.UNREACHABLE else "failed"
        self.finish(name, status, out.reason)

    def run(self) -> int:
        names = [h.name for h in self.f.hosts]
        self.display.log(f"fleet [bold]{self.f.state.id}[/]: plan {self.f.state.plan_name} on "
                         f"{len(names)} host{'s' if len(names) != 1 else ''}; state "
                         f"{self.f.state_file}")
        self.digest = pack(self.f.checkout, self.tarball)
        idents = self.identify(names)
        if self.cancel.is_set():
            return EXIT_INTERRUPTED
        groups = group_machines(names, idents)
        for line in same_machine_lines(groups, idents):
            self.display.log(line)
        workers = [threading.Thread(target=self.worker, args=(g,), daemon=True,
                                    name=f"itx-fleet-{g[0]}") for g in groups]
        for w in workers:
            w.start()
        running, ticked = len(workers), time.monotonic()
        while running:
            if time.monotonic() - ticked >= TICK_S:
                self.tick()
                ticked = time.monotonic()
            try:
                msg = self.q.get(timeout=0.5)
            except queue.Empty:
                continue
            if msg[0] == "worker_done":
                running -= 1
            else:
                self.handle(msg)
        for w in workers:
            w.join(timeout=30)
        if self.cancel.is_set():
            return EXIT_INTERRUPTED
        return EXIT_OK if not self.f.state.unfinished() else EXIT_FAILED

    def interrupt(self, signum: int = 0, frame: object = None) -> None:
        """Ctrl-C (SIGINT): stop driving Ansible, let the workers end and the state be
        saved; a second Ctrl-C stops at once (the state file is whole either way)."""
        if self.cancel.is_set():
            raise KeyboardInterrupt
        self.cancel.set()
        self.display.log("interrupted: stopping Ansible; runs started go on on their hosts "
                         f"(`isotax fleet run --resume {self.f.state.id}` follows them)")


def fleet_meta(state: FleetState, name: str) -> dict[str, Any]:
    """The run meta `fleet` of a host's run: how `isotax fleet report` finds a fleet's runs,
    and the host's machine (machine-id and boot), so the report can say which hosts are one
    machine."""
    h = state.hosts[name]
    return {"id": state.id, "host": name, "address": h.address, "machine": dict(h.machine)}


def refused_plan(last: Mapping[str, Any] | None, stored: str) -> bool:
    """Whether a host's failed attempt was its isotax run refusing the plan there: exit 2
    (a one-line refusal) with the run refused or never stored. A refusal of a resume (the host
    changed: exit 2, the run interrupted in the store) is not one: --resume --force goes on."""
    return last is not None and last.get("rc") == 2 and stored in ("", "refused")


def _waiting_for(line: str) -> str:
    """What a run waits for, from its line "waiting for run X (PID N) to end: one run ..."."""
    what = line.split(": ", 1)[0].removeprefix("waiting for ").removesuffix(" to end")
    return what[:100]


def _look(res: Mapping[str, Any]) -> dict[str, Any] | None:
    """The probe's JSON line in a poll's result (raw's output may carry a banner)."""
    for line in reversed(str(res.get("stdout") or "").splitlines()):
        if line.strip().startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def already_complete(fleet: Fleet, say: Callable[[str], None]) -> list[str]:
    """Hosts whose run completed in a PostgreSQL store while the fleet was away (it was
    unreachable, the controller was stopped): complete without contacting them."""
    done = []
    for h in fleet.hosts:
        hs = fleet.state.hosts[h.name]
        if not fleet.store_url or not hs.run_id or not has_run(fleet.store, hs.run_id):
            continue
        if fleet.store.get_run(hs.run_id).status == "complete":
            fleet.store.put_run_meta(hs.run_id, "fleet", fleet_meta(fleet.state, h.name))
            hs.status, hs.reason, hs.ended, hs.refused = "complete", "", time.time(), False
            hs.leftovers = True  # its run playbook never got to its clean-up: tidy()
            say(f"{h.name}: its run {hs.run_id} completed in the store while the fleet was away")
            done.append(h.name)
    save(fleet.state, fleet.state_file)
    return done


def tidy(fleet: Fleet, names: Sequence[str], say: Callable[[str], None]) -> None:
    """Remove the run's files (script, PID, exit status, plan; the log stays) from hosts whose
    run the fleet found complete without reaching them: their run playbook was cut off before
    its own clean-up. A host still out of reach keeps them, marked for the next resume."""
    if not names:
        return
    workdir = Path(tempfile.mkdtemp(prefix=owners.temp_prefix("fleet")))
    try:
        for name in names:
            hs = fleet.state.hosts[name]
            out = ansible.run_playbook("clean", fleet.inventory, [name],
                                       {"itx_fleet": fleet.state.id, "itx_run_id": hs.run_id},
                                       workdir, lambda e: None, lambda: False)[name]
            hs.leftovers = out.status != ansible.OK
            say(f"{name}: its run's files there removed (its log stays)" if not hs.leftovers
                else f"{name}: its run's files there could not be removed ({out.reason}); "
                     f"the next `isotax fleet run --resume {fleet.state.id}` tries again")
            save(fleet.state, fleet.state_file)
    finally:
        ansible.close_masters(workdir)
        shutil.rmtree(workdir, ignore_errors=True)


def run_fleet(fleet: Fleet, display: FleetDisplay) -> int:
    """Run the fleet's hosts; returns the exit status (0 all complete, 1 some not, 130
    interrupted). Everything it makes on this machine is under one /tmp/itx-fleet-* dir,
    removed at the end however it ends (ssh's master connections ended first)."""
    workdir = Path(tempfile.mkdtemp(prefix=owners.temp_prefix("fleet")))
    previous = signal.getsignal(signal.SIGINT)
    try:
        ctl = _Controller(fleet, display, workdir)
        # Ctrl-C cancels Ansible through ansible-runner's cancel callback (its playbooks run
        # in their own sessions and never see the terminal's SIGINT), not by an exception
        # thrown into whatever the main thread was doing.
        signal.signal(signal.SIGINT, ctl.interrupt)
        return ctl.run()
    finally:
        signal.signal(signal.SIGINT, previous)
        ansible.close_masters(workdir)
        shutil.rmtree(workdir, ignore_errors=True)


def summary(state: FleetState) -> list[str]:
    return [summary_line(h) for h in state.hosts.values()]
