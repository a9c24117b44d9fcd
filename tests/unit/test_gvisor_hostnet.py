"""gVisor on the host's network (runsc --network=host, hostinet), systrap: what its sandbox
cannot show, on real captures: the sandbox's /proc/net lists no tcp6 at all, so a server
in it is found in the host kernel's tables of the Sentry's own sockets."""

from __future__ import annotations

from support import DATA

from isotax.environments.base import gvisor_socket_stack
from isotax.facts import Facts, Reach
from isotax.protocols import SocketStack
from isotax.workloads.hpcc import HOSTINET_MPI_REASON, PMIX_LISTENER_FAILED, mpi_unsupported
from isotax.workloads.servers import listening_inodes, socket_inodes
from isotax.workloads.throughput import Throughput

IPERF3 = Throughput.ports["iperf3"].number


# -- pure, on what runsc showed with iperf3 -s -p 45201 listening in a hostinet sandbox ---------

def test_sandbox_lists_no_tcp6_so_its_listener_is_invisible_inside() -> None:
    inside = (DATA / "gvisor" / "hostinet-iperf3-sandbox-proc-net.txt").read_text()
    tcp = inside.split("$ cat /proc/net/tcp\n")[1].split("$ cat /proc/net/tcp6\n")[0]
    assert listening_inodes(tcp, IPERF3, "0A") == set()
    assert "tcp6: No such file or directory" in inside
    assert "tcp6" not in inside.split("$ cat /proc/net/tcp\n")[0]  # not in `ls /proc/net`


def test_the_host_sees_the_sentrys_listening_socket() -> None:
    tcp6 = (DATA / "gvisor" / "hostinet-iperf3-host-tcp6.txt").read_text()
    tcp = (DATA / "gvisor" / "hostinet-iperf3-host-tcp.txt").read_text()
    listening = listening_inodes(tcp6, IPERF3, "0A")
    assert listening == {2449648}  # iperf3's dual-stack socket, held by the Sentry
    fds = (DATA / "gvisor" / "hostinet-iperf3-sentry-fds.txt").read_text()
    held = socket_inodes(fds.splitlines())
    assert listening <= held
    # Other ports, states and tables do not match.
    assert listening_inodes(tcp, IPERF3, "0A") == set()
    assert listening_inodes(tcp, 0x07E8, "0A") == {1596}  # a host service's own socket
    assert listening_inodes(tcp6, IPERF3, "01") == set()
    assert listening_inodes(tcp6, IPERF3 + 1, "0A") == set()


def test_socket_inodes_reads_only_socket_links() -> None:
    assert socket_inodes(["/dev/null", "socket:[12]", "pipe:[13]", "anon_inode:[eventfd]",
                          "socket:[x]"]) == {12}


def test_mpirun_failure_is_the_known_one() -> None:
    text = (DATA / "gvisor" / "hostinet-mpirun-hpcc.txt").read_text()
    assert PMIX_LISTENER_FAILED.replace("\n", " ") in " ".join(text.split())
    assert "ioctl(SIOCGIFADDR) failed with errno=25" in text  # ENOTTY
    assert mpi_unsupported(gvisor_socket_stack("host")) == HOSTINET_MPI_REASON
    assert gvisor_socket_stack("host") is SocketStack.GVISOR_HOSTINET
    assert mpi_unsupported(gvisor_socket_stack("bridge")) is None
    assert mpi_unsupported(SocketStack.LINUX) is None
    # and the hpcc workloads say so before anything runs: n/a, not a failure
    from isotax.run.applicability import why_not_applicable
    from isotax.workloads.linpack import Linpack

    class _Described:
        address = "127.0.0.1"
        socket_stack = SocketStack.GVISOR_HOSTINET

        def facts(self) -> Facts:
            return Facts("gvisor", Reach.HOST)

    assert why_not_applicable(Linpack(), _Described(), {}) == HOSTINET_MPI_REASON  # type: ignore[arg-type]
    assert "\n" not in HOSTINET_MPI_REASON and "bridge" in HOSTINET_MPI_REASON


def test_in_gvisor_only_the_sockperf_tcp_tail_is_n_a() -> None:
    """sockperf's TCP server fails in gVisor: the rr point still applies there (netperf's
    TCP_RR runs), and only its p99.9 is not measured, with the reason; sockperf over UDP runs
    there."""
    from isotax.run.applicability import why_not_applicable
    from isotax.workloads.rr import SOCKPERF_TCP_REASON, RequestResponse

    class _Described:
        address = "10.0.0.2"

        def __init__(self, stack: SocketStack) -> None:
            self.socket_stack = stack

        def facts(self) -> Facts:
            return Facts("gvisor", Reach.BRIDGE)

    rr = RequestResponse()
    netstack = _Described(gvisor_socket_stack("bridge"))
    hostinet = _Described(gvisor_socket_stack("host"))
    runc = _Described(SocketStack.LINUX)
    gv = netstack
    tcp = {"proto": "tcp", "seconds": 1, "placement": "free", "tail": True}
    for inst in (netstack, hostinet):
        assert why_not_applicable(rr, inst, tcp) is None  # type: ignore[arg-type]
        assert rr._no_tail(inst, tcp) == SOCKPERF_TCP_REASON  # type: ignore[arg-type]
    assert rr._no_tail(runc, tcp) is None  # type: ignore[arg-type]
    assert rr._no_tail(gv, {**tcp, "tail": False}) is None  # type: ignore[arg-type]
    assert rr._no_tail(gv, {**tcp, "proto": "udp"}) is None  # type: ignore[arg-type]
