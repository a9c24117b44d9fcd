"""The fleet's state file: <results>/fleets/<fleet id>.json.

What `isotax fleet run --resume FLEET` needs to go on, and what `isotax fleet report` reads
about hosts that have no run in the store: the plan, the inventory, the store, and per host
its run id, status (pending, installing, running, complete, failed, unreachable), the reason
of a failure, whether the host refused the plan, whether its run's files are still to be
removed there, its machine identity and timings. Written atomically (a temporary file renamed
over the old one) after every change, so a controller killed at any moment leaves the last
whole state. The store URL is kept without its password (store.postgres.redacted): a resume
takes the password again from --store or ISOTAX_STORE.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_VERSION = 1
STATUSES = ("pending", "installing", "running", "complete", "failed", "unreachable")
FINISHED = "complete"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


class StateError(Exception):
    """A state file that is missing or unreadable: one line naming it and the fix."""


def new_fleet_id(plan_name: str, now: float | None = None) -> str:
    """fleet-YYYYMMDD-HHMMSS-<plan>-<hex4>."""
    when = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"fleet-{when}-{safe_name(plan_name)}-{secrets.token_hex(2)}"


def new_run_id(plan_name: str, host: str, now: float | None = None) -> str:
    """A host's run id: run.schedule.new_run_id's form with the host's name in it
    (YYYYMMDD-HHMMSS-<plan>-<host>-<hex4>), so a store's runs say which host made them."""
    when = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"{when}-{safe_name(plan_name)}-{safe_name(host)}-{secrets.token_hex(2)}"


def safe_name(text: str) -> str:
    """text with what a file name or a run id should not hold replaced by '-'."""
    return _SAFE.sub("-", text).strip("-.") or "host"


@dataclass
class HostState:
    name: str
    address: str
    port: int
    run_id: str = ""
    status: str = "pending"
    reason: str = ""
    machine: dict[str, str] = field(default_factory=dict)  # machine_id, boot_id
    timings: dict[str, float] = field(default_factory=dict)  # install_s, run_s, import_s
    started: float | None = None  # this host's latest attempt
    ended: float | None = None
    # Its latest attempt's isotax run refused the plan on this host (exit 2, its run refused
    # or never stored): a resumed fleet runs the stored plan, so only a new fleet with the
    # plan changed gets further there.
    refused: bool = False
    # The run's files (script, PID, exit status, plan) the fleet could not remove from the
    # host because it did not reach it; the next `fleet run --resume` removes them.
    leftovers: bool = False


@dataclass
class FleetState:
    id: str
    plan_name: str
    plan_toml: str
    inventory: str  # the inventory's absolute path
    store: str  # the PostgreSQL URL without its password; "" for the SQLite store
    results: str  # the --results directory (the state file and a SQLite store live there)
    created: float = field(default_factory=time.time)
    hosts: dict[str, HostState] = field(default_factory=dict)  # inventory order

    def unfinished(self) -> list[HostState]:
        return [h for h in self.hosts.values() if h.status != FINISHED]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["version"] = STATE_VERSION
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> FleetState:
        if int(d.get("version", 0)) > STATE_VERSION:
            raise StateError(f"fleet state {d.get('id')} was written by a newer isotax; "
                             "upgrade isotax to resume it")
        hosts = {name: HostState(**h) for name, h in (d.get("hosts") or {}).items()}
        fields = {k: d[k] for k in ("id", "plan_name", "plan_toml", "inventory", "store",
                                    "results", "created")}
        return cls(**fields, hosts=hosts)


def state_path(results: Path, fleet_id: str) -> Path:
    return results / "fleets" / f"{fleet_id}.json"


def save(state: FleetState, path: Path) -> None:
    """Write the state atomically: a whole old file or a whole new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(state.to_json(), f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load(results: Path, fleet_id: str) -> FleetState:
    """The state of fleet_id under results; StateError naming what is there otherwise."""
    path = state_path(results, fleet_id)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        known = sorted(p.stem for p in (results / "fleets").glob("fleet-*.json"))
        hint = f" (fleets there: {', '.join(known[-5:])})" if known else ""
        raise StateError(f"no fleet {fleet_id} under {results / 'fleets'}{hint}; give the id "
                         "`isotax fleet run` printed, and the same --results") from None
    except (OSError, ValueError) as e:
        raise StateError(f"fleet state {path} cannot be read ({e}); it was damaged: start "
                         "a new fleet run") from None
    try:
        return FleetState.from_json(doc)
    except (KeyError, TypeError) as e:
        raise StateError(f"fleet state {path} is not one isotax wrote ({e}); start a new "
                         "fleet run") from None
