"""The pure parts of the SSH load generator (issue 18), on real output captured from a namespace
host with a real sshd (tests/data/loadgen/): its probe, the wrapper's CPU report, dpkg's
versions, the route and ping; the plan's [loadgen]; the limiter's verdict on a remote client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from isotax.analysis.limiter import Limiter, own_cpu_s, suspect
from isotax.loadgen.ssh import _split_report, missing_versions, same_machine
from isotax.parsers import remote
from isotax.plan import PlanError, parse_plan, ssh_url_parts
from isotax.telemetry.summary import TelemetrySummary

DATA = Path(__file__).parent.parent / "data" / "loadgen"


def _text(name: str) -> str:
    return (DATA / name).read_text()


def test_the_probe_says_who_the_host_is_and_how_it_sees_us() -> None:
    facts = remote.parse_key_values(_text("probe.txt"))
    assert facts["cpus"] == "2" and facts["uid"] == "0" and facts["dev"] == "eth0"
    assert facts["os"].startswith("Debian GNU/Linux 12")
    assert facts["timeout"] == "/usr/bin/timeout"
    us, them = remote.parse_ssh_connection(facts["ssh_connection"])
    assert us.endswith(".1") and them.endswith(".2") and us.startswith("10.214.")


def test_same_machine_compares_machine_id_and_boot(tmp_path: Path) -> None:
    facts = remote.parse_key_values(_text("probe.txt"))
    (tmp_path / "etc").mkdir()
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "etc/machine-id").write_text(facts["machine_id"] + "\n")
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text(facts["boot_id"] + "\n")
    assert same_machine(facts, tmp_path)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("another-boot\n")
    assert not same_machine(facts, tmp_path)
    assert not same_machine(facts, tmp_path / "nowhere")


def test_the_wrapper_reports_the_clients_cpu_and_exit_status() -> None:
    stderr, cpu, rc = _split_report(_text("wrapper-exit3.stderr.txt"))
    assert (stderr, rc) == ("some error\n", 3)
    assert cpu == pytest.approx(0.29)
    stderr, cpu, rc = _split_report(_text("wrapper-timeout.stderr.txt"))
    assert (stderr, cpu, rc) == ("", 0.0, 124)


def test_no_report_means_the_connection_failed() -> None:
    # What ssh prints when the master's server side is gone: nothing, exit 255.
    assert _text("ssh-connection-lost.stderr.txt") == ""
    assert _split_report("") == ("", None, None)
    timed_out = _text("ssh-timeout.stderr.txt")
    assert _split_report(timed_out) == (timed_out, None, None)
    # A client that prints the marker word itself does not pass for the wrapper's report.
    assert _split_report("itx-cpu-begin\nnot times\n")[2] is None


def test_times_needs_its_two_lines() -> None:
    assert remote.parse_children_times("0m0.000s 0m0.002s\n1m2.500s 0m0.500s\n") == 63.0
    with pytest.raises(ValueError):
        remote.parse_children_times("0m0.000s 0m0.002s\n")
    with pytest.raises(ValueError):
        remote.parse_children_times("a\nb\n")


def test_dpkg_versions_and_what_differs() -> None:
    have = remote.parse_dpkg_versions(_text("dpkg-query-versions.txt"))
    assert have["netperf"] == "2.7.0-0.1" and have["redis-tools"] == "5:7.0.15-1~deb12u10"
    assert "nosuchpkg" not in have  # dpkg said so on stderr
    with_status = remote.parse_dpkg_versions(_text("dpkg-query-status.txt"))
    assert with_status["iperf3"] == "3.12-1+deb12u2"
    assert remote.parse_dpkg_versions("iperf3 3.12-1 rc\nnetperf 2.7.0-0.1 ii\n") == {
        "netperf": "2.7.0-0.1"}  # removed, config files left: not installed
    wanted = {"netperf": "2.7.0-0.1", "iperf3": "3.99-1", "nosuchpkg": "1"}
    assert missing_versions(wanted, have) == [("iperf3", "3.99-1", "3.12-1+deb12u2"),
                                              ("nosuchpkg", "1", None)]
    assert missing_versions({"netperf": "2.7.0-0.1"}, have) == []


def test_route_and_ping() -> None:
    r = remote.parse_route_get(_text("ip-route-get.txt"))
    assert r.dev.startswith("itx-h") and r.source.endswith(".1") and r.via is None
    r = remote.parse_route_get("8.8.8.8 via 192.0.2.1 dev eth0 src 192.0.2.2 uid 0 \\    cache")
    assert (r.dev, r.source, r.via) == ("eth0", "192.0.2.2", "192.0.2.1")
    r = remote.parse_route_get("local 127.0.0.1 dev lo src 127.0.0.1 uid 0 \\    cache <local>")
    assert (r.destination, r.dev) == ("127.0.0.1", "lo")
    with pytest.raises(ValueError):
        remote.parse_route_get("RTNETLINK answers: Network is unreachable")
    p = remote.parse_ping(_text("ping-veth.txt"))
    assert (p.transmitted, p.received) == (20, 20)
    assert (p.min_ms, p.avg_ms, p.max_ms) == (0.050, 0.066, 0.191)
    with pytest.raises(ValueError, match="no reply"):
        remote.parse_ping("--- x ping statistics ---\n3 packets transmitted, 0 received, "
                          "100% packet loss, time 2030ms\n")


PLAN = """
name = "p"
[loadgen]
{loadgen}
[[environments]]
name = "native"
kind = "native"
[[workloads]]
name = "rr"
"""


def test_the_plan_names_an_ssh_load_generator() -> None:
    p = parse_plan(PLAN.format(loadgen='host = "ssh://lg.example"'))
    assert p.loadgen.remote and p.loadgen.destination() == ("root", "lg.example", 22)
    p = parse_plan(PLAN.format(loadgen='host = "ssh://bob@10.0.0.2:2222"\nport = 22'))
    assert p.loadgen.destination() == ("bob", "10.0.0.2", 22)
    assert not parse_plan(PLAN.format(loadgen="")).loadgen.remote


@pytest.mark.parametrize("url", ["lg.example", "http://lg.example", "ssh://", "ssh://h/path",
                                 "ssh://u:pw@h", "ssh://h:99999"])
def test_a_bad_load_generator_url_is_one_line_with_the_fix(url: str) -> None:
    with pytest.raises(PlanError) as e:
        parse_plan(PLAN.format(loadgen=f'host = "{url}"'))
    assert "loadgen" in str(e.value) and "ssh://root@HOST" in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError):
        ssh_url_parts(url)


def _recorded_with(loadgen: dict[str, Any] | None) -> TelemetrySummary:
    """A recorded run whose limiter is latency (native rr over the local load generator),
    its local load generator's threads and CPU taken out and `loadgen` put in
    (HAND-MODIFIED)."""
    s = json.loads((DATA.parent / "limiter" / "latency-native-rr-tcp.json").read_text())
    s = s["summary"]
    s["threads"] = [t for t in s["threads"] if t["group"] != "loadgen"]
    s["groups"]["loadgen"]["cpu_s"] = 0.0  # no client ran on this host
    s["loadgen"] = loadgen
    return TelemetrySummary.from_json(s)


def test_a_saturated_remote_client_is_the_limiter_and_its_cpu_is_not_this_hosts() -> None:
    remote_lg = {"cpu_s": 9.0, "source": "the clients' own CPU time", "cpus": 16}
    busy = suspect(_recorded_with({**remote_lg, "busiest": 0.96}))
    assert busy.limiter is Limiter.LOADGEN and "a core on the load generator" in busy.words
    # Under the threshold: the load generator's CPU is neither this host's nor 90% of its 16.
    calm = _recorded_with({**remote_lg, "busiest": 0.5})
    assert suspect(calm).limiter is Limiter.LATENCY
    assert own_cpu_s(calm) == own_cpu_s(_recorded_with(None))
    # The same seconds counted on this host would be its own, and most of its 2 CPUs.
    dur = float(calm.duration_s)
    local = _recorded_with({"cpu_s": 0.95 * 2 * dur, "source": "cgroup CPU accounting"})
    v = suspect(local)
    assert v.limiter is Limiter.LOADGEN and "the host's 2 CPUs" in v.words
