"""Find resources isotax created and did not remove: used by the test suite and `isotax doctor`.

Everything isotax creates is named `itx...` (iptables rules carry the comment `isotax`), so a
leftover is recognisable without any record of what was created. Each finding is one line that
says what it is and how to remove it.

What the host shares between kinds (network namespaces, links, iptables rules with isotax's
comment, mounts, cgroups, servers, sysctl) is found here; what a kind's own instances leave
(containers in a runtime's state, VMs, engines' containers and daemons) is found by the leak
finders each environment kind declares (its `leak_finders`), asked through the registry.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path

from isotax import protocols
from isotax.host import command, owners
from isotax.host.network import COMMENT, FORWARDING_LINKS, IP_FORWARD_SAVED
from isotax.host.processes import cmdlines, kill_and_reap, process_leftover, thaw
from isotax.loadgen.pod import leaked_namespaces as leaked_loadgen_pods
from isotax.loadgen.ssh import leaked_connections
from isotax.parsers import procfs
from isotax.protocols import Leftover, Stage

IPTABLES_TABLES = ("filter", "nat", "mangle", "raw", "security")


def _run(argv: list[str]) -> str:
    p = command.run(argv, 20)
    return p.stdout if p.returncode == 0 else ""


def leaked_netns() -> list[Leftover]:
    d = Path("/run/netns")
    names = sorted(p.name for p in d.iterdir()) if d.is_dir() else []
    return [Leftover(f"netns {n}", [("ip", "netns", "del", n)], stage=Stage.NETNS)
            for n in names if n.startswith("itx")]


def leaked_links() -> list[Leftover]:
    return [Leftover(f"link {dev}", [("ip", "link", "del", dev)], stage=Stage.LINK)
            for dev in sorted(os.listdir("/sys/class/net")) if dev.startswith("itx")]


def parse_iptables_save_rules(text: str, table: str) -> list[Leftover]:
    """Rules of `iptables -t TABLE -S` output that carry isotax's comment, each removed by its
    delete command."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0] != "-A":
            continue
        # iptables prints the comment bare (--comment isotax) or quoted ("isotax ...").
        if "--comment" in parts:
            c = parts[parts.index("--comment") + 1].strip('"')
            if c == COMMENT:
                out.append(Leftover("iptables rule", [
                    ("iptables", "-w", "10", "-t", table, "-D", *shlex.split(line)[1:])],
                    how=f"iptables -t {table} -D {line[3:]}", stage=Stage.RULE,
                    names=(line,)))
    return out


def leaked_iptables_rules() -> list[Leftover]:
    if shutil.which("iptables") is None:
        return []
    out = []
    for table in IPTABLES_TABLES:
        out += parse_iptables_save_rules(_run(["iptables", "-w", "10", "-t", table, "-S"]),
                                         table)
    return out


def parse_mountinfo(text: str) -> list[str]:
    """Mount points from /proc/*/mountinfo text whose path mentions /itx- or isotax."""
    return [m.point for m in procfs.parse_mountinfo(text)
            if "/itx-" in m.point or "isotax" in m.point]


def leaked_mounts() -> list[Leftover]:
    netns_dir = "/run/netns/"
    points = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    # A named netns is a bind mount of nsfs; it is reported once, as a netns. Deepest first,
    # so a mount on top of another goes before it.
    return [Leftover(f"mount {p}", [("umount", p)], stage=Stage.MOUNT)
            for p in sorted(points, key=lambda p: -p.count("/"))
            if not (p.startswith(netns_dir) and "/" not in p[len(netns_dir):])]


def leaked_cgroups() -> list[Leftover]:
    base = Path("/sys/fs/cgroup")
    found = set()
    for pattern in ("*/itx-*", "*/*/itx-*", "itx-*", "unified/itx-*"):
        for p in base.glob(pattern):
            if p.is_dir():
                found.add(str(p))
    # Children before parents (a sorted list, reversed).
    return [Leftover(f"cgroup {p}", [("rmdir", p)], stage=Stage.CGROUP,
                     how=f"rmdir {p}, after thawing it and killing its tasks",
                     removal=functools.partial(remove_cgroup, Path(p)))
            for p in sorted(found, reverse=True)]


def remove_cgroup(path: Path) -> None:
    """Thaw a leftover cgroup, kill what still runs in it, and remove it (a cgroup with tasks
    cannot be removed, and a frozen task does not die until thawed)."""
    thaw(path)
    with contextlib.suppress(OSError):
        for pid in (path / "cgroup.procs").read_text().split():
            kill_and_reap(int(pid))
    path.rmdir()


def is_our_server(args: list[str]) -> bool:
    """A network workload's server (the program of a Port a registered workload declares:
    iperf3, netserver, ...) on one of those ports: natively it runs on the host, where
    nothing else would stop it. redis-server rewrites its command line to one word list like
    "redis-server 0.0.0.0:46379", so the words are split again and a port may come as
    ADDRESS:PORT, or as an option's value (mariadbd --port=43306)."""
    return _ServerMatcher()(args)


class _ServerMatcher:
    """The registered workloads' server programs and ports, gathered once for a walk over
    every host process."""

    def __init__(self) -> None:
        declared = protocols.workload_ports()
        self.ports = {str(p.number) for p in declared}
        self.servers = {p.server for p in declared if p.server}

    def __call__(self, args: list[str]) -> bool:
        words = " ".join(args).split()
        return bool(words) and os.path.basename(words[0]) in self.servers and any(
            w.rsplit(":", 1)[-1].rsplit("=", 1)[-1] in self.ports for w in words[1:])


def _host_processes(skip_self: bool = False) -> Iterator[tuple[int, list[str]]]:
    """(pid, argv) of the processes in this PID namespace: what is inside containers and VMs
    goes with them, only the host's own count."""
    own_pidns = os.readlink("/proc/self/ns/pid")
    for pid, args in cmdlines(skip_self=skip_self):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == own_pidns:
                yield pid, args
        except OSError:
            continue  # gone meanwhile


def leaked_servers() -> list[Leftover]:
    ours = _ServerMatcher()
    return [process_leftover(pid, args, "server process")
            for pid, args in _host_processes() if ours(args)]


# Where isotax keeps a run's scratch files: the run's workdir (VM overlays and data disks,
# bundles, logs), the native environment's tmpfs scratch, and the temporary files of a cell
# (perf's control FIFOs, a client's log on the local load generator, an unpacked bundle).
SCRATCH_DIRS = (Path("/var/tmp"), Path("/dev/shm"), Path("/tmp"))


def leaked_scratch() -> list[Leftover]:
    """Scratch directories and files of runs, instances and cells that ended without removing
    them (a killed run's workdir holds its VMs' disks: gigabytes). Removed without crossing
    into another filesystem: a mount left inside is a leftover of its own, removed before."""
    return [Leftover(f"{'directory' if d.is_dir() else 'file'} {d}",
                     [("rm", "-rf", "--one-file-system", str(d))])
            for base in SCRATCH_DIRS if base.is_dir()
            for d in sorted(base.glob("itx-*")) if d.is_dir() or d.is_file()]


def leaked_owned_processes(known: set[int]) -> list[Leftover]:
    """Host processes whose environment names an isotax owner (ISOTAX_OWNER: everything
    isotax starts inherits it) that no other finder reported (`known`): a helper such as a
    system-wide perf stat, left by a process that ended without stopping it. This process
    and processes in other PID namespaces (a container's go with it) are left out."""
    return [process_leftover(pid, args, "isotax process")
            for pid, args in _host_processes(skip_self=True)
            if pid not in known and owners.owner_of_process(pid) is not None]


def leaked_sysctl() -> list[Leftover]:
    """The forwarding sysctl an isotax bridge turned on, once no isotax bridge is left to
    restore it (the last one that goes does)."""
    if IP_FORWARD_SAVED.exists() and not any(d.startswith(FORWARDING_LINKS)
                                             for d in os.listdir("/sys/class/net")):
        value = IP_FORWARD_SAVED.read_text().strip()
        return [Leftover("net.ipv4.ip_forward changed by isotax", [
            ("sysctl", "-w", f"net.ipv4.ip_forward={value}"), ("rm", str(IP_FORWARD_SAVED))],
            how=f"restore: sysctl net.ipv4.ip_forward={value}; rm {IP_FORWARD_SAVED}",
            stage=Stage.SETTING, anyone=True)]
    return []


def leaked_cluster() -> list[Leftover]:
    """What the local Kubernetes cluster left once its supervisor is gone (killed, or the
    host's isotax upgraded under it): removed whole, in its own order
    (isotax.host.kubernetes.teardown), before the other finders' pieces of it. Nothing while
    its supervisor lives: `isotax cluster down` stops it."""
    from isotax.host.kubernetes import cluster, nodecgroups, teardown
    from isotax.host.kubernetes import layout as kube

    if cluster.supervisor_pid() is not None:
        return []
    left = teardown.present()
    if not left:
        return []
    return [Leftover(f"Kubernetes cluster of a dead `isotax cluster` supervisor "
                     f"({'; '.join(left[:3])}{'; ...' if len(left) > 3 else ''})",
                     how="isotax cluster down", stage=Stage.CONTAINER,
                     names=(kube.CGROUP_ROOT, kube.CNI_BRIDGE, kube.NODE_LINK,
                            kube.WORKER.netns, kube.WORKER.host_link,
                            kube.WORKER.cgroup_root,
                            *(nodecgroups.root_unit(n.cgroup_root) for n in kube.NODES)),
                     removal=_remove_cluster)]


def _remove_cluster() -> None:
    from isotax.host.kubernetes import teardown

    left = teardown.teardown()
    if left:
        raise OSError(f"the cluster's teardown left: {'; '.join(left)}")


def environment_leaks() -> list[Leftover]:
    """What every registered environment kind's leak finders find, each finder asked once
    however many kinds declare it (qemu, microvm and vm9p share theirs; docker and podman
    the engines' iptables finder)."""
    finders: dict[protocols.LeakFinder, None] = {}
    for _, cls in sorted(protocols.environments().items()):
        finders.update(dict.fromkeys(cls.leak_finders))
    return [line for find in finders for line in find()]


def find_leaks() -> list[Leftover]:
    """Every isotax-created resource still present, one Leftover (a line) each; empty when
    clean."""
    found = (leaked_netns() + leaked_links() + leaked_iptables_rules() + leaked_mounts()
             + leaked_cgroups() + leaked_servers() + leaked_scratch() + leaked_sysctl()
             + leaked_connections() + leaked_loadgen_pods() + leaked_cluster()
             + environment_leaks())
    return found + leaked_owned_processes({x.pid for x in found if x.pid is not None})
