"""Host fingerprint: parsers on real /proc and /sys captures (tests/data/host), the reasons
given where a file is missing, fingerprint_differences and `isotax system show`."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path

from click.testing import CliRunner
from support import DATA

from isotax.cli import main
from isotax.host.facts.fingerprint import (
    fingerprint,
    fingerprint_differences,
    parse_cgroup_mounts,
    parse_cmdline,
    parse_cpuinfo,
    parse_default_route,
    parse_loadavg,
    parse_selected,
    parse_smt,
    parse_turbo,
    read_governor,
    read_hugepages,
    read_mitigations,
    read_schedulers,
    read_thp,
    read_topology,
    read_turbo,
    read_uplink,
    read_virtualization,
    show_rows,
    summarize_per_cpu,
)

HOST = DATA / "host" / "this-host"
TOOLS = {("ethtool", "-k", "eth0"): "ethtool-k-eth0.txt",
         ("systemd-detect-virt", "--vm"): "systemd-detect-virt-vm.txt",
         ("systemd-detect-virt", "--container"): "systemd-detect-virt-container.txt"}
# The keys the runner and the markdown report read: they must stay.
OLD_KEYS = {"hostname", "kernel", "distro", "cpu_model", "cpus", "memory_mib", "cgroup",
            "numa_nodes", "python", "isotax", "runtimes"}
NEW_KEYS = {"sockets", "cores", "threads", "smt", "numa_cpus", "governor", "turbo",
            "thp_enabled", "thp_defrag", "hugepages", "hugepages_free", "mitigations",
            "kernel_version", "cmdline", "cgroup_mode", "io_schedulers", "uplink", "loadavg",
            "virtualization", "init"}


def captured_tool(argv: Sequence[str]) -> str | None:
    """The captured output of the tools this host ran (None: never captured, like a tool
    that is not installed)."""
    name = TOOLS.get(tuple(argv))
    return (DATA / "host" / "tools" / name).read_text() if name else None


def text(rel: str) -> str:
    return (HOST / rel).read_text()


def test_cpuinfo_of_this_host() -> None:
    c = parse_cpuinfo(text("proc/cpuinfo"))
    assert c == {"model": "Intel(R) Xeon(R) Processor", "processors": 2, "hypervisor": True}
    assert parse_cpuinfo("")["model"] == "unknown"


def test_topology_and_smt_from_captured_sysfs() -> None:
    t = read_topology(HOST)
    assert (t["sockets"], t["cores"], t["threads"]) == (1, 2, 2)
    assert t["smt"] == "off (smt/control: notsupported; 1 thread per core)"


def test_smt_without_a_control_file_comes_from_the_topology() -> None:
    assert parse_smt(None, 2) == "on (no smt/control file; 2 threads per core)"
    assert parse_smt(None, 1) == "off (no smt/control file; 1 thread per core)"
    assert parse_smt("on\n", 2).startswith("on (smt/control: on")
    assert parse_smt("forceoff\n", 1).startswith("off (smt/control: forceoff")


def test_no_cpufreq_here_says_why() -> None:
    assert not list(HOST.glob("sys/devices/system/cpu/cpu*/cpufreq"))  # as on the real host
    assert read_governor(HOST, vm=True) == \
        "none: no cpufreq driver (a VM: the hypervisor sets the frequency)"
    assert read_governor(HOST, vm=False).startswith("none: no cpufreq driver loaded")
    assert read_turbo(HOST, vm=True) == \
        "unknown: no intel_pstate/no_turbo or cpufreq/boost (a VM: the host decides)"


def test_governor_summary_and_turbo_sources() -> None:
    # This host has no cpufreq: the values are what scaling_governor files hold elsewhere.
    assert summarize_per_cpu({"cpu0": "performance\n".strip(), "cpu1": "performance"}) == \
        "performance (all 2 CPUs)"
    assert summarize_per_cpu({"cpu10": "powersave", "cpu2": "performance"}) == \
        "cpu2=performance, cpu10=powersave"
    assert parse_turbo("1\n", None, "x") == "off (intel_pstate/no_turbo)"
    assert parse_turbo("0\n", "1\n", "x") == "on (intel_pstate/no_turbo)"
    assert parse_turbo(None, "0\n", "x") == "off (cpufreq/boost)"
    assert parse_turbo(None, None, "why") == "unknown: why"


def test_thp_and_hugepages_from_capture() -> None:
    assert read_thp(HOST, "enabled") == "madvise"
    assert read_thp(HOST, "defrag") == "madvise"
    assert parse_selected("always defer defer+madvise [madvise] never\n") == "madvise"
    assert read_hugepages(HOST, "nr_hugepages") == {"1048576kB": 0, "2048kB": 0}
    assert read_hugepages(HOST, "free_hugepages") == {"1048576kB": 0, "2048kB": 0}


def test_mitigations_from_capture() -> None:
    m = read_mitigations(HOST)
    assert isinstance(m, dict) and len(m) == 19
    assert m["retbleed"] == "Vulnerable" and m["meltdown"] == "Not affected"
    assert m["spectre_v2"].startswith("Mitigation: Retpolines; STIBP: disabled")


def test_cmdline_keeps_only_kernel_parameters() -> None:
    raw = text("proc/cmdline")
    assert " -- " in raw  # this host's init gets arguments after "--"
    cmd = parse_cmdline(raw)
    assert cmd.startswith("mitigations=auto,no_guest_host,no_guest_guest console=ttyS0")
    assert cmd.endswith("rdinit=/process_api") and "--" not in cmd


def test_cgroup_layout_from_mounts() -> None:
    mounts = text("proc/self/mounts")
    assert parse_cgroup_mounts(mounts) == \
        "hybrid (v1 controllers; cgroup2 at /sys/fs/cgroup/unified)"
    lines = mounts.splitlines()
    assert parse_cgroup_mounts("\n".join(x for x in lines if " cgroup2 " not in x)) == "v1"
    assert parse_cgroup_mounts("\n".join(x for x in lines if " cgroup " not in x)) == \
        "v2 (at /sys/fs/cgroup/unified)"
    assert parse_cgroup_mounts("\n".join(x for x in lines if "cgroup" not in x)) == \
        "none mounted"


def test_io_schedulers_from_capture() -> None:
    s = read_schedulers(HOST)
    assert s["vda"] == "mq-deadline" and s["loop0"] == "none"
    assert s["zram0"] == "none (no scheduler file)"  # bio-based: the file does not exist
    assert list(s)[:2] == ["loop0", "loop1"] and len(s) == 10


def test_uplink_mtu_and_offloads() -> None:
    assert parse_default_route(text("proc/net/route")) == "eth0"
    up = read_uplink(HOST, captured_tool)
    assert up["iface"] == "eth0" and up["mtu"] == 1400
    assert up["offloads"]["tcp-segmentation-offload"] == "on"
    assert up["offloads"]["large-receive-offload"] == "off"  # "off [fixed]" in ethtool's words
    assert "tx-checksum-ipv4" not in up["offloads"]  # sub-features are not compared
    assert read_uplink(HOST, lambda argv: None)["offloads"] == \
        "unknown: ethtool not available (apt-get install ethtool)"
    route = text("proc/net/route").splitlines()
    assert parse_default_route("\n".join(x for x in route if "\t00000000\t0" not in x)) is None


def test_load_average() -> None:
    assert parse_loadavg(text("proc/loadavg")) == [0.18, 0.64, 0.84]


def test_virtualization_hint_from_capture() -> None:
    v = read_virtualization(HOST, True, captured_tool)
    assert v == ("VM (kvm): cpuinfo hypervisor flag; no DMI tables (/sys/class/dmi/id missing); "
                 "systemd-detect-virt: vm kvm, container docker")
    assert read_virtualization(HOST, False, lambda argv: None) == (
        "no sign of a VM: no cpuinfo hypervisor flag; no DMI tables (/sys/class/dmi/id "
        "missing); systemd-detect-virt not available")


def test_fingerprint_of_the_captured_host() -> None:
    fp = fingerprint(HOST, captured_tool)
    assert set(fp) == OLD_KEYS | NEW_KEYS
    assert (fp["hostname"], fp["kernel"], fp["cgroup"], fp["cpus"], fp["numa_nodes"]) == \
        ("vm", "6.18.44-fc-v669", "v1", 2, 1)
    assert fp["memory_mib"] == 24684084 // 1024
    assert fp["distro"] == "Debian GNU/Linux 12 (bookworm)"
    assert fp["numa_cpus"] == {"0": "0,1"}
    assert fp["governor"].startswith("none: no cpufreq driver (a VM")
    assert fp["virtualization"].startswith("VM (kvm)")
    assert fp["kernel_version"].startswith("Linux version 6.18.44-fc-v669")
    json.dumps(fp)  # stored as JSON with the run


def test_fingerprint_of_an_empty_root_says_why(tmp_path: Path) -> None:
    fp = fingerprint(tmp_path)
    assert set(fp) == OLD_KEYS | NEW_KEYS
    assert fp["governor"].startswith("none: no cpufreq driver loaded")
    assert fp["thp_enabled"] == "unknown: no /sys/kernel/mm/transparent_hugepage " \
                                "(kernel without THP)"
    assert fp["mitigations"].startswith("unknown: no /sys/devices/system/cpu/vulnerabilities")
    assert fp["uplink"]["offloads"] == "none: no IPv4 default route"
    assert fp["hugepages"] == {} and fp["io_schedulers"] == {} and fp["loadavg"] is None
    assert fp["runtimes"]["runc"] == "not recorded (captured tree)"
    assert fp["virtualization"].endswith("systemd-detect-virt not available")


def test_live_fingerprint_is_complete_and_stable() -> None:
    a, b = fingerprint(), fingerprint()
    assert set(a) == OLD_KEYS | NEW_KEYS
    assert isinstance(a["cpus"], int) and a["cpus"] >= 1 and a["cgroup"] in ("v1", "v2")
    json.dumps(a)
    # The load average may move between the two reads; it does not count as a difference.
    assert fingerprint_differences(a, b) == []


def test_fingerprint_differences_name_what_matters() -> None:
    a = fingerprint(HOST, captured_tool)
    b = copy.deepcopy(a)
    b["loadavg"] = [1.9, 1.5, 1.2]
    b["hugepages_free"] = {"1048576kB": 0, "2048kB": 7}
    b["hostname"] = "other"
    assert fingerprint_differences(a, b) == []  # none of these matter
    b["governor"] = "performance (all 2 CPUs)"
    b["smt"] = "on (smt/control: on; 2 threads per core)"
    b["mitigations"]["retbleed"] = "Mitigation: IBRS"
    b["hugepages"]["2048kB"] = 512
    b["kernel"] = "6.1.0-28-amd64"
    b["thp_enabled"] = "always"
    assert fingerprint_differences(a, b) == [
        "SMT: off (smt/control: notsupported; 1 thread per core) vs "
        "on (smt/control: on; 2 threads per core)",
        "governor: none: no cpufreq driver (a VM: the hypervisor sets the frequency) vs "
        "performance (all 2 CPUs)",
        "THP enabled: madvise vs always",
        "mitigation retbleed: Vulnerable vs Mitigation: IBRS",
        "kernel: 6.18.44-fc-v669 vs 6.1.0-28-amd64",
        "hugepages 2048kB: 0 vs 512",
    ]


def test_fingerprint_differences_with_an_older_run() -> None:
    new = fingerprint(HOST, captured_tool)
    old = {k: new[k] for k in ("hostname", "kernel", "cpu_model", "cgroup", "numa_nodes")}
    diffs = fingerprint_differences(old, new)
    assert "turbo: not recorded vs unknown: no intel_pstate/no_turbo or cpufreq/boost " \
           "(a VM: the host decides)" in diffs
    assert not any(d.startswith(("CPU model", "kernel", "NUMA nodes")) for d in diffs)
    new2 = copy.deepcopy(new)
    new2["mitigations"].pop("vmscape")  # an older kernel knows fewer vulnerabilities
    assert fingerprint_differences(new, new2) == ["mitigation vmscape: Not affected vs "
                                                  "not recorded"]


def test_show_rows_of_the_captured_host() -> None:
    rows = dict(show_rows(fingerprint(HOST, captured_tool)))
    assert rows["vulnerable"] == "retbleed, spec_store_bypass"
    assert rows["mitigation: spectre_v1"] == \
        "usercopy/swapgs barriers and __user pointer sanitization"
    assert rows["I/O schedulers"] == ("none: loop0, loop1, loop2, loop3, loop4, loop5, loop6, "
                                      "loop7; mq-deadline: vda; none (no scheduler file): zram0")
    assert rows["uplink"] == "eth0, MTU 1400"
    assert rows["topology"] == "1 socket(s), 2 core(s), 2 thread(s); 2 CPUs online"
    assert rows["load average"] == "0.18 0.64 0.84 (1, 5, 15 min)"


def test_system_show_cli() -> None:
    r = CliRunner().invoke(main, ["system", "show", "--json"])
    assert r.exit_code == 0, r.output
    fp = json.loads(r.output)
    assert set(fp) == OLD_KEYS | NEW_KEYS
    r = CliRunner().invoke(main, ["system", "show"])
    assert r.exit_code == 0 and "governor" in r.output and "THP" in r.output


def test_fingerprint_of_a_systemd_host_on_cgroup_v2() -> None:
    """The guest room's Debian 13 guest, captured there: the unified hierarchy, systemd as
    PID 1, and the version, layout and init said as such."""
    fp = fingerprint(DATA / "host" / "trixie-guest", captured_tool)
    assert fp["cgroup"] == "v2" and fp["cgroup_mode"] == "v2 (at /sys/fs/cgroup)"
    assert fp["init"] == "systemd" and fp["distro"] == "Debian GNU/Linux 13 (trixie)"
    assert fp["kernel"] == "6.12.117+deb13-amd64"
