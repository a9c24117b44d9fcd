"""throughput: the iperf3 parser and the /proc/stat CPU accounting on real output captured on
this kind of machine. The workload itself runs for real in tests/integration/test_loadgen.py."""

from __future__ import annotations

import json

import pytest
from support import DATA

from isotax.model import SanityError
from isotax.parsers.iperf3 import parse_iperf3
from isotax.telemetry.counters import CpuTimes, cost_per_gb, cpu_method, parse_proc_stat
from isotax.workloads.throughput import Throughput


def iperf3(name: str) -> str:
    return (DATA / "iperf3" / name).read_text()


def test_to_env_one_stream() -> None:
    r = parse_iperf3(iperf3("native-to_env-1.json"))
    assert not r.reverse and r.streams == 1 and r.protocol == "TCP"
    assert r.version == "iperf 3.12" and r.congestion
    assert r.bytes_received > 1e9 and 1.9 < r.seconds < 2.2
    # The receiver's rate is its bytes over its interval.
    assert r.bits_per_second == pytest.approx(r.bytes_received * 8 / r.seconds, rel=1e-3)


def test_from_env_is_reverse_and_counts_the_receiver() -> None:
    text = iperf3("native-from_env-1.json")
    r = parse_iperf3(text)
    assert r.reverse
    doc = json.loads(text)
    assert r.bytes_received == doc["end"]["sum_received"]["bytes"]


def test_udp_streams_count_the_receivers_datagrams_and_losses() -> None:
    r = parse_iperf3(iperf3("native-udp-to_env-2.json"))  # iperf3 -u -b 0 -l 1400 -P 2
    assert r.protocol == "UDP" and r.streams == 2 and not r.reverse
    # The sender sent more than the receiver got: the rest is lost, not slowed.
    assert r.bytes_sent > r.bytes_received and r.lost_percent == pytest.approx(26.36, abs=0.01)
    assert r.jitter_ms is not None and r.jitter_ms > 0
    assert parse_iperf3(iperf3("native-to_env-1.json")).lost_percent is None
    from isotax.workloads.udp_stream import UdpStream
    args = UdpStream().client_args({"size": 1200})
    assert args == ["-u", "-b", "0", "-l", "1200"]
    assert UdpStream.ports["iperf3"].protocols == ("tcp", "udp")


def test_two_streams() -> None:
    r = parse_iperf3(iperf3("native-to_env-2.json"))
    assert r.streams == 2 and r.bytes_received > 0


def test_iperf3_error_is_a_sanity_failure() -> None:
    with pytest.raises(SanityError, match="unable to connect to server"):
        parse_iperf3(iperf3("refused.json"))


def test_no_data_and_garbage_are_sanity_failures() -> None:
    doc = json.loads(iperf3("native-to_env-1.json"))
    doc["end"]["sum_received"]["bytes"] = 0
    with pytest.raises(SanityError, match="no data"):
        parse_iperf3(json.dumps(doc))
    with pytest.raises(SanityError, match="not JSON"):
        parse_iperf3("iperf3: error - unable to connect")
    del doc["end"]["sum_received"]
    with pytest.raises(SanityError, match="sum_received"):
        parse_iperf3(json.dumps(doc))


def test_proc_stat_delta_and_cost() -> None:
    before = parse_proc_stat((DATA / "proc-stat" / "before.txt").read_text(), 100)
    after = parse_proc_stat((DATA / "proc-stat" / "after.txt").read_text(), 100)
    d = after - before
    # One second apart on a 2-CPU host: about 2 CPU-seconds in all (jiffies, so +-a few).
    assert 1.8 <= d.busy + d.idle + d.steal <= 2.3
    cost = cost_per_gb(d, 2e9)
    assert cost["total"] == pytest.approx(d.busy / 2)
    assert cost["total"] == pytest.approx(cost["user"] + cost["system"] + cost["softirq"])
    with pytest.raises(ValueError, match="no bytes"):
        cost_per_gb(d, 0)


def test_proc_stat_fields() -> None:
    t = parse_proc_stat("cpu  100 10 50 1000 5 1 4 3 7 0\ncpu0 1 2 3 4\n", 100)
    # guest time (7) is already inside user: never added twice.
    assert t == CpuTimes(user=1.1, system=0.5, irq=0.01, softirq=0.04, idle=10.05, steal=0.03)
    with pytest.raises(ValueError):
        parse_proc_stat("intr 1 2 3\n")


def test_cpu_method_names_proc_stat() -> None:
    assert cpu_method().startswith("/proc/stat")


def test_params() -> None:
    specs = {p.name: p for p in Throughput.params}
    assert specs["direction"].problem("sideways") is not None
    assert specs["direction"].problem("from_env") is None
    assert specs["seconds"].problem(0) is not None
    assert Throughput.needs_loadgen
