"""VM tuning knobs: profiles ("untuned" like a cloud's defaults, "tuned" like the IBM paper),
each knob also its own plan option, resolved against what this host and accelerator allow.

Knobs (plan options; a profile only sets their defaults):
    cpu_model     qemu64 | max | host | <any QEMU model>   "host" needs KVM: under TCG it
                  becomes "max" (every feature TCG emulates), and its words say so
    cpu_topology  flat | sockets | host    flat: "-smp N" (QEMU's own choice); sockets: one
                  socket per vCPU (OpenStack nova's default topology); host: the host's
                  threads per core and cores per socket
    cache_info    on | off     host-cache-info=on: the host's cache sizes and sharing (CPUID 4)
    pin           on | off     each vCPU thread (QMP query-cpus-fast) pinned to one host CPU
    pin_cpus      "0,1"        host CPUs to pin to, in vCPU order (default: the CPUs isotax
                               may run on; with the plan's numa_node, that node's CPUs, and
                               pin_cpus must be on it)
    hugepages     on | off     guest RAM on 2 MiB hugetlbfs pages, preallocated
    iothread      on | off     virtio-blk served by a dedicated QEMU iothread
    vhost         auto | on | off   vhost-net for the NIC where /dev/vhost-net exists
    vnuma         on | off     guest NUMA nodes mirroring the host's (needs >1 host node;
                               off where the plan binds the VM to one node, numa_node)

Why "untuned" is what it is: OpenStack nova with no flavor extra specs gives one socket per
vCPU, no pinning (hw:cpu_policy=shared), no hugepages (hw:mem_page_size unset), no iothreads,
and vhost-net when the host has it. For the CPU model it gives QEMU's default model (qemu64)
when cpu_mode is "none" and libvirt's "host-model" on KVM by default; qemu64 is chosen here
because it is what QEMU, libvirt without a <cpu> element and many small clouds give, and it is
the model the IBM paper's untuned VM hid the host's features behind. A plan can say
cpu_model = "<model>" to approximate host-model.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from isotax.environments.vm.qemu_vm import host_thp_mode
from isotax.host.locks import exclusive
from isotax.host.network import uplink_mtu
from isotax.parsers import procfs
from isotax.parsers.cpuinfo import parse_cpuinfo_first
from isotax.protocols import Leftover, ParamSpec, Stage

PROFILES = ("default", "untuned", "tuned")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}

# Profile -> knob defaults. "default" is isotax's own VM: the best CPU model the accelerator
# allows, QEMU's topology, nothing else.
PROFILE_KNOBS: dict[str, dict[str, Any]] = {
    "default": {"cpu_model": "auto", "cpu_topology": "flat", "cache_info": False,
                "pin": False, "hugepages": False, "iothread": False, "vhost": "auto",
                "vnuma": False},
    "untuned": {"cpu_model": "qemu64", "cpu_topology": "sockets", "cache_info": False,
                "pin": False, "hugepages": False, "iothread": False, "vhost": "auto",
                "vnuma": False},
    "tuned": {"cpu_model": "host", "cpu_topology": "host", "cache_info": True,
              "pin": True, "hugepages": True, "iothread": True, "vhost": "auto",
              "vnuma": True},
}
KNOBS = tuple(PROFILE_KNOBS["default"])


def _onoff_knob(name: str, help: str) -> ParamSpec:
    """An on/off knob: true or false, or "on" or "off" as the module's docstring writes it."""
    return ParamSpec(name, bool, None, help + " (unset: the profile's)", also=(str,),
                     choices=(True, False, "on", "off"))


# The plan options the profile and each knob are (the module's docstring says what each does):
# every QEMU kind declares them among its options.
KNOB_OPTIONS = (
    ParamSpec("profile", str, "default", "default, untuned (a cloud's defaults) or tuned (the "
              "IBM paper's): the knobs' defaults", choices=PROFILES),
    ParamSpec("cpu_model", str, None, "the -cpu model: qemu64, max, host (max under TCG) or any "
              "QEMU model; unset: the profile's (auto: host under KVM, max under TCG)"),
    ParamSpec("cpu_topology", str, None, "flat (-smp N), sockets (one per vCPU) or host (the "
              "host's threads and cores); unset: the profile's",
              choices=("flat", "sockets", "host")),
    _onoff_knob("cache_info", "the host's cache sizes and sharing in CPUID 4"),
    _onoff_knob("pin", "each vCPU thread pinned to one host CPU"),
    ParamSpec("pin_cpus", str, None, "host CPUs to pin to, in vCPU order (\"0,1\"); unset: "
              "those isotax may run on (on the plan's numa_node: that node's)"),
    _onoff_knob("hugepages", "guest RAM on 2 MiB hugetlbfs pages, preallocated"),
    _onoff_knob("iothread", "virtio-blk served by a dedicated QEMU iothread"),
    ParamSpec("vhost", str, None, "vhost-net for the NIC: auto (where /dev/vhost-net exists), "
              "on or off; unset: the profile's (auto)", also=(bool,),
              choices=("auto", "on", "off", True, False)),
    _onoff_knob("vnuma", "guest NUMA nodes mirroring the host's (needs more than one host node)"),
)


class KnobError(ValueError):
    """A plan option that is not a valid value; the message names the option and the fix."""


@dataclass(frozen=True)
class HostFacts:
    """What the knobs are resolved against (read by host_facts(); made up in tests)."""

    cpus: tuple[int, ...]  # host CPUs isotax may use
    threads_per_core: int
    cores_per_socket: int
    numa_nodes: int
    vhost_net: bool  # /dev/vhost-net exists
    node_cpus: tuple[tuple[int, tuple[int, ...]], ...] = ()  # (host node, its usable CPUs)
    vendor: str = ""  # the host CPU's vendor_id, e.g. GenuineIntel


@dataclass(frozen=True)
class Knob:
    value: str  # effective: "on", "off", a model name, a topology
    why: str = ""  # why it differs from what was asked, or how it was done


@dataclass(frozen=True)
class Knobs:
    """Effective knob values for one VM; `requested` keeps what the plan (or profile) asked."""

    profile: str
    cpu_model: str  # the -cpu model
    topology: tuple[int, int, int] | None  # sockets, cores, threads; None = "-smp N" alone
    cache_info: bool
    pin: tuple[int, ...]  # host CPU per vCPU; () = not pinned
    hugepages: bool
    iothread: bool
    vhost: bool
    vnuma: bool
    notes: Mapping[str, str]  # knob -> why its effective value is what it is
    requested: Mapping[str, str]
    # Guest NUMA nodes (vnuma on): (host node, first vCPU, last vCPU), in guest node order.
    numa: tuple[tuple[int, int, int], ...] = ()

    def words(self) -> dict[str, str]:
        """One line per knob: the effective value, then why (for the report's attribution)."""
        topo = ("flat (-smp N)" if self.topology is None else
                "sockets={},cores={},threads={}".format(*self.topology))
        values = {"cpu_model": self.cpu_model, "cpu_topology": topo,
                  "cache_info": _onoff(self.cache_info),
                  "pin": ("on: " + ",".join(f"vcpu{i}->cpu{c}" for i, c in enumerate(self.pin))
                          if self.pin else "off"),
                  "hugepages": _onoff(self.hugepages), "iothread": _onoff(self.iothread),
                  "vhost": _onoff(self.vhost), "vnuma": _onoff(self.vnuma)}
        out = {"profile": self.profile}
        for k, v in values.items():
            note = self.notes.get(k, "")
            out[f"knob_{k}"] = v + (f" ({note})" if note else "")
        return out


def _onoff(b: bool) -> str:
    return "on" if b else "off"


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise KnobError(f"options.{name} = {value!r} is not on/off (use true or false)")


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """"0-2,5" -> (0, 1, 2, 5). Pure."""
    try:
        return tuple(procfs.parse_cpulist(text))
    except ValueError as e:
        raise KnobError(str(e)) from None


def host_topology(vcpus: int, threads_per_core: int, cores_per_socket: int
                  ) -> tuple[int, int, int]:
    """(sockets, cores, threads) for vcpus that looks like the host: its SMT width when vcpus
    is a multiple of it, as many cores per socket as the host has, then more sockets. Pure."""
    threads = threads_per_core if threads_per_core > 0 and vcpus % threads_per_core == 0 else 1
    cores_total = vcpus // threads
    per_socket = max(1, cores_per_socket)
    sockets = math.ceil(cores_total / per_socket)
    if cores_total % sockets:  # QEMU needs sockets*cores*threads == vcpus
        sockets = 1
    return sockets, cores_total // sockets, threads


def resolve_knobs(options: Mapping[str, Any], accel: str, machine: str, vcpus: int,
                  host: HostFacts, numa_node: int | None = None) -> Knobs:
    """Effective knobs from the plan's options, its profile's defaults, and what this host,
    accelerator and machine type allow. numa_node: the plan binds the whole VM to that host
    node (QEMU runs under numactl, see qemu.py): pinning stays on its CPUs and guest nodes
    spanning several host nodes (vnuma) are impossible. Pure; KnobError on a bad option
    value."""
    profile = str(options.get("profile", "default"))
    if profile not in PROFILES:
        raise KnobError(f"options.profile = {profile!r} is not one of {', '.join(PROFILES)}")
    want = {**PROFILE_KNOBS[profile], **{k: options[k] for k in KNOBS if k in options}}
    requested = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in want.items()}
    notes: dict[str, str] = {}

    model = str(want["cpu_model"])
    if model == "auto":
        model = "host" if accel == "kvm" else "max"
    if model == "host" and accel != "kvm":
        model = "max"
        notes["cpu_model"] = ("host asked: TCG cannot pass the host's model through, max = "
                              "every feature TCG emulates")
    cache_info = _bool("cache_info", want["cache_info"])
    if cache_info and accel != "kvm" and model == "max" and host.vendor:
        # TCG's max CPU says AuthenticAMD, and a guest of that vendor reads AMD's cache
        # leaves, where host-cache-info puts nothing: with the host's vendor the guest reads
        # the host's cache sizes and sharing (CPUID 4), as seen here.
        model = f"max,vendor={host.vendor}"
        notes["cpu_model"] = (notes.get("cpu_model", "") + "; " if "cpu_model" in notes
                              else "") + "the host's vendor, so the guest reads its cache leaves"

    topo_choice = str(want["cpu_topology"])
    topology: tuple[int, int, int] | None
    if topo_choice == "flat":
        topology = None
    elif topo_choice == "sockets":
        topology = (vcpus, 1, 1)
        notes["cpu_topology"] = "one socket per vCPU, as OpenStack gives by default"
    elif topo_choice == "host":
        topology = host_topology(vcpus, host.threads_per_core, host.cores_per_socket)
        notes["cpu_topology"] = (f"mirrors the host: {host.threads_per_core} thread(s) per "
                                 f"core, {host.cores_per_socket} core(s) per socket")
    else:
        raise KnobError(f"options.cpu_topology = {topo_choice!r} is not flat, sockets or host")

    if cache_info and accel != "kvm":
        notes["cache_info"] = "host-cache-info=on: CPUID leaf 4 from the host, also under TCG"

    pin: tuple[int, ...] = ()
    usable = host.cpus
    where = "here"
    if numa_node is not None:
        # Only the node's CPUs: a vCPU pinned elsewhere would leave the node the plan binds
        # the VM to (and numactl's CPU binding would refuse it anyway).
        usable = tuple(c for c in dict(host.node_cpus).get(numa_node, ()) if c in host.cpus)
        where = f"on NUMA node {numa_node}"
    if _bool("pin", want["pin"]):
        cpus = (parse_cpu_list(str(options["pin_cpus"])) if "pin_cpus" in options
                else usable)
        bad = [c for c in cpus if c not in usable]
        if bad or not cpus:
            raise KnobError(f"options.pin_cpus: CPU(s) {bad or cpus} not usable {where} "
                            f"(usable: {','.join(map(str, usable)) or 'none'})")
        pin = tuple(cpus[i % len(cpus)] for i in range(vcpus))
        notes["pin"] = "vCPU threads from QMP query-cpus-fast, sched_setaffinity"
        if vcpus > len(cpus):
            notes["pin"] += f"; {vcpus} vCPUs share {len(cpus)} host CPUs"
        if numa_node is not None:
            notes["pin"] += f"; CPUs of NUMA node {numa_node} only"

    hugepages = _bool("hugepages", want["hugepages"])
    if hugepages:
        notes["hugepages"] = "2 MiB pages on hugetlbfs, preallocated"

    iothread = _bool("iothread", want["iothread"])
    if iothread and machine == "microvm" and accel != "kvm":
        iothread = False
        notes["iothread"] = ("asked, impossible: virtio-mmio has no ioeventfd under TCG and "
                             "QEMU refuses an iothread without it")

    vhost_choice = str(want["vhost"]).lower()
    if vhost_choice not in ("auto", *_TRUE, *_FALSE):
        raise KnobError(f"options.vhost = {want['vhost']!r} is not auto, on or off")
    if vhost_choice == "auto" or vhost_choice in _TRUE:
        vhost = host.vhost_net
        if not vhost:
            if vhost_choice != "auto":
                raise KnobError("options.vhost = on, but this host has no /dev/vhost-net "
                                "(modprobe vhost_net, or set vhost = \"auto\")")
            notes["vhost"] = "no /dev/vhost-net on this host: QEMU's own virtio-net"
    else:
        vhost = False

    vnuma = _bool("vnuma", want["vnuma"])
    numa: tuple[tuple[int, int, int], ...] = ()
    nodes = [(n, c) for n, c in host.node_cpus if c]
    if vnuma and numa_node is not None:
        vnuma = False
        notes["vnuma"] = (f"asked, not applicable: numa_node = {numa_node} binds the whole VM "
                          "to one host node")
    elif vnuma and len(nodes) < 2:
        vnuma = False
        notes["vnuma"] = (f"asked, not applicable: the host has {host.numa_nodes} NUMA node, "
                          "nothing to mirror")
    elif vnuma:
        numa = vnuma_layout(vcpus, nodes)
        if len(numa) < 2:
            vnuma, numa = False, ()
            notes["vnuma"] = f"asked, not applicable: {vcpus} vCPU cannot span NUMA nodes"
        else:
            notes["vnuma"] = "guest nodes " + ", ".join(
                f"{i}: vcpu{a}-{b} on host node {n}" for i, (n, a, b) in enumerate(numa))
            if pin:  # each vCPU on a CPU of its own node's host node
                cpus_of = dict(nodes)
                pin = tuple(cpus_of[n][(v - a) % len(cpus_of[n])]
                            for n, a, b in numa for v in range(a, b + 1))
    return Knobs(profile, model, topology, cache_info, pin, hugepages, iothread, vhost, vnuma,
                 notes, requested, numa)


def vnuma_layout(vcpus: int, nodes: Sequence[tuple[int, tuple[int, ...]]]
                 ) -> tuple[tuple[int, int, int], ...]:
    """Guest nodes mirroring the host's: as many as the host has (at most one per vCPU), each
    with a contiguous share of the vCPUs in proportion to its host node's CPUs. Pure."""
    use = list(nodes)[:vcpus]
    total = sum(len(c) for _, c in use)
    out: list[tuple[int, int, int]] = []
    first = 0
    for i, (node, cpus) in enumerate(use):
        left = len(use) - i - 1
        share = vcpus - first - left if left == 0 else max(
            1, min(round(vcpus * len(cpus) / total), vcpus - first - left))
        out.append((node, first, first + share - 1))
        first += share
    return tuple(out)


def host_facts() -> HostFacts:
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    base = Path("/sys/devices/system/cpu")
    siblings: set[str] = set()
    cores_by_pkg: dict[str, set[str]] = {}
    for c in cpus:
        t = base / f"cpu{c}" / "topology"
        try:
            siblings.add((t / "thread_siblings_list").read_text().strip())
            pkg = (t / "physical_package_id").read_text().strip()
            cores_by_pkg.setdefault(pkg, set()).add((t / "core_id").read_text().strip())
        except OSError:
            continue
    tpc = max(1, round(len(cpus) / len(siblings))) if siblings else 1
    cps = max((len(v) for v in cores_by_pkg.values()), default=len(cpus))
    node_cpus = []
    for d in sorted(Path("/sys/devices/system/node").glob("node[0-9]*"),
                    key=lambda p: int(p.name[4:])):
        try:
            mine = tuple(c for c in parse_cpu_list((d / "cpulist").read_text().strip())
                         if c in cpus)
        except (OSError, KnobError):
            continue
        node_cpus.append((int(d.name[4:]), mine))
    vendor = ""
    with contextlib.suppress(OSError):
        vendor = parse_cpuinfo_first(Path("/proc/cpuinfo").read_text()).get("vendor_id", "")
    return HostFacts(cpus, tpc, cps, len(node_cpus) or 1, os.path.exists("/dev/vhost-net"),
                     tuple(node_cpus), vendor)


# -- hugepages -----------------------------------------------------------------------------------

NR_HUGEPAGES = Path("/proc/sys/vm/nr_hugepages")
HUGEPAGE_KIB = 2048
# One file per live reservation: what it added, so a leftover can be found and undone.
LEDGER = Path("/run/isotax/hugepages")
LOCK = Path("/run/isotax/hugepages.lock")


class HugepageError(Exception):
    pass


def pages_for(memory_mib: int) -> int:
    return math.ceil(memory_mib * 1024 / HUGEPAGE_KIB)


def node_nr_hugepages(node: int, root: Path = Path("/sys/devices/system/node")) -> Path:
    """The 2 MiB hugepage pool counter of one NUMA node."""
    return root / f"node{node}" / "hugepages" / f"hugepages-{HUGEPAGE_KIB}kB" / "nr_hugepages"


class HugepageReservation:
    """nr_hugepages raised by what one VM needs, and a hugetlbfs mounted for its memory file;
    release() unmounts and lowers nr_hugepages by exactly as much (so the old value comes back
    when nothing else changed it meanwhile). Idempotent release; never raises from release.

    node: the pages come from that NUMA node's pool (the VM is bound to it, numa_node). The
    host-wide counter spreads new pages over all nodes, and a VM whose memory is bound to one
    node cannot use another node's hugepages: its preallocation would fail part-way."""

    def __init__(self, tag: str, memory_mib: int, node: int | None = None) -> None:
        self.tag = tag
        self.node = node
        self.counter = NR_HUGEPAGES if node is None else node_nr_hugepages(node)
        self.pages = pages_for(memory_mib)
        self.mountpoint = Path(f"/run/isotax/itx-hp-{tag}")
        self.added = 0
        self.before: int | None = None
        self.mounted = False

    def acquire(self) -> None:
        try:
            self._acquire()
        except BaseException:
            self.release()
            raise

    def _acquire(self) -> None:
        with exclusive(LOCK):
            before = int(self.counter.read_text())
            self.before = before
            LEDGER.mkdir(parents=True, exist_ok=True)
            # The ledger first: a crash between the write and the ledger must not hide pages.
            (LEDGER / f"itx-{self.tag}").write_text(json.dumps(
                {"pages": self.pages, "before": before, "pid": os.getpid(),
                 "counter": str(self.counter)}))
            try:
                self.counter.write_text(str(before + self.pages))
            except OSError as e:
                raise HugepageError(f"cannot raise {self.counter}: {e.strerror}") from e
            got = int(self.counter.read_text()) - before
            self.added = max(0, got)
            if got < self.pages:
                raise HugepageError(
                    f"the kernel gave {got} of {self.pages} 2 MiB hugepages"
                    + (f" on NUMA node {self.node}" if self.node is not None else "")
                    + " (memory too fragmented or too little free)")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        p = subprocess.run(["mount", "-t", "hugetlbfs", "-o", "pagesize=2M",
                            f"itx-hp-{self.tag}", str(self.mountpoint)],
                           capture_output=True, text=True, check=False)
        if p.returncode != 0:
            raise HugepageError(f"mounting hugetlbfs failed: {p.stderr.strip()}")
        self.mounted = True

    def free_pages(self) -> int:
        return procfs.parse_meminfo(Path("/proc/meminfo").read_text()).get("HugePages_Free", 0)

    def release(self) -> list[str]:
        """Undo everything; returns what could not be undone (empty when clean)."""
        errors: list[str] = []
        if self.mounted:
            p = subprocess.run(["umount", str(self.mountpoint)], capture_output=True,
                               text=True, check=False)
            if p.returncode != 0:
                errors.append(f"umount {self.mountpoint}: {p.stderr.strip()}")
            else:
                self.mounted = False
        if not self.mounted:
            with contextlib.suppress(OSError):
                self.mountpoint.rmdir()
        if self.added:
            try:
                with exclusive(LOCK):
                    now = int(self.counter.read_text())
                    self.counter.write_text(str(max(0, now - self.added)))
                self.added = 0
            except OSError as e:
                errors.append(f"lowering {self.counter} by {self.added}: {e}")
        if not self.added:
            with contextlib.suppress(OSError):
                (LEDGER / f"itx-{self.tag}").unlink()
        return errors


def leaked_hugepage_reservations() -> list[Leftover]:
    """Reservations whose ledger file outlived its VM: each removed by lowering the pool it
    raised and removing the file."""
    if not LEDGER.is_dir():
        return []
    out = []
    for f in sorted(LEDGER.glob("itx-*")):
        counter, path = "vm.nr_hugepages", NR_HUGEPAGES
        try:
            d = json.loads(f.read_text())
            pages = int(d["pages"])
            if d.get("counter", str(NR_HUGEPAGES)) != str(NR_HUGEPAGES):
                path = Path(str(d["counter"]))  # one node's pool (a VM bound to a node)
                counter = str(path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pages = 0
        out.append(Leftover(f"hugepages reservation {f.name}: {pages} pages in {counter}",
                            how=f"lower {counter} by {pages}; rm {f}", stage=Stage.SETTING,
                            removal=functools.partial(_give_back, path, pages, f)))
    return out


def _give_back(counter: Path, pages: int, ledger_file: Path) -> None:
    """Lower a hugepage pool by what a dead VM's reservation added, and drop its record."""
    with exclusive(LOCK):
        now = int(counter.read_text())
        counter.write_text(str(max(0, now - pages)))
    ledger_file.unlink()


# -- pinning -------------------------------------------------------------------------------------

def vcpu_threads(query_cpus_fast: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """(vCPU index, host thread id) from QMP query-cpus-fast's answer, by index. Pure."""
    return sorted((int(c["cpu-index"]), int(c["thread-id"])) for c in query_cpus_fast)


def pin_vcpus(threads: Sequence[tuple[int, int]], cpus: Sequence[int]) -> list[str]:
    """Pin each vCPU thread to its host CPU; read the affinity back. Returns
    "vcpuI:tid->cpuC" lines; raises OSError when the kernel refuses."""
    done = []
    for (index, tid), cpu in zip(threads, cpus, strict=False):
        os.sched_setaffinity(tid, {cpu})
        got = os.sched_getaffinity(tid)
        if got != {cpu}:
            raise OSError(f"vCPU {index} (thread {tid}) has affinity {sorted(got)}, not {cpu}")
        done.append(f"vcpu{index}:{tid}->cpu{cpu}")
    return done


# -- the host facts a VM is booted to match -------------------------------------------------

def host_tsc_khz() -> int | None:
    """The host's TSC rate in kHz ("cpu MHz" of /proc/cpuinfo): under TCG the guest's TSC
    ticks at the host's rate. None when unknown."""
    try:
        mhz = parse_cpuinfo_first(Path("/proc/cpuinfo").read_text()).get("cpu MHz")
        return int(float(mhz) * 1000) if mhz else None
    except (OSError, ValueError):
        return None


def host_uplink_mtu() -> int:
    """The MTU of the host's uplink, for the VM's NIC to match."""
    with IPRoute() as ipr:
        return uplink_mtu(ipr)


def host_thp() -> str | None:
    """The host's THP mode, for the guest to boot with (isotax.host.facts.parity compares them)."""
    try:
        return host_thp_mode(Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text())
    except OSError:
        return None
