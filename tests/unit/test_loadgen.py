"""The load generator without a network: the network mode an instance describes, its
servers told apart by program and port, and names that fit interfaces."""

from __future__ import annotations

import pytest

from isotax.loadgen.local import (
    NamespaceLoadGen,
    network_mode,
)
from isotax.run.leaks import is_our_server
from isotax.workloads.rr import RequestResponse
from isotax.workloads.throughput import Throughput

IPERF3 = Throughput.ports["iperf3"].number
NETPERF = RequestResponse.ports["netperf"].number


def test_network_mode_from_describe() -> None:
    assert network_mode({"kind": "native", "network": "host"}, "127.0.0.1") == "host"
    assert network_mode({"kind": "runc", "network": "host"}, "127.0.0.1") == "host"
    assert network_mode({"kind": "runc", "network": "bridge"}, "10.213.0.2") == "bridge"
    vm = {"kind": "qemu", "network": "bridge itx-brq1, tap itx-tq1, virtio-net, vhost=off"}
    assert network_mode(vm, "10.213.1.2") == "tap"
    assert network_mode({"kind": "qemu", "network": "none"}, "") == "none"


def test_our_servers_are_recognised_by_program_and_port() -> None:
    assert is_our_server(["iperf3", "-s", "-1", "-p", str(IPERF3)])
    assert is_our_server(["/usr/bin/netserver", "-D", "-f", "-4", "-p", str(NETPERF)])
    assert not is_our_server(["iperf3", "-s", "-p", "5201"])  # somebody else's
    assert not is_our_server(["nc", "-l", str(IPERF3)])
    assert not is_our_server([])


def test_loadgen_names_fit_interfaces() -> None:
    lg = NamespaceLoadGen()
    assert lg.netns.startswith("itx-lg") and len(lg.netns) + 1 <= 15
    with pytest.raises(ValueError):
        NamespaceLoadGen(tag="toolongtag")


class _Inst:
    """An instance as listen_address sees it: its describe() and address."""

    def __init__(self, describe: dict[str, str], address: str) -> None:
        self._d, self.address = describe, address

    def describe(self) -> dict[str, str]:
        return self._d


def test_a_server_listens_where_the_load_generator_arrives_and_nowhere_else() -> None:
    from isotax.loadgen.local import listen_address
    from isotax.model import SanityError

    host = "10.213.9.1"
    assert listen_address(_Inst({"kind": "native", "network": "host"}, "127.0.0.1"),
                          host) == host
    assert listen_address(_Inst({"kind": "runc", "network": "bridge"}, "10.213.0.2"),
                          host) == "10.213.0.2"
    vm = {"kind": "qemu", "network": "bridge itx-brq1, tap itx-tq1, virtio-net"}
    assert listen_address(_Inst(vm, "10.213.1.2"), host) == "10.213.1.2"
    published = {"kind": "podman", "network": "bridge", "published": "10.88.0.1",
                 "container_address": "10.88.0.5"}
    assert listen_address(_Inst(published, "10.88.0.1"), host) == "10.88.0.5"
    with pytest.raises(SanityError, match="no address of its own"):
        listen_address(_Inst({"kind": "runc", "network": "bridge"}, ""), host)


def test_servers_are_started_on_that_address_with_the_runs_secret() -> None:
    from isotax.workloads import mysql, redis
    from isotax.workloads.base import SERVER_SECRET

    argv = redis.server_argv("10.213.0.2")
    assert argv[argv.index("--bind") + 1] == "10.213.0.2"
    assert argv[argv.index("--requirepass") + 1] == SERVER_SECRET
    assert argv[argv.index("--protected-mode") + 1] == "yes"
    assert "0.0.0.0" not in " ".join(argv)
    assert "REDISCLI_AUTH=" + SERVER_SECRET in redis.cli_argv("h", 1, "PING")
    assert "--bind-address=10.213.0.2" in mysql.server_argv("/r", {
        "buffer_pool_mib": 32, "flush_log_at_trx_commit": 1}, "10.213.0.2")
    assert len(SERVER_SECRET) >= 24 and mysql.PASSWORD == SERVER_SECRET
