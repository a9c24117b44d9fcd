"""Find resources isotax created and did not remove: used by the test suite and `isotax doctor`.

Everything isotax creates is named `itx...` (iptables rules carry the comment `isotax`), so a
leftover is recognisable without any record of what was created. Each finding is one line that
says what it is and how to remove it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from isotax.environments.oci.runtime import OCI_STATE_ROOT
from isotax.host.network import COMMENT, IP_FORWARD_SAVED

OCI_RUNTIMES = ("runc", "crun", "runsc")
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw", "security")


def _run(argv: list[str]) -> str:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return p.stdout if p.returncode == 0 else ""


def leaked_netns() -> list[str]:
    d = Path("/run/netns")
    names = sorted(p.name for p in d.iterdir()) if d.is_dir() else []
    return [f"netns {n} (ip netns del {n})" for n in names if n.startswith("itx")]


def leaked_links() -> list[str]:
    out = []
    for dev in sorted(os.listdir("/sys/class/net")):
        if dev.startswith("itx"):
            out.append(f"link {dev} (ip link del {dev})")
    return out


def parse_iptables_save_rules(text: str, table: str) -> list[str]:
    """Rules of `iptables -t TABLE -S` output that carry isotax's comment, as delete commands."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0] != "-A":
            continue
        # iptables prints the comment bare (--comment isotax) or quoted ("isotax ...").
        if "--comment" in parts:
            c = parts[parts.index("--comment") + 1].strip('"')
            if c == COMMENT:
                out.append(f"iptables rule (iptables -t {table} -D {line[3:]})")
    return out


def leaked_iptables_rules() -> list[str]:
    if shutil.which("iptables") is None:
        return []
    out = []
    for table in IPTABLES_TABLES:
        out += parse_iptables_save_rules(_run(["iptables", "-w", "10", "-t", table, "-S"]),
                                         table)
    return out


def parse_mountinfo(text: str) -> list[str]:
    """Mount points from /proc/*/mountinfo text whose path mentions /itx- or isotax."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        # mountinfo escapes spaces etc. as octal; unescape for display only.
        point = fields[4].encode().decode("unicode_escape")
        if "/itx-" in point or "isotax" in point:
            out.append(point)
    return out


def leaked_mounts() -> list[str]:
    netns_dir = "/run/netns/"
    points = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    # A named netns is a bind mount of nsfs; it is reported once, as a netns.
    return [f"mount {p} (umount {p})" for p in points
            if not (p.startswith(netns_dir) and "/" not in p[len(netns_dir):])]


def leaked_containers() -> list[str]:
    out = []
    for rt in OCI_RUNTIMES:
        root = OCI_STATE_ROOT / rt
        if not root.is_dir():
            continue
        # Each container has a directory in the runtime's state root (runsc: a
        # `<container>_sandbox:<sandbox>.state` file); reading the directory works even when
        # the runtime binary is broken or gone.
        for d in runtime_state_containers(sorted(root.iterdir())):
            out.append(f"{rt} container {d} ({rt} --root {root} delete --force {d})")
    return out


def runtime_state_containers(entries: list[Path]) -> list[str]:
    """Container ids in an OCI runtime's --root: runc's and crun's directories, runsc's state
    files (a runsc root also holds `.lock` files, and may hold a pinned `null-netns`)."""
    out = []
    for p in entries:
        if p.name.endswith(".state") and "_sandbox:" in p.name:
            out.append(p.name.split("_sandbox:", 1)[0])
        elif p.is_dir():
            out.append(p.name)
    return out


def leaked_cgroups() -> list[str]:
    base = Path("/sys/fs/cgroup")
    found = set()
    for pattern in ("*/itx-*", "*/*/itx-*", "itx-*", "unified/itx-*"):
        for p in base.glob(pattern):
            if p.is_dir():
                found.add(str(p))
    return [f"cgroup {p} (rmdir {p})" for p in sorted(found)]


def leaked_processes() -> list[str]:
    out = []
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        if not args:
            continue
        prog = os.path.basename(args[0])
        # The native environment's holding process (a container's PID 1 shows up here too,
        # beside its container).
        held = prog == "itx-ready" and "--hold" in args[1:]
        # runsc's own processes are runsc-sandbox (the Sentry) and runsc-gofer.
        runtime = prog in OCI_RUNTIMES or prog.startswith("runsc-")
        # virtiofsd: a vm9p share's daemon (its socket is /run/isotax/itx-vfs-*).
        vmm = prog.startswith("qemu-system") or prog == "virtiofsd"
        # The system container's nspawn (its machine is itx-*).
        runtime = runtime or prog == "systemd-nspawn"
        if held or ((vmm or runtime) and \
                any("itx-" in a for a in args[1:])):
            out.append(f"process {pid} {' '.join(args)[:120]} (kill {pid})")
    return out


def is_our_server(args: list[str]) -> bool:
    """A network workload's server (iperf3, netserver, sockperf, redis-server, mariadbd) on
    one of isotax's ports: natively it runs on the host, where nothing else would stop it.
    Pure. redis-server rewrites its command line to one word list like "redis-server
    0.0.0.0:46379", so the words are split again and a port may come as ADDRESS:PORT, or as
    an option's value (mariadbd --port=43306)."""
    from isotax.loadgen.local import PORTS, SERVER_PROGRAMS

    words = " ".join(args).split()
    if not words:
        return False
    ports = {str(p) for p in PORTS.values()}
    return os.path.basename(words[0]) in SERVER_PROGRAMS and any(
        w.rsplit(":", 1)[-1].rsplit("=", 1)[-1] in ports for w in words[1:])


def leaked_servers() -> list[str]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            # Servers inside containers and VMs go with them; only the host's own count.
            if os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid"):
                continue
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        if is_our_server(args):
            out.append(f"server process {pid} {' '.join(args)[:100]} (kill {pid})")
    return out


def leaked_sysctl() -> list[str]:
    if IP_FORWARD_SAVED.exists():
        return [f"net.ipv4.ip_forward changed by isotax (restore: sysctl net.ipv4.ip_forward="
                f"{IP_FORWARD_SAVED.read_text().strip()}; rm {IP_FORWARD_SAVED})"]
    return []


def leaked_hugepages() -> list[str]:
    """vm.nr_hugepages raised for a VM (qemu hugepages knob) and never lowered."""
    from isotax.environments.vm.qemu_tuning import leaked_hugepage_reservations

    return leaked_hugepage_reservations()


def leaked_engines() -> list[str]:
    """Docker's and Podman's: isotax-labelled containers and volumes, a private dockerd still
    running or its directories and cgroups, Podman's CNI networks, and rules an engine made
    for an isotax bridge (they lack isotax's comment)."""
    from isotax.environments.engines.docker import docker_leaks
    from isotax.environments.engines.engine import engine_iptables_leaks
    from isotax.environments.engines.podman import podman_leaks

    return docker_leaks() + podman_leaks() + engine_iptables_leaks()


def find_leaks() -> list[str]:
    """Every isotax-created resource still present, one line each; empty when clean."""
    return (leaked_netns() + leaked_links() + leaked_iptables_rules() + leaked_mounts()
            + leaked_containers() + leaked_cgroups() + leaked_processes() + leaked_servers()
            + leaked_sysctl() + leaked_hugepages() + leaked_engines())
