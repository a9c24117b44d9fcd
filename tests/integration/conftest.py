"""Fixtures of the integration room: the workload image, the load generator, a private
PostgreSQL server, and what was left on the host before the suite (the leak check, run last,
compares against it)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import NamespaceLoadGen


@pytest.fixture(scope="session", autouse=True)
def _leaks_before_suite() -> Iterator[list[str]]:
    """What was already there before the suite (from an earlier crash) is reported separately.
    The session holds an owner's ledger (host.owners) from the start: the runs its tests start
    in subprocesses then never take what the session's own fixtures hold for a dead run's."""
    from isotax.host import owners
    from isotax.run.leaks import find_leaks

    if os.geteuid() == 0:
        owners.claim()

    yield find_leaks() if os.geteuid() == 0 else []


@pytest.fixture(scope="session", autouse=True)
def _traces_before_suite() -> tuple[set[str], set[str]]:
    """The isotax-named temporary files and the processes naming an isotax owner that were
    there before the suite (support.temp_entries, support.owned_processes: read from /proc and
    the folders, not asked of isotax)."""
    from support import owned_processes, temp_entries

    return temp_entries(), set(owned_processes())


@pytest.fixture(scope="session")
def image() -> ImageArtifacts:
    """The workload image, built once for the suite (a no-op when cached). Skips only where
    this machine cannot build it; any other build failure fails the tests that need it."""
    if os.geteuid() != 0:
        pytest.skip("building and using the workload image needs root (debootstrap, chroot)")
    for tool, package in (("debootstrap", "debootstrap"), ("gcc", "gcc libc6-dev"),
                          ("mkfs.ext4", "e2fsprogs")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install {package}; "
                        "scripts/setup.sh installs it)")
    from isotax import protocols
    from isotax.image.build import ensure_image

    return ensure_image(protocols.image_recipe(), log=print)


@pytest.fixture(scope="module")
def loadgen(image: ImageArtifacts) -> Iterator[NamespaceLoadGen]:
    """The load generator (its namespace and veth) for one module's network tests; removed
    after the module, and nothing of it may be left."""
    from isotax.loadgen.local import open_loadgen
    from isotax.run.leaks import find_leaks

    with open_loadgen() as lg:
        tag = lg.netns
        yield lg
    assert [x for x in find_leaks() if tag in x] == []


# A private PostgreSQL server: its own cluster in /tmp/isotax-pg-XXXX (initdb as the
# `postgres` user, trust authentication for the superuser `itx`), listening only on a Unix
# socket in that directory (no TCP: it can clash with no system cluster on 5432, nor with
# another run of the suite). The socket's name carries the port number, which is PG_PORT, not
# 5432. Not named itx-: the suite's own server still runs when its last leak check does, which
# takes /tmp/itx-* for what a run left.
PG_PORT = 54329
PG_DIR_PREFIX = "isotax-pg-"


def _pg_bin() -> Path | None:
    """The bin directory of the newest PostgreSQL Debian's packages installed, or None."""
    found = sorted((Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")),
                   key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0)
    return found[-1] if found else None


def _pg_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "a private PostgreSQL server needs root (initdb runs as the postgres user)"
    if _pg_bin() is None:
        return ("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): "
                "apt-get install postgresql (scripts/setup.sh installs it)")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user: apt-get install postgresql (scripts/setup.sh installs it)"
    return None


def _pg_env() -> dict[str, str]:
    """The environment of PostgreSQL's tools: no PG* variable of the caller's, the C locale."""
    # Not ISOTAX_OWNER either: the suite's own server is no isotax process (the suite's last
    # leak check, which runs while the session's server still does, would take it for one).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PG") and k != "ISOTAX_OWNER"}
    env.update(LC_ALL="C", LANG="C")
    return env


@contextlib.contextmanager
def private_postgres(db: str = "itx_test") -> Iterator[str]:
    """Start a private PostgreSQL server with the empty database `db`, yield its libpq URL
    (postgresql://itx@/DB?host=DIR&port=PG_PORT), then stop it and remove its directory:
    on a failure too, so nothing of it is left."""
    reason = _pg_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    pg_bin = _pg_bin()
    assert pg_bin is not None
    pg = pwd.getpwnam("postgres")
    base = Path(tempfile.mkdtemp(prefix=PG_DIR_PREFIX, dir="/tmp"))
    data, log = base / "data", base / "log"
    env = _pg_env()

    def as_postgres(*argv: str) -> subprocess.CompletedProcess[str]:
        # cwd: the postgres user may not be able to enter the caller's directory.
        return subprocess.run(["runuser", "-u", "postgres", "--", *argv], cwd=base, env=env,
                              capture_output=True, text=True, timeout=120)

    def check(r: subprocess.CompletedProcess[str], what: str) -> None:
        if r.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{what} failed ({r.returncode}): {r.stdout}{r.stderr}{tail}")

    started, pid = False, None
    try:
        os.chown(base, pg.pw_uid, pg.pw_gid)
        base.chmod(0o700)
        check(as_postgres(str(pg_bin / "initdb"), "-D", str(data), "-U", "itx",
                          "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"), "initdb")
        r = as_postgres(str(pg_bin / "pg_ctl"), "-D", str(data), "-l", str(log), "-w",
                        "-t", "60", "-o", f"-k {base} -p {PG_PORT} -c listen_addresses=''",
                        "start")
        # a failed start (pg_ctl's timeout) may still have left a postmaster: stopped below
        started, pid = True, _pg_pid(data)
        check(r, "pg_ctl start")
        r = subprocess.run([str(pg_bin / "createdb"), "-h", str(base), "-p", str(PG_PORT),
                            "-U", "itx", db], env=env, capture_output=True, text=True,
                           timeout=60)
        check(r, f"createdb {db}")
        yield f"postgresql://itx@/{db}?host={base}&port={PG_PORT}"
    finally:
        try:
            if started:
                _pg_stop(as_postgres, pg_bin, data, pid)
        finally:
            shutil.rmtree(base, ignore_errors=True)


def _pg_pid(data: Path) -> int | None:
    """The postmaster's PID from DATA/postmaster.pid (written before pg_ctl -w returns)."""
    try:
        return int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _pg_running(pid: int, data: Path) -> bool:
    """Our postmaster runs: the process is there, not a zombie waiting for init to reap it
    (pg_ctl's exit reparents the postmaster to init), and its command line names `data` (not
    another process that got the PID since)."""
    try:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
        return str(data).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False


def _pg_stop(as_postgres: Callable[..., subprocess.CompletedProcess[str]], pg_bin: Path,
             data: Path, pid: int | None) -> None:
    """pg_ctl stop -m fast; if the postmaster `pid` (ours, read when it started) outlives it,
    SIGQUIT (immediate shutdown, its children go with it), then SIGKILL."""
    as_postgres(str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "30", "stop")
    if pid is None:
        return
    for sig, wait in ((signal.SIGQUIT, 10.0), (signal.SIGKILL, 10.0)):
        if not _pg_running(pid, data):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _pg_running(pid, data):
            time.sleep(0.05)


@pytest.fixture(scope="session")
def private_postgres_cm() -> Callable[..., contextlib.AbstractContextManager[str]]:
    """private_postgres itself, for a test that starts a server of its own."""
    return private_postgres


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The libpq URL of the suite's private PostgreSQL server (its database itx_test), started
    once for the session and stopped after it. Skips only without root or PostgreSQL."""
    with private_postgres() as url:
        yield url


@pytest.fixture
def pg_store_url(postgres_url: str) -> Iterator[str]:
    """A fresh, empty database itx_t_<random> on the session's server for one test (a store
    contract test), dropped after it even where the test left connections open."""
    import psycopg

    name = f"itx_t_{secrets.token_hex(6)}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_url.replace("/itx_test?", f"/{name}?", 1)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
