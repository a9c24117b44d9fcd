"""Parity: the environments a run compares must get equal resources, or the report must say
they did not. A VM with half the host's memory, a container with a smaller cpuset, THP on in a
guest and off on the host, or a NIC without segmentation offload all move results by
themselves; the studies' own lesson (the untuned VM) is exactly such a difference.

Before the first cell each environment is probed from inside (one small shell script, the same
in every environment): the CPUs it may run on (`nproc`: affinity, cpuset or vCPUs), the memory
it may use (MemTotal, capped by its memory cgroup's limit), transparent hugepages, the MTU and
the offloads (ethtool -k) of the interface its default route leaves by, plus hugepage backing
where the environment's facts report it (a VM's guest cannot see that). Every difference
from the baseline is a problem: the plan's `parity = "refuse"` (default) stops the run before it
measures anything; `parity = "flag"` runs and lists them in the report.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from isotax.facts import Facts
from isotax.host.facts.cgroups import cpu_limit, memory_limit
from isotax.protocols import Instance, Isolation, isolation_of

# The limits the probe's own cgroup really has, on either cgroup version: on v2 (the unified
# hierarchy at /sys/fs/cgroup) its group from /proc/self/cgroup's "0::" line and every group
# above it, each one's memory.max and cpu.max (a limit anywhere above applies); on v1 the
# memory and cpu hierarchies' groups the same way. Inside a container with a cgroup namespace
# the path is "/" and /sys/fs/cgroup is the container's own group; without one (runc on a v1
# host) the host's path is not mounted inside and the hierarchy's top, which is the
# container's own group, is read instead.
PROBE = r"""
echo "cpus=$(nproc)"
awk '/^MemTotal:/ {print "mem_total_kib=" $2}' /proc/meminfo
limits() {  # limits TOP PATH FILE...: FILE in TOP/PATH and every group above it up to TOP
  top=$1 path=$2; shift 2
  d=$top$path
  [ -d "$d" ] || d=$top
  while :; do
    for f in "$@"; do [ -r "$d/$f" ] && echo "cg $f=$(cat "$d/$f")"; done
    [ "$d" = "$top" ] || [ "$d" = "${d%/*}" ] && break
    d=${d%/*}
  done
}
if [ -r /sys/fs/cgroup/cgroup.controllers ]; then
  echo "cgroup=v2"
  limits /sys/fs/cgroup "$(sed -n 's/^0:://p' /proc/self/cgroup | sed 's:/$::')" \
    memory.max cpu.max
else
  echo "cgroup=v1"
  limits /sys/fs/cgroup/memory "$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup \
    | sed 's:/$::')" memory.limit_in_bytes
  limits /sys/fs/cgroup/cpu "$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3}' /proc/self/cgroup \
    | sed 's:/$::')" cpu.cfs_quota_us cpu.cfs_period_us
fi
echo "shm_kib=$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $2}')"
echo "thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
dev=$(ip route show default 2>/dev/null |
      awk '{for (i = 1; i < NF; i++) if ($i == "dev") {print $(i + 1); exit}}')
echo "dev=$dev"
if [ -n "$dev" ]; then
  echo "mtu=$(cat "/sys/class/net/$dev/mtu" 2>/dev/null)"
  command -v ethtool >/dev/null 2>&1 && ethtool -k "$dev" 2>/dev/null | sed 's/^/ethtool /'
fi
true
"""

# The offloads that change what a byte costs on the network path (the rest rarely differ).
OFFLOADS = ("rx-checksumming", "tx-checksumming", "scatter-gather", "tcp-segmentation-offload",
            "generic-segmentation-offload", "generic-receive-offload", "large-receive-offload")
MEMORY_TOLERANCE = 0.05  # a VM's guest kernel keeps some of its RAM: MemTotal < -m
# A /dev/shm below this share of an environment's memory is a limit a workload can meet (the
# engines' and containerd's 64 MB, where isotax's containers and pods get half of memory and
# a host's tmpfs half or all of it); between it and all of memory none of the workloads here
# notices, so the hosts' own choices (half, or all) are no difference.
SHM_SMALL = 0.25


def parse_ethtool_features(text: str) -> dict[str, str]:
    """Top-level features of `ethtool -k`: name -> "on"/"off" ("[fixed]" dropped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line[0].isspace() or ":" not in line:
            continue  # sub-features are indented; the header has no value
        name, _, rest = line.partition(":")
        value = rest.split()
        if value and value[0] in ("on", "off"):
            out[name.strip()] = value[0]
    return out


@dataclass(frozen=True)
class Resources:
    cpus: int
    memory_mib: int  # what the environment may use: MemTotal, capped by its cgroup limit
    thp: str  # the selected transparent hugepage mode, e.g. "madvise"
    mtu: int | None  # of the default route's interface; None without a network
    offloads: Mapping[str, str] = field(default_factory=dict)  # empty: unknown (no ethtool)
    hugepages: str = "none"  # hugepage backing of the environment's memory
    # CPU time its cgroups allow per period, in CPUs (cpu.max, or v1's cfs quota), where that
    # is less than the CPUs it may run on; None: no such quota.
    cpu_quota: float | None = None
    cgroup: str = "?"  # the cgroup version the probe saw: "v1", "v2" ("?": an older probe)
    shm_mib: int | None = None  # the size of its /dev/shm; None: unknown (an older probe)

    def as_describe(self) -> dict[str, str]:
        d = {"parity.cpus": str(self.cpus), "parity.memory_mib": str(self.memory_mib),
             "parity.thp": self.thp, "parity.mtu": str(self.mtu or "none"),
             "parity.hugepages": self.hugepages, "parity.cgroup": self.cgroup}
        if self.cpu_quota is not None:
            d["parity.cpu_quota"] = f"{self.cpu_quota:g}"
        if self.shm_mib is not None:
            d["parity.shm_mib"] = str(self.shm_mib)
        if self.offloads:
            d["parity.offloads"] = ",".join(f"{k}={v}" for k, v in sorted(self.offloads.items()))
        return d

    @classmethod
    def from_describe(cls, d: Mapping[str, str]) -> Resources | None:
        if "parity.cpus" not in d:
            return None
        offloads = dict(kv.split("=", 1) for kv in d.get("parity.offloads", "").split(",")
                        if "=" in kv)
        mtu = d.get("parity.mtu", "none")
        quota = d.get("parity.cpu_quota")
        return cls(int(d["parity.cpus"]), int(d["parity.memory_mib"]), d.get("parity.thp", "?"),
                   None if mtu == "none" else int(mtu), offloads,
                   d.get("parity.hugepages", "none"), float(quota) if quota else None,
                   d.get("parity.cgroup", "?"),
                   int(d["parity.shm_mib"]) if d.get("parity.shm_mib", "").isdigit() else None)


def cgroup_limits(lines: list[str]) -> tuple[int | None, float | None]:
    """The probe's "cg FILE=VALUE" lines (its cgroup and those above it, either version) ->
    (the lowest memory limit in bytes, the lowest CPU quota in CPUs); None where no group has
    one ("max", v1's -1 quota or its ~2^63 "unlimited"); a value that is no number is skipped.
    Each file is read by host.cgroups' readers of limits, the pod's too. Pure."""
    memory: list[int] = []
    quotas: list[float] = []
    v1_quota: str | None = None
    for line in lines:
        name, _, value = line.partition("=")
        with contextlib.suppress(ValueError, ZeroDivisionError):
            if name in ("memory.max", "memory.limit_in_bytes"):
                memory += [m for m in [memory_limit(value)] if m is not None]
            elif name == "cpu.max":
                quotas += [q for q in [cpu_limit(value)] if q is not None]
            elif name == "cpu.cfs_quota_us":
                v1_quota = value
            elif name == "cpu.cfs_period_us" and v1_quota is not None:
                quota, v1_quota = v1_quota, None
                quotas += [q for q in [cpu_limit(quota, value)] if q is not None]
    return (min(memory) if memory else None), (min(quotas) if quotas else None)


def parse_probe(text: str, hugepages: str = "none") -> Resources:
    """The probe script's output -> Resources. Raises ValueError on anything else."""
    kv: dict[str, str] = {}
    ethtool = []
    cg: list[str] = []
    for line in text.splitlines():
        if line.startswith("ethtool "):
            ethtool.append(line[len("ethtool "):])
        elif line.startswith("cg "):
            cg.append(line[len("cg "):])
        elif "=" in line:
            k, _, v = line.partition("=")
            kv[k.strip()] = v.strip()
    if "cpus" not in kv or "mem_total_kib" not in kv:
        raise ValueError(f"not the parity probe's output: {text.strip()[:200]!r}")
    mem = int(kv["mem_total_kib"]) * 1024
    cpus = int(kv["cpus"])
    limit, quota = cgroup_limits(cg)
    old_limit = kv.get("mem_limit", "max")  # the probe before it walked the groups
    if old_limit.isdigit():
        limit = min(limit or int(old_limit), int(old_limit))
    if limit is not None:
        mem = min(mem, limit)  # an unlimited v1 group reads as ~2^63
    thp = kv.get("thp", "")
    selected = thp[thp.find("[") + 1:thp.find("]")] if "[" in thp else (thp or "unknown")
    mtu = kv.get("mtu", "")
    features = parse_ethtool_features("\n".join(ethtool))
    return Resources(cpus, mem // (1024 * 1024), selected,
                     int(mtu) if mtu.isdigit() else None,
                     {k: features[k] for k in OFFLOADS if k in features}, hugepages,
                     # a quota of at least the CPUs it may run on limits nothing
                     round(quota, 2) if quota is not None and quota < cpus else None,
                     kv.get("cgroup", "?"),
                     int(kv["shm_kib"]) // 1024 if kv.get("shm_kib", "").isdigit() else None)


def probe(inst: Instance) -> Resources:
    done = inst.exec(["sh", "-c", PROBE], 60)
    if done.returncode != 0:
        raise ValueError(f"the parity probe failed ({done.returncode}): {done.stderr.strip()}")
    return parse_probe(done.stdout, inst.facts().hugepages)


# What works when no setting in the plan can make two environments equal; worded to be true
# whether the plan already says parity = "flag" (a report's warning) or not (a refusal).
FLAG = 'with parity = "flag" the run goes on and its report lists this'


@dataclass(frozen=True)
class Memory:
    """An environment's memory as the plan set it and as it is seen inside: what parity
    compares (a VM's memory_mib, not its guest's MemTotal, which its kernel's share lowers)
    and the words that say it."""

    how: str  # "vm" (memory_mib), "limited" (a cgroup limit), "host" (all of the host's:
    #           a container without a limit), "processes" (the host's own processes, a kind
    #           whose isolation is host: cannot be limited), "unknown"
    seen_mib: int  # MemTotal inside, capped by its memory cgroup's limit (the probe's)
    given_mib: int | None = None  # the plan's memory_mib where it applies

    @classmethod
    def of(cls, res: Resources, facts: Facts | None) -> Memory:
        """From the probe's resources and the environment's facts: a VM's guest memory, a
        container's limit or none, the host kind's processes; "unknown" without facts."""
        if facts is None:
            return cls("unknown", res.memory_mib)
        if facts.guest_memory_mib:
            return cls("vm", res.memory_mib, facts.guest_memory_mib)
        if facts.memory_limit_mib:
            return cls("limited", res.memory_mib, facts.memory_limit_mib)
        if (facts.isolation or isolation_of(facts.kind)) is Isolation.HOST:
            return cls("processes", res.memory_mib)
        return cls("host", res.memory_mib)

    @property
    def compared_mib(self) -> int:
        """What parity compares: what a VM was given; what anything else may use (a limit
        above the host's memory leaves the host's)."""
        return self.given_mib if self.how == "vm" and self.given_mib else self.seen_mib

    def words(self, name: str) -> str:
        if self.how == "vm":
            return (f"{name} was given memory_mib = {self.given_mib} (its guest sees "
                    f"{self.seen_mib} MiB)")
        if self.how == "limited":
            return f"{name} is limited to {self.seen_mib} MiB (memory_mib = {self.given_mib})"
        if self.how == "processes":
            return f"{name} has all of the host's {self.seen_mib} MiB"
        if self.how == "host":
            return f"{name} has no memory limit and sees {self.seen_mib} MiB"
        return f"{name} has {self.seen_mib} MiB of memory"


def memory_problem(name: str, env: Memory, base_name: str, base: Memory) -> str | None:
    """The memory difference from the baseline, if any, and a change that would remove it:
    never "set memory_mib" to what it already is, nor to all of the host for a VM."""
    want = base.compared_mib
    if abs(env.compared_mib - want) <= MEMORY_TOLERANCE * want:
        return None
    said = f"{env.words(name)}, {base.words(base_name)}: "
    if env.how == "processes":
        if base.how == "limited":
            return said + f"native runs as host processes and cannot be limited; remove " \
                f"memory_mib from {base_name}"
        return said + f"native runs as host processes and cannot be limited; {FLAG}"
    if base.how in ("host", "processes") and env.how == "vm":
        return (said + f"a VM cannot be given all of its host's memory ({FLAG}); or make the "
                "baseline an environment limited to the same memory (e.g. a container "
                f"with memory_mib = {env.given_mib}, named in baseline)")
    if base.how in ("host", "processes") and env.how == "limited":
        return said + (f"remove memory_mib from {name} (a container without a limit has all "
                       "of the host's memory)")
    if base.how in ("host", "processes") and env.how == "host":
        # Unlimited too, yet it sees less: a cgroup above it or a sandbox's own accounting.
        return said + f"the plan limits neither, so no setting in it equalises them; {FLAG}"
    return said + f"set memory_mib = {want} for {name}"


def problems(name: str, env: Resources, base_name: str, base: Resources,
             env_facts: Facts | None = None, base_facts: Facts | None = None) -> list[str]:
    """Each difference from the baseline, in words, with a plan change that would remove it.
    The facts say how memory was set (a VM's guest memory, a container's limit): without
    them, memory is compared as seen inside."""
    out = []
    mem_env, mem_base = Memory.of(env, env_facts), Memory.of(base, base_facts)
    if env.cpus != base.cpus:
        fix = (f"native runs on every CPU it may use; set vcpus = {env.cpus} for {base_name}"
               if mem_env.how == "processes" else f"set vcpus = {base.cpus} for {name}")
        out.append(f"{name} may run on {env.cpus} CPU(s), {base_name} on {base.cpus}: {fix}")
    if env.cpu_quota != base.cpu_quota:
        def quota(r: Resources, who: str) -> str:
            return (f"{who}'s cgroup allows {r.cpu_quota:g} CPUs of time (cpu.max)"
                    if r.cpu_quota is not None else f"{who} has no CPU quota")
        out.append(f"{quota(env, name)}, {quota(base, base_name)}: give both the same "
                   "CPU limit (a Kubernetes pod's CPU limit is such a quota; vcpus sets CPUs, "
                   "not a quota: the kubelet's static CPU manager, `isotax cluster up "
                   "--cpu-manager static`, gives a Guaranteed pod whole cores instead)")
    shm = shm_problem(name, env, base_name, base)
    if shm:
        out.append(shm)
    mem = memory_problem(name, mem_env, base_name, mem_base)
    if mem:
        out.append(mem)
    # A sandbox may not show the setting at all (gVisor's /sys): unknown is not a difference.
    if env.thp != base.thp and "unknown" not in (env.thp, base.thp):
        out.append(f"transparent hugepages are {env.thp!r} in {name}, {base.thp!r} in "
                   f"{base_name}: set the same mode in both")
    if env.hugepages != base.hugepages:
        out.append(f"{name}'s memory is backed by {env.hugepages} hugepages, {base_name}'s by "
                   f"{base.hugepages}")
    if env.mtu is not None and base.mtu is not None and env.mtu != base.mtu:
        out.append(f"{name}'s interface has MTU {env.mtu}, {base_name}'s {base.mtu}")
    both = sorted(set(env.offloads) & set(base.offloads))
    differ = [k for k in both if env.offloads[k] != base.offloads[k]]
    if differ:
        out.append(f"NIC offloads differ between {name} and {base_name}: " + ", ".join(
            f"{k} {env.offloads[k]} vs {base.offloads[k]}" for k in differ))
    return out


def shm_problem(name: str, env: Resources, base_name: str, base: Resources) -> str | None:
    """A /dev/shm small for its memory (SHM_SMALL) on one side only, in words, else None."""
    def small(r: Resources) -> bool | None:
        if r.shm_mib is None or not r.memory_mib:
            return None
        return r.shm_mib < SHM_SMALL * r.memory_mib
    if small(env) is None or small(base) is None or small(env) == small(base):
        return None
    return (f"/dev/shm is {env.shm_mib} MiB in {name} (of {env.memory_mib} MiB), "
            f"{base.shm_mib} MiB in {base_name} (of {base.memory_mib} MiB): give the small "
            "one half of its memory (a container engine's --shm-size; a pod's memory "
            "emptyDir at /dev/shm, as isotax's own pods have)")
