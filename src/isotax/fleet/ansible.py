"""Driving Ansible: one playbook through ansible-runner, and its events turned into one
outcome per host (ok, failed with the reason, unreachable with Ansible's reason).

ansible-runner starts `ansible-playbook` from PATH: the venv's bin directory (where pip put
ansible-core with isotax) goes first, so the fleet never runs another Ansible that happens to
be installed. Everything Ansible writes on this machine lives under the fleet's own temporary
directory: ansible-runner's private data dir (its artifacts), Ansible's local temp, and the
ssh ControlPersist sockets, whose master processes `close_masters` ends, so a fleet run
leaves no ssh process behind.

The events arrive while the playbook runs (the handler is called from the thread running
it); runner_retry events are the run playbook's polls, which carry the probe's look at the
run (fleet.probe) for the progress display. Events are not kept on disk (the handler says
so), and only the last result per host and task is kept in memory: a run of weeks polls
hundreds of thousands of times.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

# Each connection's master stays 60 s after its last use (Ansible's default), and a dead
# link is noticed in about a minute (ServerAlive), not after TCP's retransmissions (15 min).
SSH_ARGS = ("-C -o ControlMaster=auto -o ControlPersist=60s -o ServerAliveInterval=15 "
            "-o ServerAliveCountMax=4")
OK, FAILED, UNREACHABLE, CANCELED = "ok", "failed", "unreachable", "canceled"


def playbook(name: str) -> Path:
    """The path of one of isotax's playbooks (package data)."""
    return Path(str(resources.files("isotax.fleet") / "playbooks" / f"{name}.yml"))


def bin_dir() -> Path:
    """The directory of this Python's scripts: the venv's bin, where ansible-core's are."""
    return Path(sys.executable).parent


def tool(name: str) -> str:
    """An Ansible program: the venv's own, else whatever PATH has."""
    own = bin_dir() / name
    return str(own) if own.exists() else name


def environment(workdir: Path) -> dict[str, str]:
    """The environment of ansible-playbook: the venv first on PATH, Ansible's local files and
    ssh's control sockets under workdir. A user's own ANSIBLE_SSH_ARGS is kept."""
    env = {
        "PATH": f"{bin_dir()}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_PIPELINING": "True",  # one ssh command per task, not five
        "ANSIBLE_SSH_CONTROL_PATH_DIR": str(workdir / "cp"),
        "ANSIBLE_LOCAL_TEMP": str(workdir / "tmp"),
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        # A connection that drops (a poll in flight as a link blips) is tried again, 3 times
        # with Ansible's backoff (1, 3, 7 s), before the host counts as unreachable; its reason
        # is then the last attempt's (e.g. "Connection refused"), not "connection closed".
        "ANSIBLE_SSH_RETRIES": "3",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
    }
    if "ANSIBLE_SSH_ARGS" not in os.environ:
        env["ANSIBLE_SSH_ARGS"] = SSH_ARGS
    return env


def close_masters(workdir: Path) -> None:
    """End the ssh master connections Ansible left (ControlPersist) under workdir/cp."""
    cp = workdir / "cp"
    for sock in sorted(cp.iterdir()) if cp.is_dir() else []:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "itx-fleet"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=15)


# -- events -> outcomes ------------------------------------------------------------------------

@dataclass
class Outcome:
    host: str
    status: str = OK  # ok | failed | unreachable | canceled
    reason: str = ""
    task: str = ""  # the task that failed
    results: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # task -> last result
    skipped: set[str] = field(default_factory=set)  # tasks skipped


def _last_line(text: Any) -> str:
    lines = [x.strip() for x in str(text or "").splitlines() if x.strip()]
    return lines[-1] if lines else ""


# What Ansible puts before ssh's own words about an unreachable host.
_UNREACHABLE_BOILERPLATE = re.compile(
    r"^(Task failed: )?(Failed to connect to the host via ssh: |Data could not be sent to "
    r"remote host \"[^\"]*\"\. Make sure this host can be reached over ssh: )?")


def unreachable_reason(res: Mapping[str, Any]) -> str:
    """Ansible's words for an unreachable host, without its boilerplate: ssh's own."""
    msg = " ".join(str(res.get("msg") or "no answer").split())
    return _UNREACHABLE_BOILERPLATE.sub("", msg, count=1) or msg


def failure_reason(task: str, action: str, res: Mapping[str, Any]) -> str:
    """One line for a failed task: a fail task's message as it is (the playbooks' own words,
    the probe's reason); a command's exit status and its last line of stderr (else stdout);
    any other module's message, after the task's name."""
    msg = " ".join(str(res.get("msg") or "").split())
    if action.rsplit(".", 1)[-1] == "fail":
        return msg or task
    if "rc" in res and (not msg or msg == "non-zero return code"):
        said = _last_line(res.get("stderr")) or _last_line(res.get("stdout"))
        return f"{task}: exit {res['rc']}" + (f": {said}" if said else "")
    return f"{task}: {msg or 'failed'}"


class Outcomes:
    """Folds a playbook's events into one Outcome per host."""

    def __init__(self) -> None:
        self.hosts: dict[str, Outcome] = {}

    def feed(self, event: Mapping[str, Any]) -> Outcome | None:
        """Take one event; returns the host's outcome when the event concerns a host."""
        data = event.get("event_data") or {}
        host = data.get("host")
        if not host:
            return None
        out = self.hosts.setdefault(str(host), Outcome(str(host)))
        kind, task = event.get("event"), str(data.get("task") or "")
        res = data.get("res") or {}
        if kind == "runner_on_ok":
            out.results[task] = res
        elif kind == "runner_on_skipped":
            out.skipped.add(task)
        elif kind == "runner_on_unreachable" and out.status == OK:
            out.status, out.task, out.reason = UNREACHABLE, task, unreachable_reason(res)
        elif kind == "runner_on_failed" and not data.get("ignore_errors") and out.status == OK:
            action = str(data.get("task_action") or data.get("resolved_action") or "")
            out.status, out.task, out.reason = FAILED, task, failure_reason(task, action, res)
        return out

    def result(self, hosts: Iterable[str], canceled: bool = False) -> dict[str, Outcome]:
        """Every host's outcome; a host the playbook never got to (a canceled run, a crash
        of Ansible itself) is canceled or failed, never ok."""
        out = {}
        for h in hosts:
            o = self.hosts.get(h)
            if o is None:
                o = Outcome(h, CANCELED if canceled else FAILED,
                            "canceled" if canceled else "Ansible reported nothing for it")
            elif canceled and o.status == OK:
                o = replace(o, status=CANCELED, reason="canceled")
            out[h] = o
        return out


def outcomes(events: Iterable[Mapping[str, Any]], hosts: Iterable[str]) -> dict[str, Outcome]:
    """The outcome per host of a finished playbook's events."""
    fold = Outcomes()
    for e in events:
        fold.feed(e)
    return fold.result(hosts)


# -- running a playbook ------------------------------------------------------------------------

def run_playbook(name: str, inventory: Path, hosts: list[str], extravars: Mapping[str, Any],
                 workdir: Path, on_event: Callable[[Mapping[str, Any]], None],
                 cancelled: Callable[[], bool]) -> dict[str, Outcome]:
    """Run isotax's playbook `name` on `hosts` of the inventory (limit), in a private data
    dir under workdir; each event goes to on_event as it arrives. Returns each host's outcome.
    A failure of Ansible itself (no events) is every host's failure, with ansible-runner's
    status."""
    import ansible_runner  # here: ansible-runner's import costs 0.3 s, only fleet needs it

    private = workdir / "runner" / f"{name}-{'-'.join(hosts)[:80]}-{os.getpid()}"
    n = 0
    while private.exists():
        n += 1
        private = private.with_name(f"{private.name.rsplit('.', 1)[0]}.{n}")
    private.mkdir(parents=True)
    fold = Outcomes()

    def handler(event: Mapping[str, Any]) -> bool:
        fold.feed(event)
        on_event(event)
        return False  # not kept on disk

    r = ansible_runner.run(
        private_data_dir=str(private), playbook=str(playbook(name)), inventory=str(inventory),
        limit=",".join(hosts), extravars=dict(extravars), envvars=environment(workdir),
        forks=max(1, len(hosts)), quiet=True, event_handler=handler,
        cancel_callback=cancelled)
    result = fold.result(hosts, canceled=r.status == "canceled")
    if r.status not in ("successful", "failed", "canceled"):
        # ansible-playbook itself failed (bad playbook, no inventory, ...): its last words
        tail = ""
        with contextlib.suppress(Exception):
            tail = _last_line(r.stdout.read())
        for h, o in result.items():
            if o.status == OK or not fold.hosts.get(h):
                result[h] = replace(o, status=FAILED,
                                    reason=f"Ansible {r.status} (rc {r.rc}): {tail}")
    return result
