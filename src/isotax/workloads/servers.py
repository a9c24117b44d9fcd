"""Servers inside an environment, for the workloads that measure one (rr, throughput, redis,
memcached, mysql, startup): started in the background on the port the workload declares,
waited for until they listen (seen in the environment's own /proc, or for an environment on the
host's network in the host kernel's tables of its own processes), stopped by PID; and where the
client and the server run on the CPUs they share (the plan's placement)."""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from isotax.model import NotApplicable, SanityError
from isotax.parsers import procfs
from isotax.protocols import ExecError, Instance, Reach, ServiceEndpoints
from isotax.telemetry.footprint import process_parents, with_descendants

# A socket's state in /proc/net/{tcp,udp}*: LISTEN for TCP; for UDP, bound and unconnected (07).
_LISTEN_STATE = {"tcp": "0A", "udp": "07"}
_POLL_S = 0.05


def _listening_script(table: str) -> str:
    """Inside the instance: wait until something listens on the port (LISTEN in /proc/net/tcp*,
    or bound in /proc/net/udp*), for $1 s; with $6 = once, look once and exit 2 if not yet.
    Exit 3 when the server ($4) has exited."""
    return (
        'end=$(( $(date +%s) + $1 )); '
        'while :; do '
        '  [ -d /proc/$4 ] || { echo "server exited" >&2; exit 3; }; '
        f'  cat /proc/net/{table} /proc/net/{table}6 2>/dev/null | '
        '  awk -v p=":$2" -v s="$3" \'toupper($2) ~ p"$" && $4 == s {f=1} END {exit !f}\' '
        '  && exit 0; '
        '  [ "$6" = once ] && exit 2; '
        '  [ "$(date +%s)" -le "$end" ] || break; '
        '  sleep 0.05; '
        'done; echo "nothing listens on port $5 after $1 s" >&2; exit 1'
    )


def _wait_listening(inst: Instance, port: int, proto: str, pid: int, timeout: float) -> None:
    """Wait until the server started as pid listens on port: seen in the instance's own /proc
    (natively, in containers and in a guest alike) or, for an instance on the host's network,
    as a socket of the instance's host processes in the host kernel's tables (host_listener)."""
    table, state = proto, _LISTEN_STATE[proto]
    argv = ["sh", "-c", _listening_script(table), "sh", str(max(1, int(timeout))),
            f"{port:04X}", state, str(pid), str(port)]
    if inst.facts().reach != Reach.HOST:
        done = inst.exec(argv, timeout + 30)
        if done.returncode != 0:
            raise SanityError(f"server did not start listening on {proto} port {port}: "
                              f"{(done.stderr or done.stdout).strip()[:200]}")
        return
    # The host's network: the environment's /proc/net may not list its own sockets (gVisor's
    # hostinet lists its AF_INET ones but has no tcp6/udp6 at all: its Sentry cannot see the
    # host's /proc/net/if_inet6 from its chroot, so iperf3's dual-stack socket is invisible
    # inside). Look inside once per round (that also tells whether the server still runs),
    # then at the host's tables.
    deadline = time.monotonic() + timeout
    while True:
        done = inst.exec([*argv, "once"], 60)
        if done.returncode == 0:
            return
        if done.returncode != 2:
            raise SanityError(f"server did not start listening on {proto} port {port}: "
                              f"{(done.stderr or done.stdout).strip()[:200]}")
        if host_listener(inst, port, proto) is not None:
            return
        if time.monotonic() > deadline:
            raise SanityError(
                f"server did not start listening on {proto} port {port}: nothing of the "
                f"environment listens on it after {timeout:.0f} s (neither its /proc/net nor "
                "the host kernel's tables of its host processes show one)")
        time.sleep(_POLL_S)


def listening_inodes(table: str, port: int, state: str) -> set[int]:
    """The inodes of the sockets bound to `port` in `state` (hex, "0A" = LISTEN) in the text
    of a /proc/net/{tcp,tcp6,udp,udp6} table. Pure."""
    out: set[int] = set()
    for line in table.splitlines()[1:]:
        f = line.split()
        if len(f) < 10 or ":" not in f[1] or not f[9].isdigit():
            continue
        if f[1].rsplit(":", 1)[1].upper() == f"{port:04X}" and f[3] == state and f[9] != "0":
            out.add(int(f[9]))
    return out


def socket_inodes(fd_links: Iterable[str]) -> set[int]:
    """The socket inodes among a process's fd link targets ("socket:[123]"). Pure."""
    return {int(t[8:-1]) for t in fd_links
            if t.startswith("socket:[") and t.endswith("]") and t[8:-1].isdigit()}


def _fd_links(pid: int) -> list[str]:
    out = []
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    for name in names:
        with contextlib.suppress(OSError):
            out.append(os.readlink(f"/proc/{pid}/fd/{name}"))
    return out


def host_listener(inst: Instance, port: int, proto: str = "tcp") -> int | None:
    """The host pid of the instance's process that holds a socket bound to port (LISTEN for
    tcp), as the host kernel sees it in that process's own network namespace; None if none.

    Only a socket the instance itself holds counts (its inode must be one of the fds of
    inst.host_pids() or their descendants), so a host service on the same port does not pass
    for the environment's server. It finds the sockets of environments whose sockets are host
    kernel sockets (native, containers; gVisor's hostinet: the Sentry holds them)."""
    state = _LISTEN_STATE[proto]
    listening: dict[int, set[int]] = {}  # network namespace inode -> listening socket inodes
    for pid in with_descendants(inst.host_pids(), process_parents()):
        held = socket_inodes(_fd_links(pid))
        if not held:
            continue
        try:
            netns = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            continue
        if netns not in listening:
            found: set[int] = set()
            for table in (proto, f"{proto}6"):
                with contextlib.suppress(OSError):
                    text = Path(f"/proc/{pid}/net/{table}").read_text()
                    found |= listening_inodes(text, port, state)
            listening[netns] = found
        if held & listening[netns]:
            return pid
    return None


def start_server(inst: Instance, argv: Sequence[str], port: int, proto: str = "tcp",
                 timeout: float = 30, program: str | None = None) -> int:
    """Start argv in the background inside inst (stdio to /dev/null, so the exec returns at
    once in every environment), wait until it listens on port; return its PID there."""
    cmd = f"{shlex.join(argv)} >/dev/null 2>&1 </dev/null & echo $!"
    done = inst.exec(["sh", "-c", cmd], timeout)
    try:
        done.check()
        pid = int(done.stdout.strip().splitlines()[-1])
    except (ExecError, ValueError, IndexError) as e:
        raise SanityError(f"could not start {argv[0]} in the environment: {e}") from e
    try:
        _wait_listening(inst, port, proto, pid, timeout)
    except BaseException:
        stop_server(inst, pid, program or argv[0])
        raise
    return pid


def stop_server(inst: Instance, pid: int, program: str, timeout: float = 10) -> None:
    """Stop the server by PID, only if that PID still runs `program` (a PID can be reused);
    TERM, then KILL after a grace period. Never raises: it runs in finally blocks."""
    comm = program.rsplit("/", 1)[-1][:15]
    script = (
        'alive() { [ "$(cat /proc/$1/comm 2>/dev/null)" = "$2" ] && '
        '! grep -q "^State:.*Z" /proc/$1/status 2>/dev/null; }; '
        'alive "$1" "$2" || exit 0; kill "$1" 2>/dev/null; '
        'for i in $(seq 1 40); do alive "$1" "$2" || exit 0; sleep 0.05; done; '
        'kill -9 "$1" 2>/dev/null; exit 0'
    )
    with contextlib.suppress(Exception):
        inst.exec(["sh", "-c", script, "sh", str(pid), comm], timeout)


@contextlib.contextmanager
def serving(inst: Instance, argv: Sequence[str], port: int, proto: str = "tcp",
            program: str | None = None, timeout: float = 30) -> Iterator[int]:
    """A server running inside inst for the duration of the block; always stopped. program:
    the server's name when argv starts with a wrapper that execs it (taskset); timeout: how
    long it may take to listen."""
    pid = start_server(inst, argv, port, proto, timeout=timeout, program=program)
    try:
        yield pid
    finally:
        stop_server(inst, pid, program or argv[0])


@contextlib.contextmanager
def serving_everywhere(inst: Instance, argv_for: Callable[[Instance], Sequence[str]],
                       port: int, proto: str = "tcp", program: str | None = None,
                       timeout: float = 30) -> Iterator[list[Instance]]:
    """serving() in inst and in every other endpoint behind its Service
    (protocols.ServiceEndpoints): a connection to the Service lands on any of them, and each
    must answer it. argv_for gives each its command (its own listen address). Yields where
    the servers run, inst first; every one is stopped."""
    where = [inst, *(inst.other_endpoints() if isinstance(inst, ServiceEndpoints) else ())]
    with contextlib.ExitStack() as stack:
        for one in where:
            stack.enter_context(serving(one, argv_for(one), port, proto, program, timeout))
        yield where


# -- where client and server run ----------------------------------------------------------

# On one host the client and the server share its CPUs, and where they run decides what an
# RR test measures: on this 2-vCPU Firecracker guest a wake-up on the other CPU costs ~60 µs
# (an IPI through the hypervisor) against ~6 µs on the same CPU, and an unpinned run flips
# between the two as the scheduler pleases. A placement makes it a choice of the plan:
#   free      no pinning (the kernel decides; what an unpinned benchmark gets)
#   same-cpu  client and server on CPU 0 (the cost of the path itself, no cross-CPU wake-up)
#   split     client on CPU 0, server on the environment's last CPU (two "machines")
PLACEMENTS = ("free", "same-cpu", "split")


def pinning(inst: Instance, placement: str) -> tuple[list[str], list[str]]:
    """(client prefix, server prefix) argv wrappers for a placement, on the CPUs the
    environment may use (its Cpus_allowed_list: a VM's vCPUs, a container's cpuset, which a
    static CPU manager may make CPU 1 alone): same-cpu puts both on its first, split the
    client on its first and the server on its last."""
    if placement == "free":
        return [], []
    if placement not in ("same-cpu", "split"):
        raise ValueError(f"placement {placement!r}: use one of {', '.join(PLACEMENTS)}")
    # gVisor's /proc/self/status has no Cpus_allowed_list: its CPUs are then 0..nproc-1.
    done = inst.exec(["sh", "-c", "grep '^Cpus_allowed_list:' /proc/self/status || echo "
                      "\"Cpus_allowed_list: 0-$(($(nproc) - 1))\""], 30)
    try:
        cpus = procfs.parse_cpulist(done.stdout.partition(":")[2].strip())
    except ValueError:
        cpus = []
    if not cpus:
        raise SanityError(f"the CPUs the environment may use: {done.stderr.strip()[:100]}")
    first = str(cpus[0])
    if placement == "same-cpu":
        return ["taskset", "-c", first], ["taskset", "-c", first]
    if len(cpus) < 2:
        # The server would share the client's CPU: that is same-cpu, mislabelled.
        raise NotApplicable(f"placement split needs 2 CPUs in the environment, it may use "
                            f"{len(cpus)}; use placement same-cpu, or give it vcpus >= 2")
    return ["taskset", "-c", first], ["taskset", "-c", str(cpus[-1])]
