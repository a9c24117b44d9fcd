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
