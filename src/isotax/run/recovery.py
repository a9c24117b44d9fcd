"""Recovery after a crash: remove what a dead isotax process left, never what a live one owns.

A run killed with SIGKILL (or a host that rebooted mid-run) leaves its namespaces, links,
rules, mounts, cgroups, containers, VMs and servers behind, some still running and burning CPU
through the next run's measurements. `isotax run`, `isotax run --resume` and `isotax doctor
--fix` call recover() first. Each leftover (run/leaks.py finds them by name) is given an owner
by host.owners: the ledger whose marks its names contain, or, for a process, the ledger named
in its environment. Then:

  owned by a live process    kept, whatever asks (a run beside this one, the test suite);
  owned by a dead process    removed;
  owned by no ledger         removed when no isotax process lives (an older isotax, or a
                             leftover from before a reboot), else kept and reported: it could
                             be a live process's that it has not recorded yet; except what no
                             one run owns (Leftover.anyone: the forwarding sysctl once no
                             isotax bridge is left), which goes whoever lives.

Leftovers are removed in their Stage order (containers through their runtime, then processes,
mounts, cgroups, rules, links, namespaces, files, host settings), in up to three passes, each
finding again what is left (a container's removal takes its processes and mounts with it).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from isotax.host import command, owners
from isotax.protocols import Leftover
from isotax.run.leaks import find_leaks

PASSES = 3


@dataclass(frozen=True)
class Owner:
    """Whose a leftover is: a ledger (live or dead), or nobody's."""

    ledger: owners.Ledger | None

    @property
    def words(self) -> str:
        led = self.ledger
        if led is None:
            return "no record of its owner"
        state = "live" if led.live else "dead"
        run = f" (run {led.run_id})" if led.run_id else ""
        return f"{state} isotax process {led.pid}{run}"


def owner_of(leftover: Leftover, ledgers: Sequence[owners.Ledger]) -> Owner:
    """The ledger a leftover belongs to: a process names its own (ISOTAX_OWNER), anything
    else by the marks its names contain."""
    if leftover.pid is not None:
        name = owners.owner_of_process(leftover.pid)
        if name is not None:
            found = next((lg for lg in ledgers if lg.name == name), None)
            # A ledger that is gone was its owner's, and its owner ended: dead.
            return Owner(found or owners.Ledger(name, owners.pid_of(name), live=False))
    owning = [lg for lg in ledgers if lg.owns(leftover.names)]
    # Names that several ledgers mark (the local cluster's fixed names: one ledger per `isotax
    # cluster up`, a killed supervisor's among them) belong to the live one.
    live = [lg for lg in owning if lg.live]
    return Owner((live or owning)[0]) if owning else Owner(None)


@dataclass
class Recovery:
    """What a sweep did: removed (with whose they were), kept (and why), failed (and why)."""

    removed: list[tuple[Leftover, Owner]] = field(default_factory=list)
    kept: list[tuple[Leftover, str]] = field(default_factory=list)
    failed: list[tuple[Leftover, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def dead_runs(self) -> list[str]:
        """The runs (or PIDs) whose leftovers were removed, each once."""
        out: dict[str, None] = {}
        for _, o in self.removed:
            if o.ledger is not None:
                out[o.ledger.run_id or f"PID {o.ledger.pid}"] = None
        return list(out)

    def summary(self) -> str:
        """One line for the user ("" when there was nothing to do)."""
        if not (self.removed or self.kept or self.failed):
            return ""
        parts = []
        if self.removed:
            whose = ", ".join(self.dead_runs) or "no live owner"
            parts.append(f"removed {len(self.removed)} leftover(s) of dead isotax processes "
                         f"({whose}) in {self.seconds:.1f} s")
        if self.failed:
            parts.append(f"{len(self.failed)} could not be removed (first: "
                         f"{self.failed[0][0].what}: {self.failed[0][1]})")
        if self.kept:
            parts.append(f"kept {len(self.kept)} that a live isotax process may own "
                         f"({self.kept[0][1]})")
        return "; ".join(parts)


def _remove(leftover: Leftover) -> str:
    """Remove one leftover; "" when it is gone, else why not."""
    try:
        if leftover.removal is not None:
            leftover.removal()
            return ""
        for argv in leftover.commands:
            p = command.run(list(argv), 60)
            if p.returncode != 0:
                return f"{' '.join(argv)} exited {p.returncode}: " + \
                    (p.stderr or p.stdout).strip()[-200:]
    except (OSError, ValueError) as e:
        return str(e)
    return ""


def recover(find: Callable[[], list[Leftover]] = find_leaks,
            ledger_dir: Path | None = None) -> Recovery:
    """Remove what dead isotax processes left on this host (see the module's rules); returns
    what was removed, kept and not removable. Never raises for one leftover."""
    t0 = time.monotonic()
    out = Recovery()
    me = owners.mine()
    done: dict[str, tuple[Leftover, Owner]] = {}  # every leftover recovery set out to remove
    for _ in range(PASSES):
        # This process's own ledger counts as live: what it made is never its leftover.
        ledgers = owners.ledgers(ledger_dir)
        others_live = [lg for lg in ledgers if lg.live and lg.name != me]
        found = find()
        out.kept = []
        todo: list[tuple[Leftover, Owner]] = []
        for lo in found:
            who = owner_of(lo, ledgers)
            if who.ledger is not None and who.ledger.live:
                out.kept.append((lo, f"owned by {who.words}"))
            elif who.ledger is None and others_live and not lo.anyone:
                pids = ", ".join(str(lg.pid) for lg in others_live)
                out.kept.append((lo, f"no record of its owner while isotax process(es) {pids} "
                                     "live; `isotax doctor --fix` once they end removes it"))
            elif str(lo) in done:
                continue  # tried in an earlier pass: its failure stands
            else:
                todo.append((lo, who))
        if not todo:
            break
        for lo, who in sorted(todo, key=lambda t: t[0].stage):
            done[str(lo)] = (lo, who)
            why = _remove(lo)
            if why:
                out.failed.append((lo, why))
    # Removed: what is gone now, by its own command or with what held it (a container's
    # cgroups go with the container); what failed once but is gone now did not fail.
    remaining = find() if done else [lo for lo, _ in out.kept]
    left = {str(x) for x in remaining}
    out.removed = [pair for key, pair in done.items() if key not in left]
    out.failed = [(lo, why) for lo, why in out.failed if str(lo) in left]
    # A dead owner's ledger goes once nothing it names is left.
    for lg in owners.ledgers(ledger_dir):
        if not lg.live and not any(owner_of(x, [lg]).ledger is lg for x in remaining):
            owners.forget(lg, ledger_dir)
    out.seconds = time.monotonic() - t0
    return out


def live_runs(ledger_dir: Path | None = None) -> list[owners.Ledger]:
    """The isotax runs measuring on this host now (their ledgers name a run), this one aside."""
    me = owners.mine()
    return [lg for lg in owners.ledgers(ledger_dir)
            if lg.live and lg.run_id and lg.name != me and _alive(lg.pid)]


def _alive(pid: int) -> bool:
    with contextlib.suppress(OSError):
        os.kill(pid, 0)
        return True
    return False
