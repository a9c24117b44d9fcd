"""The load generator without a network: the network mode an instance describes, its
servers told apart by program and port, and names that fit interfaces."""

from __future__ import annotations

import pytest

from isotax.facts import Facts, Reach, stored_facts
from isotax.loadgen.base import network_of
from isotax.loadgen.local import NamespaceLoadGen
from isotax.protocols import Completed
from isotax.run.leaks import is_our_server
from isotax.workloads.rr import RequestResponse
from isotax.workloads.throughput import Throughput

IPERF3 = Throughput.ports["iperf3"].number
NETPERF = RequestResponse.ports["netperf"].number


def test_how_an_instance_is_reached_is_its_facts_and_an_old_runs_words() -> None:
    assert network_of(_Inst(Facts("crun", Reach.PUBLISHED), "")) == ("crun", Reach.PUBLISHED)
    # a run stored before facts were typed: its describe() words, read once (isotax.facts)
    assert stored_facts({"kind": "native", "network": "host"}).reach is Reach.HOST
    assert stored_facts({"kind": "runc", "network": "bridge"}).reach is Reach.BRIDGE
    vm = {"kind": "qemu", "network": "bridge itx-brq1, tap itx-tq1, virtio-net, vhost=off"}
    assert stored_facts(vm).reach is Reach.TAP
    assert stored_facts({"kind": "qemu", "network": "none"}).reach is Reach.NONE
    engine = {"kind": "podman", "network": "bridge", "published": "10.88.0.1"}
    assert stored_facts(engine).reach is Reach.PUBLISHED


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
    """An instance as listen_address sees it: its facts and address."""

    def __init__(self, facts: Facts, address: str) -> None:
        self._f, self.address = facts, address

    def facts(self) -> Facts:
        return self._f


def test_a_server_listens_where_the_load_generator_arrives_and_nowhere_else() -> None:
    from isotax.loadgen.base import listen_address
    from isotax.model import SanityError

    host = "10.213.9.1"
    assert listen_address(_Inst(Facts("native", Reach.HOST), "127.0.0.1"), host) == host
    assert listen_address(_Inst(Facts("runc", Reach.BRIDGE), "10.213.0.2"),
                          host) == "10.213.0.2"
    vm = Facts("qemu", Reach.TAP, bridge="itx-brq1")
    assert listen_address(_Inst(vm, "10.213.1.2"), host) == "10.213.1.2"
    published = Facts("podman", Reach.PUBLISHED, published="10.88.0.1",
                      container_address="10.88.0.5")
    assert listen_address(_Inst(published, "10.88.0.1"), host) == "10.88.0.5"
    with pytest.raises(SanityError, match="no address of its own"):
        listen_address(_Inst(Facts("runc", Reach.BRIDGE), ""), host)


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


class _Cpus:
    """An instance that says which CPUs it may use, as /proc/self/status does."""

    def __init__(self, allowed: str) -> None:
        self.allowed = allowed

    def exec(self, argv: object, timeout: float) -> Completed:
        return Completed(("grep",), 0, f"Cpus_allowed_list:\t{self.allowed}\n", "", 0.01)


def test_placements_pin_to_the_cpus_the_environment_may_use() -> None:
    from isotax.model import NotApplicable
    from isotax.workloads.servers import pinning

    assert pinning(_Cpus("0-1"), "same-cpu") == (["taskset", "-c", "0"], ["taskset", "-c", "0"])
    assert pinning(_Cpus("0-1"), "split") == (["taskset", "-c", "0"], ["taskset", "-c", "1"])
    # A static CPU manager's exclusive core: CPU 1 alone, which CPU 0 pinning would miss.
    assert pinning(_Cpus("1"), "same-cpu") == (["taskset", "-c", "1"], ["taskset", "-c", "1"])
    assert pinning(_Cpus("2,5-6"), "split") == (["taskset", "-c", "2"], ["taskset", "-c", "6"])
    with pytest.raises(NotApplicable, match="may use 1"):
        pinning(_Cpus("1"), "split")
    assert pinning(_Cpus("1"), "free") == ([], [])
