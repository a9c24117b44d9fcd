"""The host fingerprint stored with every run: what a reader needs to trust or redo a result.

Besides the machine's identity (kernel, distribution, CPU model, memory, runtimes) it records
the settings that move benchmark results by themselves: SMT and topology, NUMA nodes, the
cpufreq governor and turbo, transparent hugepages and reserved hugepages, the CPU vulnerability
mitigations, the kernel command line, the cgroup layout, the block devices' I/O schedulers, the
uplink's MTU and offloads, the load when the run began and a virtualization hint.

Every piece is read by a small pure parser (text in, value out) and every reader takes a root
directory, so the tests run them on a captured /proc and /sys tree (tests/data/host/). Where a
file does not exist the value says why in words ("none: no cpufreq driver (a VM: ...)") instead
of guessing. `fingerprint_differences` names the differences that make two runs incomparable.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from isotax import protocols
from isotax.host import command
from isotax.host.facts.numa import nodes
from isotax.host.facts.parity import OFFLOADS, parse_ethtool_features
from isotax.parsers import procfs
from isotax.parsers.cpuinfo import parse_cpuinfo_first
from isotax.parsers.procfs import parse_cpulist
from isotax.version import __version__

# A command's output, or None where it could not run (not installed, or root is a capture).
Tool = Callable[[Sequence[str]], "str | None"]


def runtime_version_commands() -> dict[str, list[str]]:
    """How to ask each environment runtime its version, by runtime name, from what every
    registered kind declares (its version_command; kinds that share a runtime, such as the
    QEMU ones, share the name and are asked once)."""
    out: dict[str, list[str]] = {}
    for _, cls in sorted(protocols.environments().items()):
        v = cls.version_command()
        if v is not None:
            out.setdefault(v.name, list(v.argv))
    return out


def first_line(argv: Sequence[str]) -> str:
    """The first line a host command prints (stdout, else stderr), "not installed" where it
    is not, "unknown (...)" where it does not answer."""
    if shutil.which(argv[0]) is None:
        return "not installed"
    out = command.run(argv, 10)
    if out.returncode in (command.TIMED_OUT, command.NOT_FOUND):
        return f"unknown ({out.stderr.strip()})"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""


def run_tool(argv: Sequence[str]) -> str | None:
    """stdout of a host command whatever its exit status (systemd-detect-virt says "none" with
    status 1); None where it is not installed or does not answer."""
    if shutil.which(argv[0]) is None:
        return None
    out = command.run(argv, 10)
    if out.returncode in (command.TIMED_OUT, command.NOT_FOUND):
        return None
    return out.stdout or None


def _no_tool(argv: Sequence[str]) -> None:
    return None


def _read(root: Path, rel: str) -> str | None:
    try:
        return (root / rel).read_text()
    except (OSError, UnicodeDecodeError):
        return None


# --- pure parsers: text in, value out ------------------------------------------------------

def _field(text: str | None, prefix: str, sep: str) -> str | None:
    """The value of the first line of a /proc-style text that starts with prefix."""
    for line in (text or "").splitlines():
        if line.startswith(prefix):
            return line.split(sep, 1)[1].strip()
    return None


def _mem_total_bytes(meminfo: str | None) -> int | None:
    try:
        return procfs.parse_meminfo(meminfo or "").get("MemTotal")
    except ValueError:
        return None


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """/proc/cpuinfo -> model, processors, and whether the CPU says it runs under a hypervisor."""
    first = parse_cpuinfo_first(text)
    flags = first.get("flags", "").split()
    return {"model": first.get("model name") or "unknown",
            "processors": sum(1 for line in text.splitlines() if line.startswith("processor")),
            "hypervisor": "hypervisor" in flags}


def parse_topology(cpus: Iterable[tuple[str, str, str]]) -> dict[str, int]:
    """Per online CPU (physical_package_id, core_id, thread_siblings_list) -> sockets, cores
    (distinct package+core pairs), threads and the largest number of threads per core."""
    rows = [(p.strip(), c.strip(), s.strip()) for p, c, s in cpus]
    return {"sockets": len({p for p, _, _ in rows}),
            "cores": len({(p, c) for p, c, _ in rows}),
            "threads": len(rows),
            "threads_per_core": max((len(parse_cpulist(s)) for _, _, s in rows), default=0)}


def parse_smt(control: str | None, threads_per_core: int) -> str:
    """SMT state: the kernel's smt/control word where it has one, else the topology's view."""
    tpc = f"{threads_per_core} thread{'s' if threads_per_core != 1 else ''} per core"
    if control is not None and control.strip():
        word = control.strip()
        state = "on" if word == "on" else "off"
        return f"{state} (smt/control: {word}; {tpc})"
    return f"{'on' if threads_per_core > 1 else 'off'} (no smt/control file; {tpc})"


def parse_selected(text: str) -> str:
    """The bracketed choice of a sysfs selector: "always [madvise] never" -> "madvise"; the
    text itself where nothing is bracketed."""
    return procfs.parse_selected(text) or text.strip() or "unknown"


def summarize_per_cpu(values: Mapping[str, str]) -> str:
    """{cpu0: performance, cpu1: performance} -> "performance (all 2 CPUs)"; a mix is listed."""
    distinct = set(values.values())
    if len(distinct) == 1:
        return f"{distinct.pop()} (all {len(values)} CPUs)"
    return ", ".join(f"{cpu}={v}" for cpu, v in sorted(values.items(), key=lambda kv: _cpu_num(
        kv[0])))


def _cpu_num(name: str) -> int:
    digits = "".join(ch for ch in name if ch.isdigit())
    return int(digits) if digits else -1


def parse_turbo(no_turbo: str | None, boost: str | None, why_unknown: str) -> str:
    """intel_pstate/no_turbo (1: turbo off) or cpufreq/boost (1: on) -> "on"/"off" and source."""
    if no_turbo is not None and no_turbo.strip() in ("0", "1"):
        return ("off" if no_turbo.strip() == "1" else "on") + " (intel_pstate/no_turbo)"
    if boost is not None and boost.strip() in ("0", "1"):
        return ("on" if boost.strip() == "1" else "off") + " (cpufreq/boost)"
    return f"unknown: {why_unknown}"


def parse_cmdline(text: str) -> str:
    """/proc/cmdline without what follows " -- " (arguments to init, not to the kernel)."""
    return text.strip().split(" -- ", 1)[0].strip()


def parse_cgroup_mounts(text: str) -> str:
    """/proc/self/mounts -> "v2", "v1", or "hybrid" (v1 controllers plus a cgroup2 mount)."""
    v1, v2 = [], []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "cgroup":
            v1.append(parts[1])
        elif len(parts) >= 3 and parts[2] == "cgroup2":
            v2.append(parts[1])
    if v1 and v2:
        return f"hybrid (v1 controllers; cgroup2 at {', '.join(v2)})"
    if v2:
        return f"v2 (at {', '.join(v2)})"
    if v1:
        return "v1"
    return "none mounted"


def parse_default_route(text: str) -> str | None:
    """/proc/net/route -> the interface of the IPv4 default route with the lowest metric."""
    best: tuple[int, str] | None = None
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and f[1] == "00000000" and f[7] == "00000000":
            metric = int(f[6]) if f[6].isdigit() else 0
            if best is None or metric < best[0]:
                best = (metric, f[0])
    return best[1] if best else None


def parse_loadavg(text: str) -> list[float]:
    """/proc/loadavg -> the 1, 5 and 15 minute load averages."""
    return [float(x) for x in text.split()[:3]]


def virtualization(hypervisor_flag: bool, dmi: str | None, detect_vm: str | None,
                   detect_container: str | None) -> str:
    """One line from the clues: cpuinfo's hypervisor flag, DMI vendor/product,
    systemd-detect-virt --vm / --container (None: not run)."""
    vm = (detect_vm or "").strip()
    ct = (detect_container or "").strip()
    is_vm = hypervisor_flag or vm not in ("", "none")
    clues = ["cpuinfo hypervisor flag" if hypervisor_flag else "no cpuinfo hypervisor flag",
             f"DMI: {dmi}" if dmi else "no DMI tables (/sys/class/dmi/id missing)"]
    if detect_vm is None:
        clues.append("systemd-detect-virt not available")
    else:
        clues.append(f"systemd-detect-virt: vm {vm or 'none'}, container {ct or 'none'}")
    # No clue is not proof of bare metal (a hypervisor can hide its flag): say only what was seen.
    head = f"VM ({vm})" if vm not in ("", "none") else ("VM" if is_vm else "no sign of a VM")
    return f"{head}: " + "; ".join(clues)


# --- readers: a root directory in, a value (or the reason there is none) out ---------------

def _cpu_dirs(root: Path) -> list[Path]:
    base = root / "sys/devices/system/cpu"
    online = _read(root, "sys/devices/system/cpu/online")
    if online is not None:
        return [base / f"cpu{n}" for n in parse_cpulist(online)]
    return sorted(base.glob("cpu[0-9]*"), key=lambda p: _cpu_num(p.name))


def read_topology(root: Path) -> dict[str, Any]:
    rows = []
    for d in _cpu_dirs(root):
        t = [_read(d, f"topology/{f}") for f in
             ("physical_package_id", "core_id", "thread_siblings_list")]
        if all(x is not None for x in t):
            rows.append((t[0] or "", t[1] or "", t[2] or ""))
    topo: dict[str, Any] = parse_topology(rows) if rows else {
        "sockets": 0, "cores": 0, "threads": len(_cpu_dirs(root)), "threads_per_core": 0}
    topo["smt"] = parse_smt(_read(root, "sys/devices/system/cpu/smt/control"),
                            topo.pop("threads_per_core"))
    return topo


def read_governor(root: Path, vm: bool) -> str:
    per_cpu = {d.name: g.strip() for d in _cpu_dirs(root)
               if (g := _read(d, "cpufreq/scaling_governor")) is not None}
    if per_cpu:
        return summarize_per_cpu(per_cpu)
    why = "no cpufreq driver"
    return f"none: {why} (a VM: the hypervisor sets the frequency)" if vm else \
        f"none: {why} loaded (load intel_pstate or acpi-cpufreq to set a governor)"


def read_turbo(root: Path, vm: bool) -> str:
    why = "no intel_pstate/no_turbo or cpufreq/boost"
    return parse_turbo(_read(root, "sys/devices/system/cpu/intel_pstate/no_turbo"),
                       _read(root, "sys/devices/system/cpu/cpufreq/boost"),
                       why + (" (a VM: the host decides)" if vm else ""))


def read_thp(root: Path, which: str) -> str:
    text = _read(root, f"sys/kernel/mm/transparent_hugepage/{which}")
    if text is None:
        return "unknown: no /sys/kernel/mm/transparent_hugepage (kernel without THP)"
    return parse_selected(text)


def read_hugepages(root: Path, counter: str) -> dict[str, int]:
    """{page size: count} of nr_hugepages (reserved) or free_hugepages, e.g. {"2048kB": 0}."""
    out = {}
    for d in sorted((root / "sys/kernel/mm/hugepages").glob("hugepages-*")):
        text = _read(d, counter)
        if text is not None and text.strip().isdigit():
            out[d.name.removeprefix("hugepages-")] = int(text)
    return out


def read_mitigations(root: Path) -> dict[str, str] | str:
    d = root / "sys/devices/system/cpu/vulnerabilities"
    found = {f.name: (_read(d, f.name) or "").strip() for f in sorted(d.glob("*"))}
    return found or "unknown: no /sys/devices/system/cpu/vulnerabilities (kernel too old)"


def read_schedulers(root: Path) -> dict[str, str]:
    """Block device -> its I/O scheduler; "none (no scheduler file)" for bio-based devices
    such as zram, which bypass the block layer's schedulers."""
    out = {}
    for d in sorted((root / "sys/block").glob("*"), key=lambda p: (p.name.rstrip("0123456789"),
                                                                    _cpu_num(p.name))):
        text = _read(d, "queue/scheduler")
        out[d.name] = parse_selected(text) if text is not None else "none (no scheduler file)"
    return out


def read_uplink(root: Path, tool: Tool) -> dict[str, Any]:
    """The interface of the default route, its MTU and the offloads that parity
    (isotax.host.facts.parity) compares."""
    route = _read(root, "proc/net/route")
    dev = parse_default_route(route) if route is not None else None
    if dev is None:
        return {"iface": None, "mtu": None, "offloads": "none: no IPv4 default route"}
    mtu = _read(root, f"sys/class/net/{dev}/mtu")
    ethtool = tool(["ethtool", "-k", dev])
    if ethtool is None:
        offloads: dict[str, str] | str = "unknown: ethtool not available (apt-get install ethtool)"
    else:
        features = parse_ethtool_features(ethtool)
        offloads = {k: features[k] for k in OFFLOADS if k in features}
    return {"iface": dev, "mtu": int(mtu) if mtu and mtu.strip().isdigit() else None,
            "offloads": offloads}


def read_virtualization(root: Path, hypervisor_flag: bool, tool: Tool) -> str:
    dmi = " ".join(v.strip() for f in ("sys_vendor", "product_name")
                   if (v := _read(root, f"sys/class/dmi/id/{f}")) and v.strip())
    return virtualization(hypervisor_flag, dmi or None, tool(["systemd-detect-virt", "--vm"]),
                          tool(["systemd-detect-virt", "--container"]))


def fingerprint(root: str | Path = "/", tool: Tool | None = None) -> dict[str, Any]:
    """The host fingerprint. root: the tree to read /proc and /sys from (a capture in tests);
    tool: runs ethtool and systemd-detect-virt (default: the real ones for root "/", none for
    a captured tree)."""
    r = Path(root)
    live = r == Path("/")
    run: Tool = tool or (run_tool if live else _no_tool)
    cpuinfo = parse_cpuinfo(_read(r, "proc/cpuinfo") or "")
    virt = read_virtualization(r, cpuinfo["hypervisor"], run)
    vm = virt.startswith("VM")
    mem = _mem_total_bytes(_read(r, "proc/meminfo"))
    distro = _field(_read(r, "etc/os-release"), "PRETTY_NAME=", "=")
    online = _read(r, "sys/devices/system/cpu/online")
    numa = nodes(r / "sys/devices/system/node")
    mounts = _read(r, "proc/self/mounts")
    cmdline = _read(r, "proc/cmdline")
    loadavg = _read(r, "proc/loadavg")
    return {
        "hostname": (_read(r, "proc/sys/kernel/hostname") or "").strip()
        or (socket.gethostname() if live else "unknown"),
        "kernel": (_read(r, "proc/sys/kernel/osrelease") or "").strip()
        or (platform.release() if live else "unknown"),
        "distro": distro.strip('"') if distro else "unknown",
        "cpu_model": cpuinfo["model"] if cpuinfo["model"] != "unknown"
        else (live and platform.processor()) or "unknown",
        "cpus": len(parse_cpulist(online)) if online else (os.cpu_count() or 0),
        "memory_mib": mem // (1024 * 1024) if mem else 0,
        "cgroup": "v2" if (r / "sys/fs/cgroup/cgroup.controllers").exists() else "v1",
        # What manages the cgroup tree: systemd as PID 1 (users' hosts: the runtimes, the
        # kubelet and Podman then use its cgroup driver) or another init (this development VM).
        "init": (_read(r, "proc/1/comm") or "unknown").strip() or "unknown",
        "numa_nodes": len(numa) or 1,
        "python": sys.version.split()[0],
        "isotax": __version__,
        "runtimes": {k: first_line(v) for k, v in runtime_version_commands().items()} if live
        else {k: "not recorded (captured tree)" for k in runtime_version_commands()},
        **read_topology(r),
        "numa_cpus": {str(n): ",".join(map(str, cpus)) for n, cpus in numa.items()},
        "governor": read_governor(r, vm),
        "turbo": read_turbo(r, vm),
        "thp_enabled": read_thp(r, "enabled"),
        "thp_defrag": read_thp(r, "defrag"),
        "hugepages": read_hugepages(r, "nr_hugepages"),
        "hugepages_free": read_hugepages(r, "free_hugepages"),
        "mitigations": read_mitigations(r),
        "kernel_version": (_read(r, "proc/version") or "unknown").strip(),
        "cmdline": parse_cmdline(cmdline) if cmdline is not None else "unknown",
        "cgroup_mode": parse_cgroup_mounts(mounts) if mounts is not None else "unknown",
        "io_schedulers": read_schedulers(r),
        "uplink": read_uplink(r, run),
        "loadavg": parse_loadavg(loadavg) if loadavg else None,
        "virtualization": virt,
    }


# --- comparing and showing ------------------------------------------------------------------

# Keys whose difference makes two runs' numbers incomparable, with the words for them. The load
# average and free hugepages change from minute to minute and do not count.
COMPARED = (("cpu_model", "CPU model"), ("smt", "SMT"), ("numa_nodes", "NUMA nodes"),
            ("governor", "governor"), ("turbo", "turbo"), ("thp_enabled", "THP enabled"),
            ("thp_defrag", "THP defrag"), ("mitigations", "mitigation"), ("kernel", "kernel"),
            ("cgroup", "cgroup version"), ("cgroup_mode", "cgroup layout"),
            ("hugepages", "hugepages"))
_MISSING = object()


def _show(v: object) -> str:
    if v is _MISSING:
        return "not recorded"
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def fingerprint_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """One line per difference between two fingerprints that matters for comparing their runs,
    "<what>: <a's value> vs <b's value>"; [] when they are comparable. A key only one of them
    recorded (an older run) is a difference: nothing vouches that it was equal."""
    out = []
    for key, label in COMPARED:
        va, vb = a.get(key, _MISSING), b.get(key, _MISSING)
        if va is _MISSING and vb is _MISSING:
            continue
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            for k in sorted(set(va) | set(vb)):
                ka, kb = va.get(k, _MISSING), vb.get(k, _MISSING)
                if ka != kb:
                    out.append(f"{label} {k}: {_show(ka)} vs {_show(kb)}")
        elif va != vb:
            out.append(f"{label}: {_show(va)} vs {_show(vb)}")
    return out


def _grouped(d: Mapping[str, Any]) -> str:
    """{vda: mq-deadline, loop0: none, loop1: none} -> "mq-deadline: vda; none: loop0, loop1"."""
    groups: dict[str, list[str]] = {}
    for k, v in d.items():
        groups.setdefault(str(v), []).append(k)
    return "; ".join(f"{v}: {', '.join(ks)}" for v, ks in groups.items())


def show_rows(fp: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The fingerprint as (what, value) rows for `isotax system show`."""
    up = fp.get("uplink") or {}
    offloads = up.get("offloads")
    loadavg = fp.get("loadavg")
    free = fp.get("hugepages_free") or {}
    rows = [
        ("host", f"{fp.get('hostname')} ({fp.get('distro')})"),
        ("virtualization", str(fp.get("virtualization"))),
        ("CPU model", str(fp.get("cpu_model"))),
        ("topology", f"{fp.get('sockets')} socket(s), {fp.get('cores')} core(s), "
                     f"{fp.get('threads')} thread(s); {fp.get('cpus')} CPUs online"),
        ("SMT", str(fp.get("smt"))),
        ("NUMA nodes", f"{fp.get('numa_nodes')}: " + "; ".join(
            f"node{n} CPUs {c}" for n, c in (fp.get("numa_cpus") or {}).items())),
        ("memory", f"{fp.get('memory_mib')} MiB"),
        ("governor", str(fp.get("governor"))),
        ("turbo", str(fp.get("turbo"))),
        ("THP", f"enabled {fp.get('thp_enabled')}, defrag {fp.get('thp_defrag')}"),
        ("hugepages", ", ".join(f"{size}: {n} reserved, {free.get(size, '?')} free"
                                for size, n in (fp.get("hugepages") or {}).items()) or "none"),
    ]
    mit = fp.get("mitigations")
    if isinstance(mit, Mapping):
        # The vulnerable first, then each mitigation in use, then the rest in one line.
        state = {k: str(v).split(":")[0] for k, v in mit.items()}
        rows += [("vulnerable", ", ".join(k for k, s in state.items() if s == "Vulnerable")
                  or "none")]
        rows += [(f"mitigation: {k}", str(v).partition(": ")[2]) for k, v in mit.items()
                 if state[k] == "Mitigation"]
        rows += [("not affected", ", ".join(k for k, s in state.items()
                                            if s == "Not affected") or "none")]
        rows += [(f"vulnerability: {k}", str(v)) for k, v in mit.items()
                 if state[k] not in ("Vulnerable", "Mitigation", "Not affected")]
    else:
        rows.append(("mitigations", str(mit)))
    rows += [
        ("kernel", f"{fp.get('kernel')}"),
        ("cmdline", str(fp.get("cmdline"))),
        ("cgroups", f"{fp.get('cgroup')}: {fp.get('cgroup_mode')}"),
        ("init", str(fp.get("init", "not recorded"))),
        ("I/O schedulers", _grouped(fp.get("io_schedulers") or {})),
        ("uplink", f"{up.get('iface')}, MTU {up.get('mtu')}" if up.get("iface") else "none"),
        ("offloads", ", ".join(f"{k} {v}" for k, v in offloads.items())
         if isinstance(offloads, Mapping) else str(offloads)),
        ("load average", " ".join(f"{x:.2f}" for x in loadavg) + " (1, 5, 15 min)"
         if loadavg else "unknown"),
        ("runtimes", "; ".join(f"{k}: {v}" for k, v in (fp.get("runtimes") or {}).items())),
        ("python / isotax", f"{fp.get('python')} / {fp.get('isotax')}"),
    ]
    return rows
