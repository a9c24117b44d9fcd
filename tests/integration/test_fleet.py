"""isotax fleet run on real Ansible over real ssh: two namespace hosts (nshosts.py) standing in
for two machines. Both are this machine (one machine-id, one boot), so the fleet runs them one
after the other, as it must. They reach no package registry, so each host's setup is
tests/data/fleet/offline-setup.sh (the controller's venv, hard-linked, pointed at the host's
own copy of the checkout) instead of scripts/setup.sh; everything else is what a real fleet
does: the checkout copied and unpacked by Ansible, the run started detached and polled, the
bundle exported, fetched and imported.

The PostgreSQL store is the suite's private server: its Unix socket in /tmp is reachable from
the namespaces, which share this machine's file system, so the hosts use the fleet's URL as
it is (no TCP). Each host gets its own isotax_dir and results under one /tmp/itx-fleet-test-*
directory, removed after the module.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support import DATA, image_where

from .nshosts import SshHost, ssh_hosts, why_not, write_inventory

pytestmark = pytest.mark.skipif(why_not() is not None, reason=why_not() or "")
image = image_where(why_not)

PLAN = """
name = "fleet{tag}"
seed = 11
repetitions = {reps}
warmups = 0
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "runc"
kind = "runc"
network = "none"
[[workloads]]
name = "compress"
params = {{ corpus_mib = {mib}, threads = 1 }}
"""
ISOTAX = [sys.executable, "-m", "isotax"]
POLL = "1"  # seconds between the fleet's looks at a run: the tests' runs last seconds


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="itx-fleet-test-", dir="/tmp"))
    try:
        yield d
    finally:
        import shutil

        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def hosts(image: object, base: Path) -> Iterator[list[SshHost]]:
    with ssh_hosts(2) as hs:
        yield hs


def _inventory(hosts: list[SshHost], base: Path, path: Path) -> Path:
    """The hosts' inventory: each host's isotax_dir and results under base by its name (so
    hosts made again under the same names find their install), the offline setup."""
    setup = f"bash {DATA / 'fleet' / 'offline-setup.sh'} {Path(sys.executable).parent.parent}"
    host_vars = {h.name: {"ansible_python_interpreter": "/usr/bin/python3",
                          "isotax_dir": str(base / h.name),
                          "isotax_results": str(base / f"{h.name}-results"),
                          "isotax_setup": setup} for h in hosts}
    return write_inventory(hosts, path, host_vars)


@pytest.fixture(scope="module")
def inventory(hosts: list[SshHost], base: Path) -> Path:
    return _inventory(hosts, base, base / "inventory.ini")


def _plan(base: Path, tag: str, reps: int = 2, mib: int = 1) -> Path:
    p = base / f"plan-{tag}.toml"
    p.write_text(PLAN.format(tag=tag, reps=reps, mib=mib))
    return p


def _h1_only(inventory: Path, path: Path) -> Path:
    """The inventory without h2, at path."""
    path.write_text("\n".join(x for x in inventory.read_text().splitlines()
                              if not x.startswith("h2 ")) + "\n")
    return path


def _run(plan: Path, inventory: Path, results: Path, store: str, rc: int
         ) -> subprocess.CompletedProcess[str]:
    """`isotax fleet run PLAN` into results, checked for leftovers and for exit status rc."""
    with _watch_leftovers():
        p = _fleet("run", str(plan), "-i", str(inventory), "--results", str(results),
                   "--poll", POLL, store=store)
    print(p.stderr, p.stdout, sep="\n")
    assert p.returncode == rc, p.stdout + p.stderr
    return p


def _fleet(*args: str, store: str | None = None, timeout: float = 900
           ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ISOTAX_STORE"}
    if store:
        env["ISOTAX_STORE"] = store
    return subprocess.run([*ISOTAX, "fleet", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _state(results: Path) -> dict:  # type: ignore[type-arg]
    (path,) = (results / "fleets").glob("fleet-*.json")
    return json.loads(path.read_text())


def _pg_runs(url: str) -> dict[str, tuple[str, int, dict]]:  # type: ignore[type-arg]
    """run id -> (status, cells, fleet meta) in the PostgreSQL store."""
    from isotax.store.postgres import PostgresStore

    s = PostgresStore(url)
    try:
        return {r.id: (r.status, len(s.done_cells(r.id)), s.run_meta(r.id).get("fleet", {}))
                for r in s.list_runs()}
    finally:
        s.close()


def _fleet_meanwhile(args: list[str], results: Path, host: str, cells: Callable[[str], int],
                     then: Callable[[subprocess.Popen[str]], None], store: str | None = None
                     ) -> tuple[int, str, str]:
    """`isotax fleet run ARGS` in the background; once `host`'s run has committed two cells
    (cells(run id)), then(the fleet's process); returns its (exit status, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "ISOTAX_STORE"}
    if store:
        env["ISOTAX_STORE"] = store
    fleet = subprocess.Popen([*ISOTAX, "fleet", "run", *args, "--results", str(results),
                              "--poll", POLL], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and fleet.poll() is None:
            # The folder is made a moment before the state's first atomic write lands in it.
            if any((results / "fleets").glob("fleet-*.json")) and \
                    cells(_state(results)["hosts"][host]["run_id"]) >= 2:
                break
            time.sleep(0.2)
        else:
            out, err = fleet.communicate(timeout=900)
            pytest.fail(f"{host}'s run committed no cell (exit {fleet.returncode}):\n"
                        f"{err}{out}")
        then(fleet)
        out, err = fleet.communicate(timeout=900)
    finally:
        if fleet.poll() is None:
            fleet.kill()
            fleet.communicate(timeout=60)
    print(err, out, sep="\n")
    return fleet.returncode, out, err


@contextlib.contextmanager
def _watch_leftovers() -> Iterator[None]:
    """After the block: no temporary directory of the fleet's, no Ansible or ssh process of
    it, no async job file of Ansible's left on this machine (the hosts' too: they share it)."""
    def fleet_dirs() -> set[str]:
        return {p.name for p in Path("/tmp").glob("itx-fleet-*")
                if not p.name.startswith("itx-fleet-test-")}

    async_dir = Path.home() / ".ansible_async"
    jobs = set(os.listdir(async_dir)) if async_dir.is_dir() else set()
    dirs = fleet_dirs()
    yield
    assert fleet_dirs() - dirs == set()
    assert (set(os.listdir(async_dir)) if async_dir.is_dir() else set()) - jobs == set()
    mine = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            args = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            if "/itx-fleet-" in args and "itx-fleet-test-" not in args:
                mine.append(args)  # ansible-playbook, or an ssh master under the fleet's dir
    assert mine == []


def _remote_files(base: Path, host: str, fleet_id: str) -> list[str]:
    """What the fleet left on the host, in its results: its run's log only."""
    return sorted(p.name for p in (base / f"{host}-results" / "fleets" / fleet_id).iterdir())


def test_a_fleet_into_postgres(hosts: list[SshHost], inventory: Path, base: Path,
                               pg_store_url: str) -> None:
    results = base / "ctl-pg"
    with _watch_leftovers():
        t0 = time.monotonic()
        p = _fleet("run", str(_plan(base, "pg")), "-i", str(inventory), "--results",
                   str(results), "--poll", POLL, store=pg_store_url)
        wall = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    print(p.stderr, p.stdout, f"wall {wall:.1f} s", sep="\n")
    assert "h1 and h2 are the same machine" in p.stderr
    assert "run one after the other" in p.stderr
    state = _state(results)
    runs = _pg_runs(pg_store_url)
    for h in hosts:
        hs = state["hosts"][h.name]
        assert hs["status"] == "complete", hs
        assert runs[hs["run_id"]][:2] == ("complete", 4)
        assert runs[hs["run_id"]][2] == {"id": state["id"], "host": h.name,
                                         "address": h.address, "machine": hs["machine"]}
        assert f"{h.name}: complete, run {hs['run_id']}" in p.stdout
        assert f"{h.name}: installed in" in p.stderr
        # the host runs the isotax the fleet installed: its own copy of the checkout
        which = subprocess.run([str(base / h.name / ".venv" / "bin" / "python"), "-c",
                                "import isotax; print(isotax.__file__)"],
                               capture_output=True, text=True, timeout=60).stdout.strip()
        assert which == str(base / h.name / "src" / "isotax" / "__init__.py")
        assert (base / h.name / ".itx-installed").is_file()
        assert _remote_files(base, h.name, state["id"]) == [f"{hs['run_id']}.log"]
    # Both hosts' runs side by side, from the one store they wrote into.
    r = _fleet("report", state["id"], "--results", str(results), store=pg_store_url)
    assert r.returncode == 0, r.stdout + r.stderr
    md = (results / "fleets" / state["id"] / "fleet.md").read_text()
    header = next(ln for ln in md.splitlines() if ln.startswith("| workload point"))
    assert "h1 (reference)" in header and "| h2 |" in header, header
    html = (results / "fleets" / state["id"] / "fleet.html").read_text()
    assert html.count("<svg") >= 1 and "h2" in html
    # one after the other: h2 began once h1's run had ended
    h1, h2 = state["hosts"]["h1"], state["hosts"]["h2"]
    assert h1["machine"] == h2["machine"]
    assert p.stdout.strip().splitlines()[-1] == f"fleet {state['id']}: 2 of 2 hosts complete"


def test_a_host_whose_sshd_stops_mid_run_then_resume(image: object, base: Path,
                                                     pg_store_url: str) -> None:
    """h1's sshd dies while its run measures: h1 is reported unreachable with ssh's reason,
    h2 still runs and completes, exit 1. The run on h1 goes on without the fleet (it was
    started detached), so `fleet run --resume` finds it complete in the store and runs
    nothing again; h2 is not touched. (Hosts of its own: the module's keep their sshd.)"""
    with ssh_hosts(2) as own:
        _sshd_stops_mid_run(own, base, pg_store_url)


def _sshd_stops_mid_run(hosts: list[SshHost], base: Path, pg_store_url: str) -> None:
    results = base / "ctl-stop"
    inventory = _inventory(hosts, base, base / "inventory-stop.ini")
    h1 = hosts[0]
    installed = all((base / h.name / ".itx-installed").is_file() for h in hosts)
    with _watch_leftovers():
        rc, out, err = _fleet_meanwhile(
            [str(_plan(base, "stop", reps=10, mib=3)), "-i", str(inventory)], results, "h1",
            lambda run: _pg_runs(pg_store_url).get(run, ("", 0))[1],
            lambda _: h1.stop_sshd(), pg_store_url)
    assert rc == 1, out + err
    if installed:  # by the first test: the same checkout is not installed again
        assert err.count("isotax is installed already") == 2, err
    state = _state(results)
    s1, s2 = state["hosts"]["h1"], state["hosts"]["h2"]
    assert s1["status"] == "unreachable", s1
    assert f"port {h1.port}: Connection refused" in s1["reason"]
    assert f"h1: unreachable: {s1['reason']}" in out
    assert s2["status"] == "complete"
    runs = _pg_runs(pg_store_url)
    assert runs[s2["run_id"]][0] == "complete"
    assert runs[s1["run_id"]][2]["host"] == "h1"  # a run the fleet lost is still the fleet's
    h2_before = runs[s2["run_id"]]
    assert f"isotax fleet run --resume {state['id']}" in out

    with _watch_leftovers():
        r = _fleet("run", "--resume", state["id"], "--results", str(results),
                   store=pg_store_url)
    print(r.stderr, r.stdout, sep="\n")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"h1: its run {s1['run_id']} completed in the store while the fleet was away" in \
        r.stderr
    assert "h2" not in r.stderr  # nothing done on h2
    after = _state(results)
    assert after["hosts"]["h2"] == s2
    assert after["hosts"]["h1"]["status"] == "complete"
    runs = _pg_runs(pg_store_url)
    assert runs[s2["run_id"]] == h2_before
    assert runs[s1["run_id"]][:2] == ("complete", 20)
    # Its run playbook was cut off before its clean-up, and the host is still out of reach:
    # its run's files stay there, said and marked; once it is back, --resume removes them.
    assert "h1: its run's files there could not be removed" in r.stderr
    assert after["hosts"]["h1"]["leftovers"] is True
    run1 = s1["run_id"]
    assert {f"{run1}.sh", f"{run1}.pid", f"{run1}.toml"} <= \
        set(_remote_files(base, "h1", state["id"]))
    hosts[0].start_sshd()
    with _watch_leftovers():
        r = _fleet("run", "--resume", state["id"], "--results", str(results),
                   store=pg_store_url)
    print(r.stderr, r.stdout, sep="\n")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "h1: its run's files there removed (its log stays)" in r.stderr
    assert _remote_files(base, "h1", state["id"]) == [f"{run1}.log"]
    assert _state(results)["hosts"]["h1"]["leftovers"] is False
    assert r.stdout.strip().splitlines()[-1] == f"fleet {state['id']}: 2 of 2 hosts complete"


def _local_cells(db: Path, run_id: str) -> int:
    if not db.is_file():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(con.execute("SELECT count(*) FROM cells WHERE run_id=?", (run_id,))
                   .fetchone()[0])
    except sqlite3.Error:
        return 0
    finally:
        con.close()


def _interrupt_run(run_id: str) -> None:
    """SIGINT to the isotax run measuring run_id (found by its ledger, host.owners)."""
    from isotax.host import owners

    (ledger,) = [lg for lg in owners.ledgers() if lg.live and lg.run_id == run_id]
    os.kill(ledger.pid, signal.SIGINT)


def test_a_fleet_into_sqlite_interrupted_on_its_host_then_resumed(
        hosts: list[SshHost], inventory: Path, base: Path) -> None:
    """The default SQLite store: the host's run is exported, fetched and imported. Its run
    interrupted on the host (SIGINT) fails the host with isotax's words, exit 1; --resume
    then resumes that run on the host (`isotax run --resume`), keeping its cells, and imports
    it."""
    results = base / "ctl-lite"
    h2 = hosts[1]
    inv = base / "inventory-h2.ini"
    inv.write_text("\n".join(x for x in inventory.read_text().splitlines()
                             if not x.startswith("h1 ")) + "\n")
    db = base / "h2-results" / "isotax.db"
    with _watch_leftovers():
        t0 = time.monotonic()
        rc, out, err = _fleet_meanwhile(
            # 16 MiB: cells long enough (~1 s each) that the interrupt after the second lands
            # mid-run even on a loaded host (3 MiB ones let the run end first under CI's load).
            [str(_plan(base, "lite", reps=6, mib=16)), "-i", str(inv)], results, "h2",
            lambda run: _local_cells(db, run),
            lambda _: _interrupt_run(_state(results)["hosts"]["h2"]["run_id"]))
        wall = time.monotonic() - t0
    print(f"wall {wall:.1f} s")
    assert rc == 1, out + err
    hs = _state(results)["hosts"]["h2"]
    run_id = hs["run_id"]
    assert hs["status"] == "failed"
    assert hs["reason"].startswith("its isotax run was interrupted (exit 130), run "
                                   "interrupted"), hs
    kept = _local_cells(db, run_id)
    assert 2 <= kept < 12
    assert not (results / "isotax.db").exists() or run_id not in \
        subprocess.run([*ISOTAX, "runs", "--results", str(results)], capture_output=True,
                       text=True, timeout=60).stdout

    with _watch_leftovers():
        t0 = time.monotonic()
        r = _fleet("run", "--resume", _state(results)["id"], "--results", str(results),
                   "--poll", POLL)
        wall = time.monotonic() - t0
    print(r.stderr, r.stdout, f"wall {wall:.1f} s", sep="\n")
    assert r.returncode == 0, r.stdout + r.stderr
    log = (base / "h2-results" / "fleets" / _state(results)["id"] / f"{run_id}.log").read_text()
    assert f"{12 - kept} cells to run ({kept} already committed)" in log
    from isotax.store.sqlite import SQLiteStore

    store = SQLiteStore(results / "isotax.db")
    try:
        run = store.get_run(run_id)
        assert run.status == "complete"
        assert len(store.cells(run_id)) == 12
        assert len(store.telemetry(run_id)) == 12
        assert store.run_meta(run_id)["fleet"] == {
            "id": _state(results)["id"], "host": "h2", "address": h2.address,
            "machine": _state(results)["hosts"]["h2"]["machine"]}
    finally:
        store.close()
    assert _state(results)["hosts"]["h2"]["status"] == "complete"
    assert _remote_files(base, "h2", _state(results)["id"]) == [f"{run_id}.log"]


def test_a_plan_the_hosts_refuse(hosts: list[SshHost], inventory: Path, base: Path,
                                 pg_store_url: str) -> None:
    """A plan no host can run (more memory than they have): each host fails with isotax's own
    one line from the host, exit 1, and nothing is in the store."""
    plan = _plan(base, "huge")
    plan.write_text(plan.read_text().replace('kind = "runc"\n',
                                             'kind = "runc"\nmemory_mib = 99999999\n'))
    results = base / "ctl-huge"
    p = _run(plan, inventory, results, pg_store_url, 1)
    for h in hosts:
        hs = _state(results)["hosts"][h.name]
        assert hs["status"] == "failed"
        assert hs["reason"].startswith("isotax run exited 2: isotax: "), hs
        assert "is more than this host's memory" in hs["reason"]
        assert hs["reason"].endswith("; its run is not in the store")
        assert f"{h.name}: failed: {hs['reason']}" in p.stdout
    assert _pg_runs(pg_store_url) == {}
    # the advice from here: a new fleet with the plan changed (--resume runs the stored plan)
    assert "h1 and h2 refused the plan: change it as their lines say and start a new fleet" \
        in p.stdout.strip().splitlines()[-1]


def test_a_parity_refusal_then_its_advice_followed(hosts: list[SshHost], inventory: Path,
                                                   base: Path, pg_store_url: str) -> None:
    """A plan whose runc gets fewer CPUs than native, with parity's default (refuse): each
    host's line on the fleet's terminal names the difference itself (not "listed above" in a
    log the terminal does not show), and the last line says that a changed plan needs a new
    fleet, with the command. Followed to the end: the plan with parity = "flag", a new fleet,
    complete; its report says the two hosts are one machine and repeats what each run
    flagged."""
    plan = _plan(base, "unequal")
    text = plan.read_text().replace('network = "none"\n', 'network = "none"\nvcpus = 1\n')
    plan.write_text(text)
    results = base / "ctl-unequal"
    p = _run(plan, inventory, results, pg_store_url, 1)
    state = _state(results)
    for h in hosts:
        hs = state["hosts"][h.name]
        assert hs["status"] == "failed" and hs["refused"] is True, hs
        assert "runc may run on 1 CPU(s), native on 2" in hs["reason"], hs
        assert "listed above" not in hs["reason"]
        assert f"{h.name}: failed: {hs['reason']}" in p.stdout
    last = p.stdout.strip().splitlines()[-1]
    assert "h1 and h2 refused the plan: change it as their lines say and start a new fleet " \
           f"(isotax fleet run PLAN --inventory {inventory} --results {results})" in last
    assert "--resume" not in last.split("refused the plan")[0]

    plan.write_text('parity = "flag"\n' + text)  # what the lines say: or parity = "flag"
    _run(plan, inventory, results, pg_store_url, 0)
    new = next(f for f in (results / "fleets").glob("fleet-*.json") if f.stem != state["id"])
    r = _fleet("report", new.stem, "--results", str(results), store=pg_store_url)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "h1 and h2 are the same machine" in r.stdout
    assert "h1 flagged: unequal resources: runc may run on 1 CPU(s), native on 2" in \
        r.stdout + r.stderr
    md = (results / "fleets" / new.stem / "fleet.md").read_text()
    assert "h1 and h2 are the same machine (one machine-id, same boot)" in md
    assert "| h2 | unequal resources: runc may run on 1 CPU(s), native on 2" in md


def test_a_changed_host_refuses_the_resume_until_forced(hosts: list[SshHost], inventory: Path,
                                                         base: Path, pg_store_url: str) -> None:
    """A host's interrupted run whose host changed since (its stored fingerprint says THP
    was otherwise): `fleet run --resume` fails that host with isotax's own advice, the last
    line adds "with --force", and `fleet run --resume FLEET --force` completes it."""
    import psycopg

    from isotax.host.facts.fingerprint import fingerprint

    inv = _h1_only(inventory, base / "inventory-h1-force.ini")
    results = base / "ctl-force"
    _run(_plan(base, "force"), inv, results, pg_store_url, 0)
    state = _state(results)
    run_id = state["hosts"]["h1"]["run_id"]
    # The host as it was when the run started: THP otherwise than now; the run interrupted.
    thp = "never" if fingerprint().get("thp_enabled") != "never" else "always"
    with psycopg.connect(pg_store_url, autocommit=True) as con:
        (host_json,) = con.execute("SELECT host_json FROM runs WHERE id=%s", (run_id,)
                                   ).fetchone()
        con.execute("UPDATE runs SET host_json=%s, status='interrupted', finished=NULL "
                    "WHERE id=%s", (json.dumps({**json.loads(host_json), "thp_enabled": thp}),
                                    run_id))
    path = results / "fleets" / f"{state['id']}.json"
    doc = json.loads(path.read_text())
    doc["hosts"]["h1"].update(status="failed", reason="interrupted")
    path.write_text(json.dumps(doc))

    with _watch_leftovers():
        r = _fleet("run", "--resume", state["id"], "--results", str(results), "--poll", POLL,
                   store=pg_store_url)
    print(r.stderr, r.stdout, sep="\n")
    assert r.returncode == 1, r.stdout + r.stderr
    hs = _state(results)["hosts"]["h1"]
    assert hs["status"] == "failed" and hs["refused"] is False
    assert "THP enabled" in hs["reason"] and "--force" in hs["reason"]
    last = r.stdout.strip().splitlines()[-1]
    assert f"run the others again: isotax fleet run --resume {state['id']} --results " \
           f"{results} (with --force" in last
    with _watch_leftovers():
        r = _fleet("run", "--resume", state["id"], "--results", str(results), "--poll", POLL,
                   "--force", store=pg_store_url)
    print(r.stderr, r.stdout, sep="\n")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _state(results)["hosts"]["h1"]["status"] == "complete"
    assert _pg_runs(pg_store_url)[run_id][0] == "complete"


def test_ctrl_c_leaves_the_run_going_and_resume_follows_it(
        hosts: list[SshHost], inventory: Path, base: Path, pg_store_url: str) -> None:
    """Ctrl-C at the controller stops Ansible and removes what the fleet made here (exit
    130); the run started on the host goes on, and --resume follows it to its end."""
    results = base / "ctl-ctrl-c"
    inv = _h1_only(inventory, base / "inventory-h1.ini")
    with _watch_leftovers():
        rc, out, err = _fleet_meanwhile(
            [str(_plan(base, "intr", reps=8, mib=3)), "-i", str(inv)], results, "h1",
            lambda run: _pg_runs(pg_store_url).get(run, ("", 0))[1],
            lambda fleet: fleet.send_signal(signal.SIGINT), pg_store_url)
    assert rc == 130, out + err
    run_id = _state(results)["hosts"]["h1"]["run_id"]
    assert "interrupted: stopping Ansible" in err
    hs = _state(results)["hosts"]["h1"]
    assert hs["status"] == "running" and hs["reason"].startswith("the fleet was interrupted")
    with _watch_leftovers():
        r = _fleet("run", "--resume", _state(results)["id"], "--results", str(results),
                   "--poll", POLL, store=pg_store_url)
    print(r.stderr, r.stdout, sep="\n")
    assert r.returncode == 0, r.stdout + r.stderr
    assert _state(results)["hosts"]["h1"]["status"] == "complete"
    runs = _pg_runs(pg_store_url)
    assert list(runs) == [run_id] and runs[run_id][:2] == ("complete", 16)


def test_refusals_exit_2(hosts: list[SshHost], inventory: Path, base: Path) -> None:
    """A missing inventory, and one that names one host twice: one line, exit 2."""
    plan = _plan(base, "refused")
    p = _fleet("run", str(plan), "-i", str(base / "nowhere.ini"), "--results",
               str(base / "ctl-refused"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "nowhere.ini does not exist" in p.stderr
    twice = base / "twice.ini"
    line = next(x for x in inventory.read_text().splitlines() if x.startswith("h1 "))
    twice.write_text(f"[isotax]\n{line}\n{line.replace('h1 ', 'again ', 1)}\n")
    p = _fleet("run", str(plan), "-i", str(twice), "--results", str(base / "ctl-refused"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "lists the same host twice: h1 and again" in p.stderr
    assert not (base / "ctl-refused").exists()  # nothing was started or written

