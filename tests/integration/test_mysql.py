"""mysql for real: MariaDB in the environment, sysbench oltp_read_write from the load
generator: a tiny thread sweep natively and in runc on a bridge with NAT, a server killed
mid-run and too many deadlocks as sanity failures, nothing left behind."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import image_where, ours, running_in, started, why_not_root_and

from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import NamespaceLoadGen
from isotax.model import SanityError
from isotax.protocols import Instance
from isotax.workloads.mysql import (
    Mysql,
    golden_dir,
    run_dir,
)

# A tiny real run: one thread, two seconds, two small tables.
TINY = {"threads": 1, "seconds": 2, "tables": 2, "table_size": 2000, "buffer_pool_mib": 64,
        "flush_log_at_trx_commit": 1, "max_error_pct": 5.0}


ENVS = {"native": ("native", "host"), "runc-bridge": ("runc", "bridge")}


def _why_not() -> str | None:
    return why_not_root_and("nsenter", "iptables", "mariadbd", "mariadb-install-db", "mariadb",
                            "sysbench", root_for="network namespaces, veth pairs and containers")


image = image_where(_why_not)


@pytest.fixture(scope="module", params=list(ENVS))
def inst(request: pytest.FixtureRequest, image: ImageArtifacts, loadgen: NamespaceLoadGen,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    kind, net = ENVS[request.param]
    name = f"test-mysql-{request.param}"
    with started(name, kind, net, image, tmp_path_factory.mktemp(request.param)) as i:
        yield i
    assert ours(name, "mariadbd") == []


def _gone(inst: Instance, path: str) -> bool:
    return inst.exec(["test", "-e", path], 30).returncode == 1


@pytest.mark.integration
def test_sweep(inst: Instance, loadgen: NamespaceLoadGen) -> None:
    """Two thread counts on one prepared dataset; every point a fresh copy and server."""
    w = Mysql()
    for threads in (1, 4):
        params = {**TINY, "threads": threads}
        w.prepare(inst, params, loadgen)
        samples = {s.metric: s for s in w.run(inst, params, loadgen)}
        assert set(samples) == {
            "transactions_per_s", "queries_per_s", "latency_mean_ms", "latency_p95_ms",
            "latency_p99_ms", "host_cpu_utilization", "host_cpu_s", "host_cpu_ms_per_tx"}
        v = {k: s.value for k, s in samples.items()}
        assert v["transactions_per_s"] > 10
        assert v["queries_per_s"] >= 20 * v["transactions_per_s"] * 0.99
        assert v["latency_mean_ms"] > 0 and v["latency_p95_ms"] <= v["latency_p99_ms"]
        assert 0 < v["host_cpu_utilization"] <= 100 and v["host_cpu_s"] > 0
        labels = samples["transactions_per_s"].labels
        assert labels["threads"] == threads and labels["transactions"] > 0
        assert labels["reconnects"] == 0
        assert labels["ignored_errors"] <= 0.05 * labels["transactions"]
        assert labels["path"].startswith(f"loadgen netns {loadgen.netns}")
        if inst.facts().display().get("network") == "bridge":
            assert "DNAT" in labels["path"]
        print(f"{inst.facts().kind} threads={threads}: "
              f"{v['transactions_per_s']:.0f} tx/s, mean {v['latency_mean_ms']} ms, p95 "
              f"{v['latency_p95_ms']} p99 {v['latency_p99_ms']} ms, host CPU "
              f"{v['host_cpu_utilization']:.0f}% ({v['host_cpu_ms_per_tx']:.2f} ms/tx), copy "
              f"{labels['copy_s']} s")
        # Stopped and removed; the golden dataset stays for the next point.
        assert running_in(inst, "mariadbd") == 0
        assert _gone(inst, run_dir(inst.data_dir))
        assert not _gone(inst, golden_dir(inst.data_dir, 2, 2000))


@pytest.fixture()
def native(image: ImageArtifacts, loadgen: NamespaceLoadGen,
           tmp_path: Path) -> Iterator[Instance]:
    """The client side of a failure is the same in every environment: the host is enough."""
    with started("test-mysql-fail", "native", "host", image, tmp_path) as i:
        yield i


@pytest.mark.integration
def test_a_killed_server_is_a_sanity_failure(native: Instance,
                                             loadgen: NamespaceLoadGen) -> None:
    w = Mysql()
    params = {**TINY, "threads": 2, "seconds": 8}
    w.prepare(native, params, loadgen)
    killed: list[str] = []

    def kill_it() -> None:
        # Once the measured run is under way (after copy, start and prewarm), KILL mariadbd.
        for _ in range(200):
            time.sleep(0.1)
            done = native.exec(["sh", "-c", 'for p in /proc/[0-9]*; do [ "$(cat $p/comm '
                                '2>/dev/null)" = mariadbd ] && grep -q -- "--datadir=$1" '
                                '$p/cmdline 2>/dev/null && echo ${p#/proc/}; done; true',
                                "sh", run_dir(native.data_dir)], 10)
            pids = done.stdout.split()
            if pids and native.exec(["sh", "-c", "pgrep -x sysbench >/dev/null"],
                                    10).returncode == 0:
                time.sleep(2)
                native.exec(["kill", "-9", *pids], 10)
                killed.extend(pids)
                return

    t = threading.Thread(target=kill_it)
    t.start()
    try:
        with pytest.raises(SanityError, match=r"Lost connection|does not answer|error 20"):
            w.run(native, params, loadgen)
    finally:
        t.join()
    assert killed, "the server was never seen running"
    assert running_in(native, "mariadbd") == 0
    assert _gone(native, run_dir(native.data_dir))


@pytest.mark.integration
def test_client_errors_are_a_sanity_failure(native: Instance,
                                            loadgen: NamespaceLoadGen) -> None:
    """16 threads on 10 rows deadlock all the time: with no errors allowed, the point fails;
    and a run without its prepared dataset fails with the reason."""
    w = Mysql()
    params = {**TINY, "threads": 16, "tables": 1, "table_size": 10, "max_error_pct": 0.0}
    with pytest.raises(SanityError, match="no prepared dataset"):
        w.run(native, params, loadgen)
    w.prepare(native, params, loadgen)
    with pytest.raises(SanityError, match=r"ignored errors \(deadlocks"):
        w.run(native, params, loadgen)
    assert running_in(native, "mariadbd") == 0
    assert _gone(native, run_dir(native.data_dir))
