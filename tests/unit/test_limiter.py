"""analysis.limiter on real telemetry summaries recorded by isotax runs on the 2-core development
host (tests/data/limiter, README there says how), and each threshold's boundary on small,
HAND-MODIFIED copies of them (every such copy goes through `modified`, which says so)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from support import DATA

from isotax.analysis import limiter
from isotax.analysis.limiter import Limiter, Verdict, aggregate
from isotax.telemetry.summary import Link, TelemetrySummary


def recorded(name: str) -> dict[str, Any]:
    return json.loads((DATA / "limiter" / f"{name}.json").read_text())["summary"]


def modified(name: str) -> dict[str, Any]:
    """A HAND-MODIFIED copy of a recorded summary: the caller edits it to pin a boundary."""
    return copy.deepcopy(recorded(name))


def suspect(s: dict[str, Any]) -> Verdict:
    """limiter.suspect of a summary as the store keeps it ({}: a run without telemetry)."""
    return limiter.suspect(TelemetrySummary.from_json(s) if s else None)


# -- every recorded summary gets the limiter it should, naming the thread ---------------------
CASES = [
    # (file, limiter, words that must be in the verdict's one line)
    ("all-cores-native-compress-t0", Limiter.ALL_CORES, "the workload kept"),
    ("all-cores-contended-native-compress-t0", Limiter.ALL_CORES, "other tenants"),
    ("one-core-native-compress-t1", Limiter.ONE_CORE, "xz (inside) at 96% of a core"),
    ("one-core-runc-compress-t1", Limiter.ONE_CORE, "xz (inside)"),
    ("one-core-native-throughput-from_env-p1", Limiter.ONE_CORE, "iperf3 (inside) at 81%"),
    ("one-core-qemu-compress-t1", Limiter.ONE_CORE,
     "qemu-system-x86 thread CPU 0/TCG (machinery) at 98% of a core"),
    ("one-core-qemu-guest-cpu-compress-t0", Limiter.ONE_CORE, "the guest's cpu1 at 89%"),
    ("loadgen-runc-throughput-to_env-p4", Limiter.LOADGEN,
     "iperf3 (load generator) at 86% of a core"),
    ("loadgen-native-redis-c50-p1", Limiter.LOADGEN,
     "redis-benchmark (load generator) at 83% of a core"),
    ("latency-native-rr-tcp", Limiter.LATENCY, "1 in flight"),
    ("latency-native-rr-tcp-busy-neighbour", Limiter.LATENCY, "1 in flight"),
    ("latency-native-fio-randread-qd16", Limiter.LATENCY, "16 in flight"),
    ("device-native-fio-read-1m-qd4", Limiter.DEVICE, "vda had I/O outstanding 92%"),
    ("iowait-native-fio-psync-randread", Limiter.IO_WAIT, "0.52 s per second"),
    ("iowait-qemu-fio-psync-randwrite", Limiter.IO_WAIT, "0.35 s per second"),
    ("no-clear-limiter-native-throughput-from_env-p4", Limiter.NO_CLEAR, "no rule fired"),
]


@pytest.mark.parametrize(("name", "expected", "words"), CASES, ids=[c[0] for c in CASES])
def test_recorded(name: str, expected: Limiter, words: str) -> None:
    v = suspect(recorded(name))
    assert v.limiter is expected, v
    assert words in v.words, v.words
    assert v.evidence and all(isinstance(e, str) and e for e in v.evidence)


def test_every_recording_is_tested() -> None:
    assert {p.stem for p in (DATA / "limiter").glob("*.json")} == {c[0] for c in CASES}


def test_loadgen_evidence_shows_the_server_beside_the_client() -> None:
    v = suspect(recorded("loadgen-runc-throughput-to_env-p4"))
    assert "the result measures the client" in v.words
    assert any("iperf3 (inside)" in e for e in v.evidence)  # the server, far from saturated


def test_a_busy_neighbour_is_named_not_blamed() -> None:
    # Recorded with mypy (another tenant) at 0.99 of a core beside rr: the host was 99% busy.
    v = suspect(recorded("latency-native-rr-tcp-busy-neighbour"))
    assert any("other tenants used 1.00 cores" in e and "mypy" in e for e in v.evidence)
    assert any("busiest CPU 100%" in e for e in v.evidence)


def test_device_evidence_warns_that_busy_is_not_a_ceiling() -> None:
    v = suspect(recorded("device-native-fio-read-1m-qd4"))
    assert "at 4 in flight" in v.words
    assert any("deeper queue" in e for e in v.evidence)


def test_virtual_links_are_no_ceiling() -> None:
    # Recorded: iperf3 moved 17 Gbit/s over a veth that reports 10000 Mb/s.
    s = recorded("loadgen-runc-throughput-to_env-p4")
    link = s["links"]["itx-lgd95402"]
    assert link["virtual"] is True and link["speed_mbps"] == 10000
    assert 8 * link["rx_bytes"] / s["duration_s"] > 10e9
    s["threads"] = [t for t in s["threads"] if t["group"] != "loadgen"]  # HAND-MODIFIED
    assert suspect(s).limiter is not Limiter.NETWORK


# -- thresholds, pinned on hand-modified copies ------------------------------------------------
def _thread(s: dict[str, Any], program: str) -> dict[str, Any]:
    return next(t for t in s["threads"] if t["program"] == program)


@pytest.mark.parametrize(("share", "peak", "fires"), [
    (limiter.SATURATED + 0.001, 0.5, True),
    (limiter.SATURATED - 0.001, limiter.SATURATED_PEAK - 0.001, False),
    (limiter.SATURATED_SUSTAINED + 0.001, limiter.SATURATED_PEAK + 0.001, True),
    (limiter.SATURATED_SUSTAINED - 0.001, 1.0, False),
])
def test_saturated_boundary(share: float, peak: float, fires: bool) -> None:
    s = modified("one-core-native-compress-t1")
    xz = _thread(s, "xz")
    xz["core_share"], xz["peak_core_share"] = share, peak  # HAND-MODIFIED
    assert (suspect(s).limiter is Limiter.ONE_CORE) is fires


def _set_own(s: dict[str, Any], share: float) -> None:
    """HAND-MODIFIED: make the own CPU `share` of the host by the isotax group's seconds."""
    dur, cpus = s["duration_s"], s["cpus"]
    s["host_cpu_s"]["busy"] = max(s["host_cpu_s"]["busy"], share * dur * cpus + 1)
    s["groups"]["isotax"]["cpu_s"] = 0.0
    now = limiter.own_cpu_s(TelemetrySummary.from_json(s))
    s["groups"]["isotax"]["cpu_s"] = share * dur * cpus - now


@pytest.mark.parametrize(("rest", "expected"), [
    (limiter.ONE_CORE_REST - 0.002, Limiter.ONE_CORE),
    (limiter.ONE_CORE_REST + 0.002, Limiter.NO_CLEAR),  # own 0.73 of 2 < ALL_OWN
])
def test_one_core_rest_boundary(rest: float, expected: Limiter) -> None:
    s = modified("one-core-native-compress-t1")
    xz = _thread(s, "xz")["core_share"]
    _set_own(s, (xz + rest) / s["cpus"])
    s["host_cpu_s"]["busy"] = (xz + rest) * s["duration_s"]  # no other tenants
    s["groups"]["other"]["cpu_s"] = 0.0
    assert suspect(s).limiter is expected


def test_one_core_needs_another_cpu() -> None:
    s = modified("one-core-native-compress-t1")
    s["cpus"], s["cpu_busy_share"] = 1, s["cpu_busy_share"][:1]  # HAND-MODIFIED
    assert suspect(s).limiter is Limiter.ALL_CORES


@pytest.mark.parametrize(("share", "expected"), [
    (limiter.ALL_OWN + 0.001, Limiter.ALL_CORES),
    (limiter.ALL_OWN - 0.001, Limiter.NO_CLEAR),
])
def test_all_own_boundary(share: float, expected: Limiter) -> None:
    s = modified("all-cores-native-compress-t0")
    for t in s["threads"]:
        t["core_share"] = t["peak_core_share"] = 0.5  # HAND-MODIFIED: nothing saturated
    s["inside"]["cpu_s"] = 0.0
    s["groups"]["inside"]["cpu_s"] = 0.0
    _set_own(s, share)
    s["host_cpu_s"]["busy"] = share * s["duration_s"] * s["cpus"] + 0.01
    assert suspect(s).limiter is expected


def test_own_cpu_ignores_other_tenants() -> None:
    # HAND-MODIFIED: a neighbour fills the second CPU; xz alone still saturates one core.
    s = modified("one-core-native-compress-t1")
    s["groups"]["other"]["cpu_s"] = s["duration_s"]
    s["host_cpu_s"]["busy"] = 2 * s["duration_s"]
    v = suspect(s)
    assert v.limiter is Limiter.ONE_CORE and "xz (inside)" in v.words


def test_loadgen_comes_first() -> None:
    s = modified("loadgen-native-redis-c50-p1")
    server = _thread(s, "redis-server")
    server["core_share"] = server["peak_core_share"] = 0.99  # HAND-MODIFIED
    assert suspect(s).limiter is Limiter.LOADGEN


@pytest.mark.parametrize(("share", "fires"), [(limiter.LOADGEN_ALL + 0.001, True),
                                              (limiter.LOADGEN_ALL - 0.001, False)])
def test_loadgen_all_cpus_boundary(share: float, fires: bool) -> None:
    s = modified("loadgen-native-redis-c50-p1")
    for t in s["threads"]:
        t["core_share"] = t["peak_core_share"] = 0.3  # HAND-MODIFIED: no thread saturated
    s["loadgen"]["cpu_s"] = share * s["duration_s"] * s["cpus"]
    assert (suspect(s).limiter is Limiter.LOADGEN) is fires


@pytest.mark.parametrize(("busy", "expected"), [(limiter.DISK_BUSY, Limiter.DEVICE),
                                                (limiter.DISK_BUSY - 0.001, Limiter.LATENCY)])
def test_disk_busy_boundary(busy: float, expected: Limiter) -> None:
    s = modified("device-native-fio-read-1m-qd4")
    s["disks"]["vda"]["busy_share"] = busy  # HAND-MODIFIED
    assert suspect(s).limiter is expected


@pytest.mark.parametrize(("cores", "expected"), [
    (limiter.IOWAIT_CORES + 0.001, Limiter.IO_WAIT),
    (limiter.IOWAIT_CORES - 0.001, Limiter.LATENCY),
])
def test_iowait_boundary(cores: float, expected: Limiter) -> None:
    s = modified("iowait-native-fio-psync-randread")
    s["host_cpu_s"]["iowait"] = cores * s["duration_s"]  # HAND-MODIFIED
    assert suspect(s).limiter is expected


@pytest.mark.parametrize(("share", "virtual", "expected"), [
    (limiter.LINK_NEAR + 0.001, False, Limiter.NETWORK),
    (limiter.LINK_NEAR - 0.001, False, Limiter.NO_CLEAR),
    (limiter.LINK_NEAR + 0.001, True, Limiter.NO_CLEAR),
])
def test_link_boundary(share: float, virtual: bool, expected: Limiter) -> None:
    # HAND-MODIFIED: the from_env run's veth turned into a 10 Gbit/s physical NIC.
    s = modified("no-clear-limiter-native-throughput-from_env-p4")
    name = next(iter(s["links"]))
    s["links"] = {name: {**s["links"][name], "speed_mbps": 10000, "virtual": virtual,
                         "tx_bytes": int(share * 10e9 * s["duration_s"] / 8) + 1,
                         "rx_bytes": 0}}
    v = suspect(s)
    assert v.limiter is expected
    if expected is Limiter.NETWORK:
        assert f"link {name}" in v.words and "of its 10000 Mb/s" in v.words


@pytest.mark.parametrize(("share", "expected"), [
    (limiter.LATENCY_OWN_MAX - 0.001, Limiter.LATENCY),
    (limiter.LATENCY_OWN_MAX + 0.01, Limiter.NO_CLEAR),
])
def test_latency_own_boundary(share: float, expected: Limiter) -> None:
    s = modified("latency-native-rr-tcp")
    _set_own(s, share)
    s["host_cpu_s"]["busy"] = share * s["duration_s"] * s["cpus"]
    assert suspect(s).limiter is expected


def test_bulk_streams_are_not_an_in_flight_limit() -> None:
    # HAND-MODIFIED: rr's telemetry, its work relabelled as iperf3's (GB, 1 stream).
    s = modified("latency-native-rr-tcp")
    s["work"] = {"amount": 1.0, "unit": "GB", "in_flight": 1}
    assert suspect(s).limiter is Limiter.NO_CLEAR


def test_all_host_boundary() -> None:
    s = modified("no-clear-limiter-native-throughput-from_env-p4")
    dur, cpus = s["duration_s"], s["cpus"]
    s["host_cpu_s"]["busy"] = (limiter.ALL_HOST + 0.001) * dur * cpus  # HAND-MODIFIED
    assert suspect(s).limiter is Limiter.ALL_CORES
    s["host_cpu_s"]["busy"] = (limiter.ALL_HOST - 0.01) * dur * cpus
    assert suspect(s).limiter is Limiter.NO_CLEAR


def test_guest_all_cpus_busy() -> None:
    s = modified("one-core-qemu-guest-cpu-compress-t0")
    s["guest"]["cpu_busy_s"] = [0.9 * s["duration_s"]] * 2  # HAND-MODIFIED
    v = suspect(s)
    assert v.limiter is Limiter.ALL_CORES and "guest's CPUs" in v.words


def test_no_telemetry() -> None:
    v = suspect({})
    assert v.limiter is Limiter.NO_CLEAR and "no telemetry" in v.words


def test_a_short_run_says_so() -> None:
    s = modified("one-core-native-compress-t1")
    s["ticks"] = 4  # HAND-MODIFIED
    assert any("a short run" in e for e in suspect(s).evidence)


# -- aggregate ---------------------------------------------------------------------------------
def _v(lim: Limiter, measure: float) -> Verdict:
    return Verdict(lim, f"{lim} {measure}", (f"evidence {measure}",), measure)


def test_aggregate_agreeing() -> None:
    vs = [_v(Limiter.ONE_CORE, m) for m in (0.95, 0.97, 0.99)]
    assert aggregate(vs) == vs[1]  # the median repetition, words unchanged


def test_aggregate_disagreeing() -> None:
    vs = [_v(Limiter.LOADGEN, 0.86), _v(Limiter.NO_CLEAR, 0.6), _v(Limiter.LOADGEN, 0.89)]
    a = aggregate(vs)
    assert a.limiter is Limiter.LOADGEN
    assert "2 of 3 repetitions" in a.words
    assert a.evidence[0] == "2 of 3 repetitions; the others: no clear limiter 1"
    assert a.evidence[1] in ("evidence 0.86", "evidence 0.89")


def test_aggregate_tie_goes_to_the_earlier_rule() -> None:
    a = aggregate([_v(Limiter.NO_CLEAR, 0.5), _v(Limiter.ALL_CORES, 0.8)])
    assert a.limiter is Limiter.ALL_CORES and "1 of 2 repetitions" in a.words


def test_aggregate_recorded() -> None:
    reps = [suspect(recorded(n)) for n in ("loadgen-runc-throughput-to_env-p4",
                                           "no-clear-limiter-native-throughput-from_env-p4")]
    assert aggregate(reps).limiter is Limiter.LOADGEN


def test_aggregate_nothing() -> None:
    assert aggregate([]).limiter is Limiter.NO_CLEAR


# -- observe.link_speeds: what the network rule reads ------------------------------------------
def test_link_speeds(tmp_path: Path) -> None:
    from isotax.telemetry.observe import link_speeds

    for where, name, speed in (("devices/pci0000:00/net", "eth0", "1000"),
                               ("devices/virtual/net", "itx-veth", "10000"),
                               ("devices/virtual/net", "itx-br", "-1")):
        d = tmp_path / where / name
        d.mkdir(parents=True)
        (d / "speed").write_text(speed + "\n")
        (tmp_path / "class").mkdir(exist_ok=True)
        (tmp_path / "class" / name).symlink_to(d)
    links = link_speeds({n: Link(1, 0, 0, 0) for n in ("eth0", "itx-veth", "itx-br", "gone")},
                        tmp_path / "class")
    assert links["eth0"] == Link(1, 0, 0, 0, speed_mbps=1000, virtual=False)
    assert links["itx-veth"].speed_mbps == 10000 and links["itx-veth"].virtual is True
    assert links["itx-br"].speed_mbps is None
    assert links["gone"] == Link(1, 0, 0, 0, speed_mbps=None, virtual=None)


def test_link_speeds_on_this_host() -> None:
    from isotax.telemetry.observe import link_speeds

    lo = link_speeds({"lo": Link(0, 0, 0, 0)})["lo"]
    assert (lo.speed_mbps, lo.virtual) == (None, True)  # loopback: no speed file value
