"""gVisor on the host's network (runsc --network=host, hostinet), systrap, for real:

- a server in the sandbox is seen listening from the host side (the host kernel's tables of
  the Sentry's own sockets); a host process on the port does not pass for it; iperf3 runs
  through the load generator;
- mpirun cannot start (PMIx finds no interface address): the failure is the known one, with
  gvisor.mpi_unsupported's reason, and the same linpack runs on gVisor's netstack (bridge).
- sockperf over UDP runs in the sandbox."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import ours, started

from isotax import protocols
from isotax.environments.oci.gvisor import GvisorInstance
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import NamespaceLoadGen
from isotax.model import NotApplicable, SanityError
from isotax.parsers.hpcc import parse_mpirun_version
from isotax.protocols import Instance
from isotax.run.leaks import leaked_servers
from isotax.workloads.hpcc import (
    HOSTINET_MPI_REASON,
    PMIX_LISTENER_FAILED,
    HpccConfig,
    MpiLaunch,
    hpcc_script,
    mpi_unsupported,
)
from isotax.workloads.servers import host_listener, serving
from isotax.workloads.throughput import Throughput

IPERF3 = Throughput.ports["iperf3"].number


@pytest.fixture
def hostnet(image: ImageArtifacts, tmp_path: Path) -> Iterator[GvisorInstance]:
    with started("test-gvh-host", "gvisor", "host", image, tmp_path) as i:
        assert isinstance(i, GvisorInstance) and i.platform == "systrap"
        yield i
    assert ours("test-gvh-host") == []


@pytest.mark.integration
def test_server_seen_listening_and_iperf3_runs(hostnet: GvisorInstance,
                                               loadgen: NamespaceLoadGen) -> None:
    t0 = time.monotonic()
    with serving(hostnet, ["iperf3", "-s", "-p", str(IPERF3)], IPERF3, program="iperf3"):
        listen_s = time.monotonic() - t0
        sentry = host_listener(hostnet, IPERF3)
        assert sentry is not None and sentry in hostnet.host_pids()
        assert Path(f"/proc/{sentry}/cmdline").read_bytes().startswith(b"runsc-sandbox")
        assert listen_s < 10, listen_s
    assert host_listener(hostnet, IPERF3) is None  # stopped: nothing of it listens
    w = protocols.workloads()["throughput"]()
    params = {"direction": "to_env", "seconds": 1, "streams": 1, "placement": "free"}
    w.prepare(hostnet, params, loadgen)
    samples = {s.metric: s for s in w.run(hostnet, params, loadgen)}
    assert samples["throughput"].value > 0, samples
    assert leaked_servers() == []


@pytest.mark.integration
def test_a_host_listener_does_not_pass_for_the_sandboxs(hostnet: GvisorInstance) -> None:
    """A host process of its own listening on the port is not the environment's server: the
    check fails as for a server that never listens (a connect probe would have passed)."""
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as host_srv:
        host_srv.bind(("::", 0))
        host_srv.listen(1)
        port = host_srv.getsockname()[1]
        assert host_listener(hostnet, port) is None
        with pytest.raises(SanityError, match=r"did not start listening on tcp port"), \
                serving(hostnet, ["sleep", "31.7"], port, program="sleep", timeout=2):
            pass


def _linpack(inst: Instance) -> float:
    w = protocols.workloads()["linpack"]()
    params = {"n": 400, "nb": 64, "processes": 2, "timeout_s": 120}
    w.prepare(inst, params, None)
    samples = {s.metric: s for s in w.run(inst, params, None)}
    return samples["hpl"].value


@pytest.mark.integration
def test_linpack_cannot_start_on_hostinet_but_runs_on_netstack(
        hostnet: GvisorInstance, image: ImageArtifacts, tmp_path: Path) -> None:
    reason = mpi_unsupported(hostnet.socket_stack)
    assert reason == HOSTINET_MPI_REASON
    with pytest.raises(NotApplicable, match="hostinet"):
        _linpack(hostnet)
    # If this stops failing, a newer runsc fixed hostinet: mpi_unsupported must go. The
    # workload's own mpirun as it ran before issue 40, on the host's network, that one time:
    # PMIx fails before any rank starts.
    version = parse_mpirun_version(hostnet.exec(["mpirun", "--version"], 60).stdout)
    rundir = f"{hostnet.scratch}/itx-canary"
    hostnet.exec(["mkdir", "-p", rundir], 60).check()
    cfg = HpccConfig(n=400, nb=64, processes=2, threads=1, bind="none", timeout_s=60)
    done = hostnet.exec(
        ["sh", "-c", hpcc_script(rundir, cfg, MpiLaunch(version, "own"), program="true")], 120)
    assert done.returncode != 0 and PMIX_LISTENER_FAILED in done.stdout + done.stderr, done
    with started("test-gvh-bridge", "gvisor", "bridge", image, tmp_path / "b") as bridged:
        assert mpi_unsupported(bridged.socket_stack) is None
        assert _linpack(bridged) > 0
    assert ours("test-gvh-bridge") == []


@pytest.mark.integration
def test_sockperf_over_udp_runs_in_gvisor(image: ImageArtifacts, loadgen: NamespaceLoadGen,
                                          tmp_path: Path) -> None:
    """What the n/a reason offers instead of TCP: the UDP tail, on gVisor's netstack."""
    with started("test-gv-udp", "gvisor", "bridge", image, tmp_path) as inst:
        rr = protocols.workloads()["rr"]()
        params = {"proto": "udp", "seconds": 1, "placement": "same-cpu", "tail": True}
        rr.prepare(inst, params, loadgen)
        got = {s.metric: s.value for s in rr.run(inst, params, loadgen)}
    assert got["transactions_per_s"] > 0 and got["latency_p99_9_us"] > 0
