"""Everything the local cluster made, removed: by `isotax cluster down` through its
supervisor, or by anyone once the supervisor is gone (a killed one: `isotax doctor --fix`).
Safe to run again. Processes are stopped by PID, and only those that run isotax's own
Kubernetes binaries or name this cluster's socket or runsc root; iptables chains only where
the host had no KUBE-/CNI- chain before `cluster up` (another Kubernetes's are never touched)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from isotax.host import command, network
from isotax.host.kubernetes import layout as L
from isotax.host.kubernetes import nodecgroups
from isotax.host.locks import exclusive
from isotax.host.processes import cmdlines, read_cmdline, zombie
from isotax.parsers import procfs

CHAIN_PREFIXES = ("KUBE-", "CNI-")
TABLES = ("filter", "nat", "mangle", "raw")


def our_processes(component: str | None = None) -> list[int]:
    """PIDs of this cluster's processes: a component (its binary under layout.BIN), or, with
    None, every one of them and what runs for it (a shim or a runsc naming our socket or
    root)."""
    marks = tuple(m for n in L.NODES for m in (str(n.containerd_socket), str(n.run / "runsc")))
    out = []
    for pid, args in cmdlines(skip_self=True):
        if not args:
            continue
        if component is not None:
            if args[0] == str(L.binary(component)):
                out.append(pid)
        elif args[0].startswith(str(L.BIN) + "/") or any(m in a for a in args for m in marks):
            out.append(pid)
    return out


def _stop(pids: Sequence[int], wait_s: float = 20.0) -> None:
    """SIGTERM, then SIGKILL whatever is left after wait_s; reaped if they are our children."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        if all(zombie(p) for p in pids):
            return
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)


def our_chains(save: str) -> list[str]:
    """The KUBE-/CNI- chains in `iptables-save -t TABLE` output. Pure."""
    return [line[1:].split()[0] for line in save.splitlines()
            if line.startswith(":") and line[1:].startswith(CHAIN_PREFIXES)]


def jumps_to_ours(save: str) -> list[list[str]]:
    """The rules of built-in chains that jump to a KUBE-/CNI- chain, as `-D` arguments. Pure."""
    out = []
    for line in save.splitlines():
        if not line.startswith("-A "):
            continue
        parts = shlex.split(line)  # comments are quoted, with spaces in them
        if (len(parts) > 3 and parts[0] == "-A" and parts[1].isupper()
                and not parts[1].startswith(CHAIN_PREFIXES) and "-j" in parts
                and parts[parts.index("-j") + 1].startswith(CHAIN_PREFIXES)):
            out.append(["-D", *parts[1:]])
    return out


def host_has_chains() -> bool:
    """Whether any table has a KUBE-/CNI- chain now (before up: another Kubernetes's)."""
    for tool in ("iptables", "ip6tables"):
        for table in TABLES:
            if our_chains(command.run([f"{tool}-save", "-t", table], 30).stdout):
                return True
    return False


def before() -> dict[str, object]:
    """What `cluster up` recorded of the host before it (layout.BEFORE); {} without it."""
    try:
        return dict(json.loads(L.BEFORE.read_text()))
    except (OSError, ValueError):
        return {}


def _remove_chains(problems: list[str]) -> None:
    kube_proxy = L.binary("kube-proxy")
    if kube_proxy.exists():
        command.run([str(kube_proxy), "--cleanup", "--v=0"], 60)
    for tool in ("iptables", "ip6tables"):
        for table in TABLES:
            save = command.run([f"{tool}-save", "-t", table], 30).stdout
            for rule in jumps_to_ours(save):
                command.run([tool, "-w", "10", "-t", table, *rule], 30)
            chains = our_chains(save)
            for chain in chains:
                command.run([tool, "-w", "10", "-t", table, "-F", chain], 30)
            for chain in chains:
                done = command.run([tool, "-w", "10", "-t", table, "-X", chain], 30)
                if done.returncode != 0:
                    problems.append(f"{tool} -t {table} -X {chain}: {done.stderr.strip()}")


def _unmount(problems: list[str]) -> None:
    points = [m.point for m in procfs.parse_mountinfo(Path("/proc/self/mountinfo").read_text())
              if m.point.startswith((f"{L.LIB}/", f"{L.RUN}/")) or m.point in (str(L.LIB),
                                                                              str(L.RUN))]
    for point in sorted(points, key=lambda p: -p.count("/")):
        if command.run(["umount", point], 30).returncode != 0 and \
                command.run(["umount", "-l", point], 30).returncode != 0:
            problems.append(f"mount {point}")


def _links(problems: list[str]) -> None:
    names = os.listdir("/sys/class/net")
    for dev in names:
        master = Path(f"/sys/class/net/{dev}/master")
        if dev.startswith("veth") and master.exists() and \
                os.path.basename(os.readlink(master)) == L.CNI_BRIDGE:
            command.run(["ip", "link", "del", dev], 30)
    for dev in (L.CNI_BRIDGE, L.NODE_LINK):
        if dev in names:
            command.run(["ip", "link", "del", dev], 30)
    w = L.WORKER
    for spec in worker_forward_rules(w):
        network.delete_tagged_rule(network.TaggedRule(
            "filter", "FORWARD", (*spec, "-m", "comment", "--comment", network.COMMENT)))
    # The second node's namespace: its veth pair, its bridge, its pods' links and its
    # iptables rules go with it.
    if Path(f"/run/netns/{w.netns}").exists():
        done = command.run(["ip", "netns", "del", w.netns], 30)
        if done.returncode != 0:
            problems.append(f"netns {w.netns}: {done.stderr.strip()}")
    if w.host_link in os.listdir("/sys/class/net"):
        command.run(["ip", "link", "del", w.host_link], 30)


def worker_forward_rules(n: L.NodeLayout) -> list[tuple[str, ...]]:
    """The FORWARD accepts between the host and a second node (before a DROP policy, such as
    dockerd's), as iptables arguments after `-I FORWARD`. Pure."""
    return [("-i", n.host_link, "-j", "ACCEPT"), ("-o", n.host_link, "-j", "ACCEPT")]


def _cgroups(problems: list[str]) -> None:
    """The kubelets' cgroup roots: their slices stopped under systemd, else removed."""
    nodecgroups.remove_roots(nodecgroups.host(), [n.cgroup_root for n in L.NODES], problems)


def _dirs(recorded: dict[str, object], problems: list[str]) -> None:
    containers = Path("/var/log/containers")
    if containers.is_dir():
        for link in containers.glob("*.log"):
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(f"{L.LIB}/"):
                    link.unlink()
    created = recorded.get("created", [])
    shutil.rmtree(L.LIB, ignore_errors=True)
    shutil.rmtree(L.RUN, ignore_errors=True)
    for d in created if isinstance(created, list) else []:
        p = Path(str(d))
        if not p.is_dir():
            continue
        # /run/containerd with a file in it is another containerd's (a private dockerd's).
        if any(f.is_file() or f.is_socket() for f in p.rglob("*")):
            problems.append(f"{p} kept: it holds files of another program")
            continue
        shutil.rmtree(p, ignore_errors=True)


def teardown() -> list[str]:
    """Remove the cluster; what could not be removed, one line each ([] when clean)."""
    problems: list[str] = []
    recorded = before()
    _stop(our_processes("kubelet"))
    crictl = L.binary("crictl")
    for n in L.NODES:
        crictl_yaml = n.etc / "crictl.yaml"
        if n.containerd_socket.exists() and crictl.exists() and crictl_yaml.exists():
            # Every pod sandbox through the CRI: CNI DEL removes its veth, address and
            # portmap rules, containerd its netns mount.
            command.run([str(crictl), "--config", str(crictl_yaml), "rmp", "--all", "--force"],
                        120)
    rest = our_processes()
    for name in ("kube-proxy", "containerd"):
        _stop(our_processes(name))
    # The shims and sandboxes containerd started, recorded before it stopped.
    _stop([p for p in rest if Path(f"/proc/{p}").exists()], wait_s=5)
    for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
        _stop(our_processes(name))
    left = our_processes()
    if left:
        _stop(left, wait_s=5)
    if recorded.get("chains") is False:
        _remove_chains(problems)
    _unmount(problems)
    _links(problems)
    _cgroups(problems)
    with exclusive(network.LOCK):
        network.restore_forwarding(L.CNI_BRIDGE)
    _dirs(recorded, problems)
    problems += [f"process {p}" for p in our_processes()]
    return problems


def present() -> list[str]:
    """What of the cluster is on this host, one short line each ([] when none)."""
    out = [f"directory {d}" for d in (L.LIB, L.RUN) if d.exists()]
    out += [f"link {dev}" for dev in (L.CNI_BRIDGE, L.NODE_LINK, L.WORKER.host_link)
            if Path(f"/sys/class/net/{dev}").exists()]
    if Path(f"/run/netns/{L.WORKER.netns}").exists():
        out.append(f"network namespace {L.WORKER.netns}")
    out += [f"process {pid} ({' '.join(read_cmdline(pid))[:80]})" for pid in our_processes()]
    if before().get("chains") is False and host_has_chains():
        out.append("iptables KUBE-/CNI- chains")
    out += nodecgroups.roots_present(nodecgroups.host(), [n.cgroup_root for n in L.NODES])
    return out
