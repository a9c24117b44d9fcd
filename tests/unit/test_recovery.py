"""Recovery after a crash (run/recovery.py, host/owners.py): which leftovers a sweep removes,
decided from real ledgers held (or not) by real processes, with leftovers whose removal is
recorded instead of done. Needs no root: the ledgers live in a temporary directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import DATA

from isotax.host import owners
from isotax.protocols import Leftover, Stage
from isotax.run.leaks import parse_iptables_save_rules
from isotax.run.measuring import measuring_turn
from isotax.run.recovery import owner_of, recover

# A process that claims a ledger in DIR for RUN, marks MARK, says so, and lives until killed.
OWNER = """
import sys, time
from pathlib import Path
from isotax.host import owners
owners.claim(sys.argv[2], directory=Path(sys.argv[1]))
owners.mark(sys.argv[3])
print(owners.mine(), flush=True)
time.sleep(600)
"""


class Owner:
    def __init__(self, directory: Path, run_id: str, mark: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", OWNER, str(directory), run_id, mark],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.name = self.proc.stdout.readline().strip()
        assert self.name, "the owner process did not claim its ledger"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def ledger_dir(tmp_path: Path) -> Path:
    return tmp_path / "owners"


def _ledger(d: Path, name: str) -> owners.Ledger:
    return next(lg for lg in owners.ledgers(d) if lg.name == name)


def test_a_ledger_is_live_while_its_owner_lives_and_dead_after_sigkill(ledger_dir: Path) -> None:
    o = Owner(ledger_dir, "20261124-run-aaaa", "tagab1")
    try:
        lg = _ledger(ledger_dir, o.name)
        assert lg.live and lg.pid == o.proc.pid and lg.run_id == "20261124-run-aaaa"
        assert "tagab1" in lg.marks and lg.owns(("netns itx-lgtagab1",))
        assert not lg.owns(("netns itx-lgffff99",))
    finally:
        o.kill()
    assert _ledger(ledger_dir, o.name).live is False  # the kernel dropped its lock


def _recorded(what: str, removed: list[str], stage: Stage = Stage.FILE) -> Leftover:
    return Leftover(what, [("true",)], stage=stage, removal=lambda: removed.append(what))


def test_a_sweep_removes_only_what_dead_owners_left(ledger_dir: Path) -> None:
    dead = Owner(ledger_dir, "run-dead", "dead01")
    dead.kill()
    live = Owner(ledger_dir, "run-live", "live01")
    removed: list[str] = []
    present = {"netns itx-lgdead01", "netns itx-lglive01", "link itx-unknown"}

    def find() -> list[Leftover]:
        return [_recorded(w, removed) for w in sorted(present - set(removed))]

    try:
        first = recover(find, ledger_dir)
        # The dead run's netns goes; the live run's stays; one of nobody's stays while an
        # isotax process lives (it may not have recorded it yet).
        assert removed == ["netns itx-lgdead01"]
        assert [o.ledger.run_id for _, o in first.removed if o.ledger] == ["run-dead"]
        kept = dict((str(lo).split(" (")[0], why) for lo, why in first.kept)
        assert "live" in kept["netns itx-lglive01"] and "run-live" in kept["netns itx-lglive01"]
        assert "no record of its owner" in kept["link itx-unknown"]
        assert "removed 1 leftover(s) of dead isotax processes (run-dead)" in first.summary()
        assert dead.name not in {lg.name for lg in owners.ledgers(ledger_dir)}  # forgotten
    finally:
        live.kill()
    second = recover(find, ledger_dir)  # its owner is dead now, and nothing else lives
    assert sorted(removed) == sorted(present) and not second.kept and not second.failed
    assert owners.ledgers(ledger_dir) == []


def test_leftovers_go_in_stage_order_and_failures_are_reported(ledger_dir: Path) -> None:
    order: list[str] = []

    def failing() -> None:
        raise OSError("device busy")

    items = [_recorded("netns itx-a", order, Stage.NETNS),
             _recorded("process 1 x itx-b", order, Stage.PROCESS),
             _recorded("container itx-c", order, Stage.CONTAINER),
             Leftover("mount /x/itx-d", stage=Stage.MOUNT, removal=failing)]
    out = recover(lambda: [i for i in items if str(i).split(" (")[0] not in order], ledger_dir)
    assert order == ["container itx-c", "process 1 x itx-b", "netns itx-a"]
    assert [(lo.what, why) for lo, why in out.failed] == [("mount /x/itx-d", "device busy")]
    assert "could not be removed (first: mount /x/itx-d: device busy)" in out.summary()


def test_a_process_names_its_owner_in_its_environment(ledger_dir: Path) -> None:
    o = Owner(ledger_dir, "run-x", "zz99aa")
    child = subprocess.Popen(["sleep", "60"], env={**os.environ, owners.ENV_VAR: o.name})
    deadline = time.monotonic() + 10  # until it has exec'd: before, /proc shows the parent's
    while b"sleep" not in Path(f"/proc/{child.pid}/cmdline").read_bytes() and \
            time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        lo = Leftover(f"process {child.pid} sleep 60", stage=Stage.PROCESS, pid=child.pid)
        assert owner_of(lo, owners.ledgers(ledger_dir)).ledger == _ledger(ledger_dir, o.name)
        o.kill()
        who = owner_of(lo, owners.ledgers(ledger_dir))
        assert who.ledger is not None and not who.ledger.live
        assert who.words.startswith(f"dead isotax process {o.proc.pid}")
    finally:
        child.kill()
        child.wait()


def test_an_iptables_leftover_is_removed_by_its_delete_command() -> None:
    rules = parse_iptables_save_rules((DATA / "network" / "iptables-nat-S.txt").read_text(),
                                      "nat")
    assert rules and all(r.stage is Stage.RULE for r in rules)
    argv = rules[0].commands[0]
    assert argv[:6] == ("iptables", "-w", "10", "-t", "nat", "-D")
    assert "itx-brdata" in argv and "isotax" in argv


def test_a_second_run_waits_for_the_measuring_lock(tmp_path: Path) -> None:
    lock = tmp_path / "measuring.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, sys, time\nf = open(sys.argv[1], 'a')\nfcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\ntime.sleep(2)\n"), str(lock)], stdout=subprocess.PIPE,
        text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    said: list[str] = []
    t0 = time.monotonic()
    with measuring_turn(False, said.append, lock_path=lock, poll_s=0.1):
        waited = time.monotonic() - t0
    holder.wait(10)
    assert waited >= 1.0, "the second run did not wait for the first"
    assert len(said) == 1 and said[0].startswith("waiting for ") and "--beside" in said[0]
    said.clear()
    with measuring_turn(False, said.append, lock_path=lock, poll_s=0.1):
        pass  # nobody holds it now: no wait, nothing said
    assert said == []


def test_a_setting_no_run_owns_goes_even_while_another_lives(ledger_dir: Path) -> None:
    live = Owner(ledger_dir, "run-live", "live02")
    removed: list[str] = []
    setting = Leftover("net.ipv4.ip_forward changed by isotax", stage=Stage.SETTING,
                       anyone=True, removal=lambda: removed.append(setting.what))
    stray = _recorded("link itx-stray", removed)
    try:
        out = recover(lambda: [x for x in (setting, stray) if x.what not in removed],
                      ledger_dir)
    finally:
        live.kill()
    assert removed == [setting.what]
    assert [str(lo).split(" (")[0] for lo, _ in out.kept] == ["link itx-stray"]


def test_a_helper_that_outlives_its_owner_is_found_and_its_temp_files_are_its(
        ledger_dir: Path, tmp_path: Path) -> None:
    """A process started with ISOTAX_OWNER (as everything isotax starts is) that no other
    finder knows (a perf stat, say) is a leftover; recovery gives it to its ledger: removed
    once that owner is dead. A temporary name from temp_prefix carries the process's tag."""
    from isotax.run.leaks import find_leaks, leaked_owned_processes

    owner = Owner(ledger_dir, "run-helper", "help01")
    helper = subprocess.Popen(["sleep", "307.5"], env={**os.environ,
                                                        owners.ENV_VAR: owner.name})
    try:
        # Popen returns once the child has left the parent's memory, a moment before the
        # kernel has set up its new command line.
        deadline = time.monotonic() + 10
        while b"sleep" not in Path(f"/proc/{helper.pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        found = [x for x in leaked_owned_processes(set()) if x.pid == helper.pid]
        assert len(found) == 1 and "sleep 307.5" in found[0].what
        if os.geteuid() == 0:  # the whole finder reads runtimes' state: root only
            assert any(x.pid == helper.pid for x in find_leaks())
        lg = owners.ledgers(ledger_dir)
        assert owner_of(found[0], lg).ledger is not None
        assert owner_of(found[0], lg).ledger.live  # type: ignore[union-attr]
        owner.kill()
        lg = owners.ledgers(ledger_dir)
        assert not owner_of(found[0], lg).ledger.live  # type: ignore[union-attr]
        # Reported once: a process another finder knows is not listed again.
        assert all(x.pid != helper.pid for x in leaked_owned_processes({helper.pid}))
    finally:
        helper.kill()
        helper.wait(10)
    prefix = owners.temp_prefix("perf")
    assert prefix.startswith("itx-perf-t") and prefix == owners.temp_prefix("perf")
    tag = prefix.split("-")[2]
    if owners.mine():  # a process that may not write /run/isotax records nothing (nor makes)
        assert tag in next(x for x in owners.ledgers() if x.name == owners.mine()).marks


def test_a_name_several_ledgers_mark_is_the_live_ones() -> None:
    """The local cluster's names are fixed (itxcni0, itx-k8s): a killed supervisor's ledger
    still marks them when the next `cluster up` marks them too; the live one owns them, so a
    run's recovery keeps the running cluster's links."""
    dead = owners.Ledger("1-1", 1, live=False, marks=("itxcni0", "itx-k8s"))
    live = owners.Ledger("2-2", 2, live=True, marks=("itxcni0", "itx-k8s"))
    link = Leftover("link itxcni0", [("ip", "link", "del", "itxcni0")], stage=Stage.LINK,
                    names=("itxcni0",))
    assert owner_of(link, [dead, live]).ledger is live
    assert owner_of(link, [dead]).ledger is dead
    assert owner_of(link, []).ledger is None


# Where a temporary file or folder may be made without its name carrying the process's tag:
# folders no sweep of scratch folders reads (the cluster's own directory; runsc's state root,
# whose panic log is read and removed at once), and a file written beside its target to be
# renamed over it.
UNTAGGED_TEMP = {("host/kubernetes/registry.py", "itx-push-"),
                 ("environments/oci/gvisor.py", "itx-panic-"),
                 ("fleet/state.py", None)}


def test_every_temporary_in_a_scratch_folder_carries_its_owners_tag() -> None:
    """A temporary named itx-* in /tmp, /var/tmp or /dev/shm that a killed process leaves is
    removed by `isotax doctor --fix` only when the name says whose it was (owners.temp_prefix,
    or a name owners.mark recorded); an untagged one is kept as 'no record of its owner'
    forever (seen: gVisor's probe bundle moved to /var/tmp under a fixed prefix)."""
    import ast

    src = Path(owners.__file__).resolve().parents[1]
    makers = {"mkdtemp", "TemporaryDirectory", "mkstemp", "NamedTemporaryFile"}
    untagged = set()
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text())
        marked = {id(a) for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and ast.unparse(n.func) == "owners.mark" for a in ast.walk(n)}
        for n in ast.walk(tree):
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                    and n.func.attr in makers) or id(n) in marked:
                continue
            prefix = next((k.value for k in n.keywords if k.arg == "prefix"), None)
            if prefix is not None and "owners.temp_prefix" in ast.unparse(prefix):
                continue
            literal = prefix.value if isinstance(prefix, ast.Constant) else None
            untagged.add((str(path.relative_to(src)), literal))
    assert untagged == UNTAGGED_TEMP
