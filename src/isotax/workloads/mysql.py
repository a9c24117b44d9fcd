"""mysql: MariaDB in the environment, sysbench oltp_read_write from the load generator.

The studies' MySQL test: sysbench OLTP against a database whose buffer pool caches the working
set, swept over client threads until throughput saturates; transactions/s and latency per
point, plotted against the host's CPU utilisation. Here:

- the server: Debian's MariaDB (`mariadbd`, the same package version natively and in the
  image) on MYSQL_PORT, its data directory on `Instance.data_dir`, the plan's storage path
  (a host directory natively, a volume or the overlay rootfs in a container, a virtio disk in
  the VM). Durable by default (`innodb_flush_log_at_trx_commit=1`: an fsync per commit, the
  storage path is part of what is measured); binary log off, as MariaDB's own default.
- the dataset: `prepare()` builds it once per instance and dataset size, in the environment
  itself: `mariadb-install-db`, a first start that creates the `sbtest` user (reachable over
  TCP from anywhere: the load generator's address differs per environment), `sysbench
  prepare` from the load generator, then a clean shutdown. That "golden" directory stays on
  the data path until the instance goes. Each run copies it to a fresh directory, starts a
  fresh server on the copy, and removes both afterwards. Why a copy per run and not one
  server for all: oltp_read_write writes (updates, delete + insert), so a reused dataset
  would give later repetitions a different B-tree, undo history and redo position than the
  first, and a server that misbehaved in one run could carry into the next. Why not
  install + load per run: under TCG emulation that takes minutes per cell, for a result that
  is byte-for-byte the same as copying the golden directory.
- warm: the copy is started with the buffer pool dump/load off (no asynchronous load racing
  the measurement), then `sysbench prewarm` reads every table through its primary and
  secondary index, so the measured run starts with the whole dataset in the buffer pool.
  prepare() refuses a dataset that does not fit the buffer pool (`buffer_pool_mib`).
- the client: sysbench 1.0.20 `oltp_read_write` in the load generator (the host's package),
  `--threads` from the plan (sweep it), `--time=seconds`, `--percentile=99 --histogram`: p99
  is sysbench's own, p95 is read off the same histogram by sysbench's rule
  (isotax.parsers.sysbench).
- CPU: host-wide /proc/stat around the client (telemetry.read_cpu_times): the utilisation of
  all host CPUs during the point, the CPU-seconds, and CPU-ms per transaction; it includes
  the client's share (the same for every environment) and what an environment hides (QEMU's
  emulation, NAT, the bridge).

Samples per point: transactions_per_s, queries_per_s, latency_mean/p95/p99_ms,
host_cpu_utilization (% of all host CPUs over the client's run), host_cpu_s and
host_cpu_ms_per_tx; ignored errors, errors/s and reconnects are labels (mostly zero: a ratio to
a zero baseline means nothing), with the transactions, the copy time and the network path.

Sanity: a server that does not answer before or after the run (or lost rows: the table count
must stay `tables * table_size`, delete + insert keep it), a FATAL from sysbench, reconnects,
ignored errors (deadlocks) above `max_error_pct` of the transactions, or no transaction at
all fails the point. The server is stopped and its data removed in every case.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import ClassVar

from isotax.model import Sample, SanityError
from isotax.parsers import distributions
from isotax.parsers.sysbench import SysbenchResult, parse_sysbench, parse_sysbench_version
from isotax.protocols import (
    Completed,
    CpuCurve,
    FigureHints,
    Instance,
    LatencyPanel,
    LoadGen,
    Need,
    Needs,
    Params,
    ParamSpec,
    Port,
)
from isotax.telemetry.counters import CpuTimes, read_cpu_times
from isotax.workloads.base import (
    SERVER_SECRET,
    BaseWorkload,
    client_tool_version,
    need_loadgen,
    put_text,
    register,
)
from isotax.workloads.servers import serving
from isotax.workloads.work import first

# An unusual port (the Debian service uses 3306), in the range of isotax's other servers.
SERVER = "mariadbd"
PORT = Port(43306, server=SERVER)
MYSQL_PORT = PORT.number
# The password: this run's secret (base.SERVER_SECRET), set again at every server start
# (an init file), so that a dataset prepared by an earlier process takes this run's.
DB, USER, PASSWORD = "sbtest", "sbtest", SERVER_SECRET
# Under TCG emulation the first start of a fresh data directory (InnoDB creating its redo log
# and system tablespace) takes tens of seconds; natively well under one.
START_TIMEOUT_S = 300
# What a directory of the runs must not exceed: a unix socket path has 108 bytes (sun_path).
MAX_SOCKET_PATH = 100


def golden_dir(data_dir: str, tables: int, table_size: int) -> str:
    """The prepared dataset for one size, kept on the data path for the instance's life."""
    return f"{data_dir}/itx-mysql-golden-{tables}x{table_size}"


def run_dir(data_dir: str) -> str:
    """A run's own copy of the dataset (plus socket, pid file and error log); removed after."""
    return f"{data_dir}/itx-mysql-run"


def server_argv(root: str, params: Params, listen: str, init_file: str | None = None
                ) -> list[str]:
    """mariadbd on the data directory root/data, everything else of its own in root,
    listening at `listen` only (where the load generator arrives). Pure."""
    argv = [
        SERVER, "--no-defaults", "--user=root", f"--datadir={root}/data",
        f"--socket={root}/mysqld.sock", f"--pid-file={root}/mysqld.pid",
        f"--log-error={root}/mysqld.err", f"--port={MYSQL_PORT}", f"--bind-address={listen}",
        # No DNS in the environments' namespaces: a lookup per connection would stall.
        "--skip-name-resolve",
        f"--innodb-buffer-pool-size={int(params['buffer_pool_mib'])}M",
        # Warm-up is explicit (sysbench prewarm), never a background load during the run.
        "--innodb-buffer-pool-load-at-startup=OFF", "--innodb-buffer-pool-dump-at-shutdown=OFF",
        f"--innodb-flush-log-at-trx-commit={int(params['flush_log_at_trx_commit'])}",
        f"--max-connections={max(151, int(params.get('threads', 1)) + 20)}",
    ]
    if init_file:
        argv.append(f"--init-file={init_file}")
    return argv


def sysbench_argv(host: str, port: int, params: Params, command: str,
                  threads: int) -> list[str]:
    """The sysbench oltp_read_write command line for prepare, prewarm or run. Pure."""
    argv = ["sysbench", "oltp_read_write", "--db-driver=mysql", f"--mysql-host={host}",
            f"--mysql-port={port}", f"--mysql-user={USER}", f"--mysql-password={PASSWORD}",
            f"--mysql-db={DB}", f"--tables={int(params['tables'])}",
            f"--table-size={int(params['table_size'])}", f"--threads={threads}"]
    if command == "run":
        seconds = int(params["seconds"])
        # p99 from sysbench, p95 from its histogram; a server that hangs ends the run a
        # minute after its time with a FATAL rather than never.
        argv += [f"--time={seconds}", "--percentile=99", "--histogram=on",
                 "--forced-shutdown=60"]
    return [*argv, command]


def _sh(inst: Instance, script: str, *args: str, timeout: float = 120) -> Completed:
    return inst.exec(["sh", "-c", script, "sh", *args], timeout)


def _log_tail(inst: Instance, root: str) -> str:
    """The server's last error-log lines that say something went wrong, for a failure."""
    done = _sh(inst, 'grep -E "\\[(ERROR|Warning)\\]" "$1" 2>/dev/null | tail -n 3',
               f"{root}/mysqld.err", timeout=30)
    lines = [ln.split("] ", 1)[-1] for ln in done.stdout.strip().splitlines()]
    return f" (server log: {' | '.join(lines)[:300]})" if lines else ""


@contextmanager
def _server(inst: Instance, root: str, params: Params, listen: str,
            init_file: str | None = None) -> Iterator[int]:
    """mariadbd on root/data for the block; stopped by PID afterwards (TERM, then KILL). Its
    first statements (an init file in root, unless one is given) set the user's password to
    this run's."""
    if init_file is None:
        init_file = f"{root}/itx-password.sql"
        put_text(inst, init_file, f"ALTER USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}';\n")
    try:
        with serving(inst, server_argv(root, params, listen, init_file), MYSQL_PORT, "tcp",
                     program=SERVER, timeout=START_TIMEOUT_S) as pid:
            yield pid
    except SanityError as e:
        if "did not start listening" in str(e) or "could not start" in str(e):
            raise SanityError(f"{e}{_log_tail(inst, root)}") from None
        raise


def _shutdown(inst: Instance, pid: int, root: str, timeout: float = 300) -> None:
    """A clean shutdown (TERM, then wait: InnoDB flushes and checkpoints), checked in its log,
    so that every copy of a golden directory starts without crash recovery."""
    script = (
        'alive() { [ "$(cat /proc/$1/comm 2>/dev/null)" = mariadbd ] && '
        '! grep -q "^State:.*Z" /proc/$1/status 2>/dev/null; }; '
        'alive "$1" || { echo "mariadbd $1 is gone before its shutdown" >&2; exit 1; }; '
        'kill "$1"; end=$(( $(date +%s) + $2 )); '
        'while alive "$1"; do [ "$(date +%s)" -le "$end" ] || '
        '{ echo "mariadbd still runs $2 s after TERM" >&2; exit 1; }; sleep 0.1; done; '
        'grep -q "Shutdown complete" "$3" || { echo "no clean shutdown in $3" >&2; exit 1; }'
    )
    done = _sh(inst, script, str(pid), str(int(timeout)), f"{root}/mysqld.err",
               timeout=timeout + 30)
    if done.returncode != 0:
        raise SanityError(f"preparing the dataset: {done.stderr.strip()[:200]}"
                          f"{_log_tail(inst, root)}")


def _query(lg: LoadGen, host: str, port: int, sql: str, when: str) -> str:
    """One statement through the MariaDB client in the load generator; its output (-N -B)."""
    done = lg.exec(["mariadb", "--no-defaults", f"--host={host}", f"--port={port}",
                    f"--user={USER}", f"--password={PASSWORD}", "--connect-timeout=20",
                    "-N", "-B", f"--database={DB}", "-e", sql], 120)
    if done.returncode != 0:
        raise SanityError(f"mariadbd does not answer {when}: "
                          f"{(done.stderr or done.stdout).strip()[:200]}")
    return done.stdout.strip()


def _rows(lg: LoadGen, host: str, port: int, tables: int, when: str) -> int:
    sql = "SELECT " + " + ".join(f"(SELECT COUNT(*) FROM sbtest{i})"
                                 for i in range(1, tables + 1))
    out = _query(lg, host, port, sql, when)
    try:
        return int(out)
    except ValueError:
        raise SanityError(f"row count {when}: {out[:100]!r}") from None


def _sysbench(lg: LoadGen, argv: Sequence[str], timeout: float, what: str) -> Completed:
    done = lg.exec(argv, timeout)
    if done.returncode == 124:
        raise SanityError(f"sysbench {what} timed out after {timeout:.0f} s")
    return done


def _check_client(done: Completed, what: str) -> None:
    text = done.stdout + "\n" + done.stderr
    if done.returncode != 0 or "FATAL" in text:
        fatal = [ln for ln in text.splitlines() if ln.startswith("FATAL")]
        raise SanityError(f"sysbench {what} failed ({done.returncode}): "
                          f"{(fatal[-1] if fatal else text.strip()[-200:])[:200]}")


@register
class Mysql(BaseWorkload):
    name: ClassVar[str] = "mysql"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ("MariaDB in the environment (data on the storage path), "
                                  "sysbench oltp_read_write from the load generator; tx/s, "
                                  "latency and host CPU per thread count")
    params: ClassVar[Sequence[ParamSpec]] = (
        ParamSpec("threads", int, 4, "sysbench client threads (connections); sweep it",
                  minimum=1),
        ParamSpec("seconds", int, 10, "length of the measured run", minimum=1),
        ParamSpec("tables", int, 4, "sysbench tables", minimum=1),
        ParamSpec("table_size", int, 100000, "rows per table", minimum=10),
        ParamSpec("buffer_pool_mib", int, 256, "InnoDB buffer pool; must hold the dataset",
                  minimum=16),
        ParamSpec("flush_log_at_trx_commit", int, 1, "1: fsync the redo log per commit "
                  "(durable); 2: write per commit, fsync once a second; 0: neither",
                  choices=(0, 1, 2)),
        # Deadlocks are part of OLTP under contention (sysbench retries the transaction, and
        # only completed ones count); many of them mean the point measured lock conflicts.
        ParamSpec("max_error_pct", float, 5.0, "ignored errors (deadlocks, lock wait "
                  "timeouts) allowed, in % of transactions, before the point fails",
                  minimum=0),
    )
    tools: ClassVar[Mapping[str, Sequence[str]]] = {
        "mariadbd": (SERVER, "--version"),
        "sysbench": ("sysbench", "--version"),
    }
    needs_loadgen: ClassVar[bool] = True
    client_packages: ClassVar[Sequence[str]] = ("sysbench", "mariadb-client")
    ports: ClassVar[Mapping[str, Port]] = {"mysql": PORT}
    # sysbench drives it from the load generator on the host; in the image for the version
    # record and for runs without a load generator.
    packages: ClassVar[Sequence[str]] = ("mariadb-server", "sysbench")
    figures: ClassVar[FigureHints] = FigureHints(
        concurrency=("threads",),
        latency_panels=(LatencyPanel("OLTP read/write", "transactions_per_s",
                                     ("latency_mean_ms", "latency_p95_ms")),),
        cpu_curve=CpuCurve("transactions_per_s", "transactions/s", "host_cpu_utilization",
                           "threads", title="MySQL", client="sysbench"))

    def in_flight(self, params: Params) -> int:
        """Each sysbench thread waits for its transaction's answer before the next."""
        return int(params["threads"])

    def host_needs(self, params: Params) -> Needs:
        """The buffer pool mariadbd is given, and a connection per sysbench thread (a socket
        in sysbench and in mariadbd)."""
        return Needs(
            memory=Need(int(params["buffer_pool_mib"]) * 2**20, ("buffer_pool_mib",),
                        "the InnoDB buffer pool"),
            open_files=Need(int(params["threads"]), ("threads",), "a connection per thread"))

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str] | None:
        """sysbench's transactions."""
        s = first(samples, "transactions_per_s")
        return (float(s.labels["transactions"]), "transaction") \
            if s and "transactions" in s.labels else None

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        lg = need_loadgen(loadgen)
        for tool in (SERVER, "mariadb-install-db"):
            done = _sh(inst, 'command -v "$1" >/dev/null', tool, timeout=60)
            if done.returncode != 0:
                raise SanityError(f"{tool} is not in the environment (install mariadb-server "
                                  "on the host: scripts/setup.sh; rebuild the image: isotax "
                                  "image build)")
        tables, rows = int(params["tables"]), int(params["table_size"])
        golden = golden_dir(inst.data_dir, tables, rows)
        if len(f"{run_dir(inst.data_dir)}/mysqld.sock") > MAX_SOCKET_PATH:
            raise SanityError(f"the data directory {inst.data_dir} is too deep for mariadbd's "
                              "socket path; use a shorter work directory")
        ready = _sh(inst, 'cat "$1/itx-ready" 2>/dev/null', golden, timeout=30).stdout.strip()
        if not ready:
            ready = self._build(inst, lg, params, golden)
        pool = int(params["buffer_pool_mib"]) * 2**20
        if not ready.isdigit():
            raise SanityError(f"{golden}/itx-ready holds {ready[:50]!r}, not a size: remove "
                              f"{golden} and run again")
        size = int(ready)
        # InnoDB keeps part of the pool for itself (adaptive hash, locks, change buffer).
        if size > 0.8 * pool:
            raise SanityError(f"the dataset ({size / 2**20:.0f} MiB) does not fit 80% of the "
                              f"buffer pool ({pool / 2**20:.0f} MiB): raise buffer_pool_mib or "
                              "lower tables / table_size")

    def _build(self, inst: Instance, lg: LoadGen, params: Params, golden: str) -> str:
        """Install, load and cleanly stop the golden dataset; returns its size in bytes."""
        tables = int(params["tables"])
        # --force: containers have no /etc/hosts, so the script's check that the host name
        # resolves fails; it only matters for host-name grants, and the one grant is '%'.
        done = _sh(inst, 'rm -rf "$1" && mkdir -p "$1" && mariadb-install-db --no-defaults '
                   '--user=root --datadir="$1/data" --auth-root-authentication-method=normal '
                   '--skip-test-db --force > "$1/install.log" 2>&1 || { grep -v "^$" '
                   '"$1/install.log" | head -n 5 >&2; exit 1; }', golden,
                   timeout=START_TIMEOUT_S)
        if done.returncode != 0:
            raise SanityError(f"mariadb-install-db failed: {done.stderr.strip()[-300:]}")
        put_text(inst, f"{golden}/init.sql",
                 f"CREATE DATABASE IF NOT EXISTS {DB};\n"
                 f"CREATE USER IF NOT EXISTS '{USER}'@'%' IDENTIFIED BY '{PASSWORD}';\n"
                 f"GRANT ALL ON {DB}.* TO '{USER}'@'%';\n")
        host, port = lg.target(inst, MYSQL_PORT, "tcp")
        with _server(inst, golden, params, lg.listen(inst),
                     init_file=f"{golden}/init.sql") as pid:
            _query(lg, host, port, "SELECT 1", "after its first start")
            # sysbench prepare loads tables in parallel, one thread per table at most.
            done = _sysbench(lg, sysbench_argv(host, port, params, "prepare",
                                               min(tables, 4)), 1800, "prepare")
            _check_client(done, "prepare")
            size = _query(lg, host, port, "SELECT SUM(data_length + index_length) FROM "
                          f"information_schema.tables WHERE table_schema = '{DB}'",
                          "after prepare")
            rows = _rows(lg, host, port, tables, "after prepare")
            if rows != tables * int(params["table_size"]):
                raise SanityError(f"sysbench prepare loaded {rows} rows, not "
                                  f"{tables} x {params['table_size']}")
            _shutdown(inst, pid, golden)
        if not size.isdigit():
            raise SanityError(f"dataset size after prepare: {size[:100]!r}")
        put_text(inst, f"{golden}/itx-ready", size)
        return size

    def run(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> list[Sample]:
        lg = need_loadgen(loadgen)
        threads, seconds = int(params["threads"]), int(params["seconds"])
        tables, rows = int(params["tables"]), int(params["table_size"])
        golden, root = golden_dir(inst.data_dir, tables, rows), run_dir(inst.data_dir)
        t0 = time.monotonic()
        done = _sh(inst, '[ -s "$1/itx-ready" ] || { echo "no prepared dataset in $1" >&2; '
                   'exit 1; }; rm -rf "$2" && mkdir -p "$2" && cp -a "$1/data" "$2/data"',
                   golden, root, timeout=600)
        try:
            if done.returncode != 0:
                raise SanityError(f"copying the dataset: {done.stderr.strip()[:200]}")
            copy_s = time.monotonic() - t0
            host, port = lg.target(inst, MYSQL_PORT, "tcp")
            with _server(inst, root, params, lg.listen(inst)):
                _query(lg, host, port, "SELECT 1", "before the run")
                warm = _sysbench(lg, sysbench_argv(host, port, params, "prewarm",
                                                   min(tables, 4)), 1800, "prewarm")
                _check_client(warm, "prewarm")
                before = read_cpu_times()
                done = _sysbench(lg, sysbench_argv(host, port, params, "run", threads),
                                 seconds + 180, "run")
                delta = read_cpu_times() - before
                r = parse_sysbench(done.stdout + "\n" + done.stderr)
                _check_client(done, "run")
                after = _rows(lg, host, port, tables, "after the run (did it die?)")
        finally:
            # The server is stopped (serving) before its data goes.
            _sh(inst, 'rm -rf "$1"', root, timeout=300)
        if after != tables * rows:
            raise SanityError(f"the tables hold {after} rows after the run, not {tables * rows}"
                              " (oltp_read_write's delete + insert keep the count)")
        version = client_tool_version(lg, ("sysbench", "--version"), parse_sysbench_version)
        return self._samples(r, delta, params, {
            "tool": f"sysbench {version} oltp_read_write (client: {lg.where})",
            "path": lg.path(inst), "threads": threads, "seconds": seconds, "tables": tables,
            "table_size": rows, "buffer_pool_mib": int(params["buffer_pool_mib"]),
            "flush_log_at_trx_commit": int(params["flush_log_at_trx_commit"]),
            "data_dir": inst.data_dir, "copy_s": round(copy_s, 2)})

    @staticmethod
    def _samples(r: SysbenchResult, delta: CpuTimes, params: Params,
                 labels: Mapping[str, object]) -> list[Sample]:
        if r.threads != int(params["threads"]):
            raise SanityError(f"sysbench ran {r.threads} threads, asked {params['threads']}")
        if r.reconnects > 0:
            raise SanityError(f"sysbench reconnected {r.reconnects} times: the server dropped "
                              "connections")
        limit = float(params["max_error_pct"])
        if r.ignored_errors > limit / 100 * r.transactions:
            raise SanityError(f"{r.ignored_errors} ignored errors (deadlocks, lock waits) in "
                              f"{r.transactions} transactions, above {limit:g}%: more rows "
                              "(table_size) or fewer threads, or raise max_error_pct")
        window = delta.busy + delta.idle
        if window <= 0 or r.transactions <= 0:
            raise SanityError("no host CPU time passed during the run")
        cpus = os.cpu_count() or 1
        # Errors and reconnects are labels, not samples: mostly zero, and a ratio to a zero
        # baseline means nothing (reconnects are always zero here: any fails the point).
        own = {**labels, "transactions": r.transactions, "queries": r.queries,
               "reads": r.reads, "writes": r.writes, "ignored_errors": r.ignored_errors,
               "errors_per_s": r.errors_per_s, "reconnects": r.reconnects,
               "total_time_s": r.total_time_s, "latency_min_ms": r.lat_min_ms,
               "latency_max_ms": r.lat_max_ms, "host_cpus": cpus,
               "cpu_method": "/proc/stat", "host_cpu_window_s": round(window, 3),
               "steal_s": round(delta.steal, 3),
               "latency_percentiles": "p99 sysbench's own, p95 from its histogram"}
        return [
            Sample("transactions_per_s", r.tps, "tx/s", True, own),
            Sample("queries_per_s", r.qps, "queries/s", True, own),
            Sample("latency_mean_ms", r.lat_avg_ms, "ms", False, own),
            # The whole histogram as a CDF (µs) for the report's latency distribution figure.
            Sample("latency_p95_ms", r.latency_percentile(95), "ms", False,
                   {**own, "latency_cdf_us": distributions.thin(
                       (v * 1000, n) for v, n in r.histogram)} if r.histogram else own),
            Sample("latency_p99_ms", r.latency_percentile(99), "ms", False, own),
            Sample("host_cpu_utilization", 100 * delta.busy / window, "%", False, own),
            Sample("host_cpu_s", delta.busy, "CPU-s", False, own),
            Sample("host_cpu_ms_per_tx", 1000 * delta.busy / r.transactions, "CPU-ms/tx",
                   False, own),
        ]
