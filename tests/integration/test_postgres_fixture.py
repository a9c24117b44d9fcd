"""The private PostgreSQL server of the integration room (conftest.private_postgres): psycopg
connects through its URL, each test gets a fresh empty database, and a start/stop cycle leaves
no process and no directory of it behind."""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg


def test_postgres_url_connects(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
        assert conn.execute("select current_database()").fetchone() == ("itx_test",)
        # Unix socket only: no TCP listener, so no clash with a system cluster on 5432.
        assert conn.execute("show listen_addresses").fetchone() == ("",)
        assert conn.execute("show port").fetchone() != ("5432",)


def test_pg_store_url_is_a_fresh_empty_database(pg_store_url: str, postgres_url: str) -> None:
    name = urlsplit(pg_store_url).path.lstrip("/")
    assert name.startswith("itx_t_")
    with psycopg.connect(pg_store_url) as conn:
        tables = conn.execute("select count(*) from information_schema.tables"
                              " where table_schema = 'public'").fetchone()
        assert tables == (0,)
        conn.execute("create table t (x int)")
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("select 1 from pg_database where datname = %s",
                            (name,)).fetchone() == (1,)


def _running(pid: int) -> bool:
    """The process runs (a zombie, dead and waiting for its reaper, does not: the postmaster
    is reparented to init when pg_ctl exits, and init may reap it a moment later)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _postmaster_pid(sockdir: str) -> int:
    return int((Path(sockdir) / "data" / "postmaster.pid").read_text().split()[0])


def test_start_stop_cycle_leaves_nothing(
        private_postgres_cm: Callable[..., contextlib.AbstractContextManager[str]]) -> None:
    with private_postgres_cm("itx_cycle") as url:
        sockdir = parse_qs(urlsplit(url).query)["host"][0]
        assert sockdir.startswith("/tmp/isotax-pg-") and os.path.isdir(sockdir)
        pid = _postmaster_pid(sockdir)
        with psycopg.connect(url) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
            # the postmaster and its children (backends, checkpointer, ...) are ours
            children = {int(p) for p in conn.execute(
                "select pid from pg_stat_activity").fetchall() for p in p}
    assert not _running(pid), f"postmaster {pid} still runs"
    # a PID reused since by an unrelated process would run no postgres
    alive = [p for p in children if _running(p) and b"postgres" in _cmdline(p)]
    assert alive == [], f"server processes left: {alive}"
    assert not os.path.exists(sockdir)
    # its own directory only: another run of the suite may have its server there meanwhile
    assert sockdir not in glob.glob("/tmp/isotax-pg-*")
