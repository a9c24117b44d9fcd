"""The load generator: its namespace, its port mappings and its teardown, and the network
workloads (throughput, rr) run for real through it natively, in runc on the host's network
and on a bridge with NAT, and in the QEMU VM (TCG here: short runs)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyroute2 import IPRoute
from support import image_where, ours, running_in, started, why_not_root_and

from isotax.facts import Reach
from isotax.host.network import iptables, uplink_mtu
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import NamespaceLoadGen, open_loadgen
from isotax.model import SanityError
from isotax.parsers import distributions
from isotax.protocols import Instance
from isotax.run.leaks import find_leaks, leaked_servers
from isotax.workloads.redis import REDIS_PORT
from isotax.workloads.rr import RequestResponse
from isotax.workloads.servers import serving, start_server, stop_server
from isotax.workloads.throughput import Throughput
from isotax.workloads.udp_stream import UdpStream

# -- the leak check, on a real server ------------------------------------------------------


@pytest.mark.skipif(shutil.which("redis-server") is None,
                    reason="redis-server is not installed (scripts/setup.sh installs it)")
def test_a_leftover_native_redis_server_is_found(tmp_path: Path) -> None:
    """redis-server rewrites its command line ("redis-server 127.0.0.1:46379"): a real one
    left on isotax's port must still be reported."""
    port = str(REDIS_PORT)
    p = subprocess.Popen(["redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", str(tmp_path)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(str(p.pid) in x
                                                      for x in leaked_servers()):
            time.sleep(0.1)
        assert any(str(p.pid) in x for x in leaked_servers())
    finally:
        p.terminate()
        p.wait(10)
    assert not any(str(p.pid) in x for x in leaked_servers())


# -- real namespace --------------------------------------------------------------------------

def _why_not() -> str | None:
    return why_not_root_and("nsenter", "iptables", "iperf3", "netperf", "netserver", "sockperf",
                            root_for="network namespaces, veth pairs and iptables")


image = image_where(_why_not)


@pytest.mark.integration
def test_open_close_leaves_nothing() -> None:
    if (why := _why_not()) is not None:
        pytest.skip(why)
    host_tw_reuse = Path("/proc/sys/net/ipv4/tcp_tw_reuse").read_text()
    with open_loadgen() as lg:
        tag = lg.netns
        assert f"netns {tag} " in " ".join(find_leaks())  # the check sees it while it exists
        done = lg.exec(["ip", "-4", "-o", "addr", "show", "dev", "eth0"], 10).check()
        assert f"{lg.veth.ns_ip}/24" in done.stdout
        route = lg.exec(["ip", "route", "show", "default"], 10).check().stdout
        assert f"via {lg.veth.host_ip}" in route
        with IPRoute() as ipr:  # the host uplink's MTU, not the veth default of 1500
            assert lg.veth.mtu() == uplink_mtu(ipr)
        # Its clients reuse their own TIME_WAIT ports (a connection per request), and only
        # they: the host's own setting is untouched.
        assert lg.exec(["sysctl", "-n", "net.ipv4.tcp_tw_reuse"], 10).check().stdout.strip() \
            == "1"
        assert Path("/proc/sys/net/ipv4/tcp_tw_reuse").read_text() == host_tw_reuse
        rules = [ln for ln in iptables("-t", "filter", "-S", "FORWARD").stdout.splitlines()
                 if tag in ln]
        assert len(rules) == 2 and all("isotax" in r for r in rules)
        host_ip = lg.veth.host_ip
    assert ours(tag, f"{host_ip} ") == []
    assert not Path(f"/run/netns/{tag}").exists()


@pytest.mark.integration
def test_close_after_failure_still_removes_everything() -> None:
    if (why := _why_not()) is not None:
        pytest.skip(why)
    with pytest.raises(RuntimeError, match="boom"), open_loadgen() as lg:
        tag = lg.netns
        raise RuntimeError("boom")
    assert ours(tag) == []


# -- environments ------------------------------------------------------------------------------

ENVS = {  # plan-style name -> (kind, network)
    "native": ("native", "host"),
    "runc-host": ("runc", "host"),
    "runc-bridge": ("runc", "bridge"),
    "qemu": ("qemu", "bridge"),
}


@pytest.fixture(scope="module", params=list(ENVS))
def inst(request: pytest.FixtureRequest, image: ImageArtifacts, loadgen: NamespaceLoadGen,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    kind, net = ENVS[request.param]
    with started(f"test-{request.param}", kind, net, image,
                 tmp_path_factory.mktemp(request.param)) as i:
        yield i


@pytest.mark.integration
def test_background_server_returns_and_is_stopped(inst: Instance) -> None:
    """exec returns at once with a server left running in the background (natively, runc
    exec, the VM's agent), and stop_server really ends it."""
    port = Throughput.ports["iperf3"].number
    t0 = time.monotonic()
    pid = start_server(inst, ["iperf3", "-s", "-p", str(port)], port)
    try:
        assert time.monotonic() - t0 < 60
        assert running_in(inst, "iperf3") == 1
    finally:
        stop_server(inst, pid, "iperf3")
    assert running_in(inst, "iperf3") == 0
    assert leaked_servers() == []


def _cmdlines(inst: Instance, line: str) -> int:
    """How many processes in inst have exactly this command line (words joined by spaces)."""
    done = inst.exec(["sh", "-c", 'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < "$f"; '
                      'echo; done 2>/dev/null | grep -cxF "$1"; true', "sh", line + " "], 60)
    return int(done.stdout.strip() or 0)


@pytest.mark.integration
def test_a_server_that_never_listens_is_a_sanity_failure(inst: Instance) -> None:
    with pytest.raises(SanityError, match=r"did not start listening|server exited"), \
            serving(inst, ["sleep", "31.7"], RequestResponse.ports["sockperf"].number, "udp",
                    program="sleep", timeout=2):
        pass
    assert _cmdlines(inst, "sleep 31.7") == 0  # stopped all the same


def _short(inst: Instance) -> int:
    # The VM runs under TCG here (about 20x slower): keep its runs short too.
    return 1 if inst.facts().emulated else 2


@pytest.mark.integration
@pytest.mark.parametrize("direction", ["to_env", "from_env"])
def test_throughput(inst: Instance, loadgen: NamespaceLoadGen, direction: str) -> None:
    w = Throughput()
    params = {"direction": direction, "seconds": _short(inst), "streams": 1, "placement": "free"}
    w.prepare(inst, params, loadgen)
    samples = {s.metric: s for s in w.run(inst, params, loadgen)}
    gbit = samples["throughput"]
    assert gbit.unit == "Gbit/s" and gbit.value > 0.01
    assert gbit.labels["direction"] == direction and gbit.labels["bytes"] > 0
    assert gbit.labels["path"].startswith(f"loadgen netns {loadgen.netns}")
    assert gbit.labels["cpu_method"].startswith("/proc/stat")
    total = samples["cpu_per_gb"].value
    parts = sum(samples[f"cpu_{k}_per_gb"].value for k in ("user", "system", "softirq"))
    assert total > 0 and parts == pytest.approx(total)
    assert running_in(inst, "iperf3") == 0
    if inst.facts().reach is Reach.BRIDGE:
        assert "DNAT" in gbit.labels["path"]


@pytest.mark.integration
def test_udp_stream(inst: Instance, loadgen: NamespaceLoadGen) -> None:
    # Through a bridge's DNAT too: the datagrams need the port mapped for udp as well as tcp.
    w = UdpStream()
    params = {"direction": "to_env", "seconds": _short(inst), "streams": 2,
              "placement": "free", "size": 1200}
    w.prepare(inst, params, loadgen)
    samples = {s.metric: s for s in w.run(inst, params, loadgen)}
    gbit = samples["throughput"]
    assert gbit.value > 0.001 and gbit.labels["protocol"] == "UDP"
    assert 0 <= samples["lost_pct"].value < 100 and samples["jitter_ms"].value >= 0
    assert running_in(inst, "iperf3") == 0


# Answers dropped on their way to the load generator, by rules in its own namespace: the
# first ~219 answers pass, then exactly one is lost (quota counts 228-byte IP packets); or
# every 1,500th is lost, so every run stands still within its first 1,500 transactions.
LOSSES = {
    "one answer lost": [["-m", "quota", "--quota", "50000", "-j", "ACCEPT"],
                        ["-m", "quota", "--quota", "228", "-j", "DROP"]],
    "every 1500th lost": [["-m", "statistic", "--mode", "nth", "--every", "1500",
                           "--packet", "1499", "-j", "DROP"]],
}


@pytest.mark.integration
@pytest.mark.parametrize("loss", list(LOSSES))
def test_udp_rr_that_stood_still_is_run_again_or_refused(
        loss: str, image: ImageArtifacts, loadgen: NamespaceLoadGen, tmp_path: Path) -> None:
    """UDP_RR never sends a lost datagram again: netperf waits for the answer until its timer
    ends the run, whose rate then is not its latency's. One loss costs one more run, named in
    the labels; a path that loses in every run is a SanityError, and nothing is measured."""
    port = str(RequestResponse.ports["netperf-data"].number)
    rules = [["-p", "udp", "--sport", port, "-m", "comment", "--comment", f"isotax test {loss}",
              *r] for r in LOSSES[loss]]
    w, params = RequestResponse(), {"proto": "udp", "seconds": 2, "placement": "free",
                                    "tail": False}
    with started("test-native-lossy", "native", "host", image, tmp_path) as inst:
        w.prepare(inst, params, loadgen)
        for rule in rules:
            subprocess.run(["ip", "netns", "exec", loadgen.netns, "iptables", "-A", "INPUT",
                            *rule], check=True)
        try:
            if loss == "one answer lost":
                samples = {s.metric: s for s in w.run(inst, params, loadgen)}
                labels = samples["transactions_per_s"].labels
                assert len(labels["stalled_runs"]) == 1 and labels["busy_share"] >= 0.9
                assert samples["latency_mean_us"].value == pytest.approx(
                    1e6 / samples["transactions_per_s"].value, rel=0.1)
            else:
                with pytest.raises(SanityError, match=r"UDP_RR stood still in each of 3 runs "
                                   r"\(\d+% busy.*datagrams are lost on this path"):
                    w.run(inst, params, loadgen)
        finally:
            for rule in rules:
                subprocess.run(["ip", "netns", "exec", loadgen.netns, "iptables", "-D",
                                "INPUT", *rule], check=True)
        assert running_in(inst, "netserver") == 0


@pytest.mark.integration
@pytest.mark.parametrize("proto", ["tcp", "udp"])
def test_rr(inst: Instance, loadgen: NamespaceLoadGen, proto: str) -> None:
    w = RequestResponse()
    params = {"proto": proto, "seconds": _short(inst), "placement": "same-cpu", "tail": True}
    w.prepare(inst, params, loadgen)
    samples = {s.metric: s for s in w.run(inst, params, loadgen)}
    assert set(samples) == {"transactions_per_s", "latency_mean_us", "latency_p50_us",
                            "latency_p90_us", "latency_p99_us", "latency_p99_9_us"}
    tps = samples["transactions_per_s"]
    assert tps.value > 10 and tps.labels["tool"].startswith("netperf 2.")
    assert tps.labels["tool"].endswith(f"{proto.upper()}_RR")
    # One transaction in flight: mean latency and rate are two views of one number (a UDP_RR
    # run that lost a datagram and stood still is run again: the next test).
    assert tps.labels["busy_share"] >= 0.9
    assert samples["latency_mean_us"].value == pytest.approx(1e6 / tps.value, rel=0.1)
    assert samples["latency_p50_us"].value <= samples["latency_p99_us"].value
    tail = samples["latency_p99_9_us"]
    assert tail.labels["tool"].startswith("sockperf") and tail.value > 0
    assert tail.labels["sockperf_p99_us"] <= tail.value
    # The CDF of every logged round trip agrees with sockperf's own percentiles, whose index
    # rounds differently (in the tail of a short emulated run, by a whole observation).
    cdf = tail.labels["rtt_cdf_us"]
    assert distributions.valid(cdf) and cdf[-1][1] == 1.0
    assert distributions.quantile(cdf, 0.5) == pytest.approx(tail.labels["sockperf_p50_us"],
                                                             rel=0.05)
    assert distributions.quantile(cdf, 0.99) <= tail.value <= cdf[-1][0] * 1.001
    assert not list(Path(tempfile.gettempdir()).glob("itx-sockperf-*"))  # the log is gone
    for program in ("netserver", "sockperf"):
        assert running_in(inst, program) == 0


@pytest.mark.integration
@pytest.mark.skipif(why_not_root_and("runc") is not None, reason=why_not_root_and("runc") or "")
def test_split_placement_needs_two_cpus(image: ImageArtifacts, tmp_path: Path) -> None:
    """With one CPU, "split" would put the server on the client's CPU: same-cpu under another
    name. The point is not applicable there, with the reason."""
    from isotax import protocols
    from isotax.model import NotApplicable
    from isotax.protocols import EnvSpec
    from isotax.workloads.servers import pinning

    for vcpus, want in ((1, None), (2, ["taskset", "-c", "1"])):
        inst = protocols.environments()["runc"]().start(EnvSpec(
            name=f"test-split{vcpus}", kind="runc", image=image, workdir=tmp_path / str(vcpus),
            vcpus=vcpus))
        try:
            if want is None:
                with pytest.raises(NotApplicable, match=r"split needs 2 CPUs.*it may use 1"):
                    pinning(inst, "split")
            else:
                assert pinning(inst, "split") == (["taskset", "-c", "0"], want)
        finally:
            inst.stop()
