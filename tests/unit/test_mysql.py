"""mysql: MariaDB's and sysbench's command lines as golden strings, sysbench's histogram, and
the leak check's view of a leftover server."""

from __future__ import annotations

import pytest
from support import DATA

from isotax import protocols
from isotax.parsers import distributions
from isotax.parsers.sysbench import parse_sysbench
from isotax.run.leaks import is_our_server
from isotax.telemetry.counters import CpuTimes
from isotax.workloads.base import SERVER_SECRET
from isotax.workloads.mysql import (
    MYSQL_PORT,
    Mysql,
    golden_dir,
    run_dir,
    server_argv,
    sysbench_argv,
)

PARAMS = {"threads": 1, "seconds": 2, "tables": 2, "table_size": 2000, "buffer_pool_mib": 64,
          "flush_log_at_trx_commit": 1, "max_error_pct": 5.0}


def test_server_argv() -> None:
    argv = server_argv("/d/run", {**PARAMS, "threads": 200}, "10.213.9.1", "/d/init.sql")
    assert " ".join(argv) == (
        "mariadbd --no-defaults --user=root --datadir=/d/run/data --socket=/d/run/mysqld.sock "
        "--pid-file=/d/run/mysqld.pid --log-error=/d/run/mysqld.err --port=43306 "
        "--bind-address=10.213.9.1 --skip-name-resolve --innodb-buffer-pool-size=64M "
        "--innodb-buffer-pool-load-at-startup=OFF --innodb-buffer-pool-dump-at-shutdown=OFF "
        "--innodb-flush-log-at-trx-commit=1 --max-connections=220 --init-file=/d/init.sql")


def test_sysbench_argv() -> None:
    run = " ".join(sysbench_argv("10.213.9.1", 43306, PARAMS, "run", 8))
    assert run == (
        "sysbench oltp_read_write --db-driver=mysql --mysql-host=10.213.9.1 "
        f"--mysql-port=43306 --mysql-user=sbtest --mysql-password={SERVER_SECRET} "
        "--mysql-db=sbtest "
        "--tables=2 --table-size=2000 --threads=8 --time=2 --percentile=99 --histogram=on "
        "--forced-shutdown=60 run")
    assert sysbench_argv("h", 1, PARAMS, "prepare", 2)[-2:] == ["--threads=2", "prepare"]


def test_paths_and_params() -> None:
    assert golden_dir("/mnt", 4, 100000) == "/mnt/itx-mysql-golden-4x100000"
    assert run_dir("/mnt") == "/mnt/itx-mysql-run"
    specs = {p.name: p for p in Mysql.params}
    assert specs["threads"].problem(0) is not None
    assert specs["flush_log_at_trx_commit"].problem(3) is not None
    assert specs["buffer_pool_mib"].problem(8) is not None
    assert specs["max_error_pct"].problem(0.5) is None
    assert Mysql.needs_loadgen and "mysql" in protocols.workloads()


def test_latency_cdf_from_sysbench_histogram() -> None:
    """The p95 sample carries the whole latency histogram of a real run as a CDF in µs, whose
    p99 is sysbench's own p99 (both read the same buckets)."""
    r = parse_sysbench((DATA / "sysbench" / "native-t8-hist.txt")
                       .read_text())
    samples = {s.metric: s for s in Mysql._samples(r, CpuTimes(1, 1, 0, 0, 2, 0),
                                                     {**PARAMS, "threads": 8}, {})}
    cdf = samples["latency_p95_ms"].labels["latency_cdf_us"]
    assert distributions.valid(cdf) and len(cdf) <= 80 and cdf[-1][1] == 1.0
    assert distributions.quantile(cdf, 0.99) == pytest.approx(
        1000 * samples["latency_p99_ms"].value, rel=1e-3)
    assert "latency_cdf_us" not in samples["latency_p99_ms"].labels


def test_a_leftover_server_is_found() -> None:
    """The leak check knows a native mariadbd on isotax's port, and only that one."""
    assert is_our_server(server_argv("/x", PARAMS, "127.0.0.1"))
    assert not is_our_server(["mariadbd", "--port=3306"])
    assert not is_our_server(["/usr/sbin/mysqld", f"--port={MYSQL_PORT}"])
