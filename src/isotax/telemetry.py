"""Host-wide CPU accounting around a measurement: what a unit of work costs the whole machine.

IBM's study ran `perf stat -a` around each network test and divided cycles by bytes moved.
Hardware cycle counters need a PMU; where the host has none (a VM such as this Firecracker
guest: /sys/bus/event_source/devices/cpu is missing), isotax reads the kernel's own CPU time
accounting in /proc/stat instead, before and after, and reports CPU seconds split the way the
kernel splits them. Host-wide is the point: it counts the work done on an environment's behalf
outside it -- QEMU's device emulation and TCG threads, softirq in the bridge and NAT -- which
an environment's own accounting hides.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
PMU_DIR = Path("/sys/bus/event_source/devices/cpu")

# The columns of the `cpu` line of /proc/stat, in order (proc(5)). guest and guest_nice are
# already included in user and nice, so they are never added again.
_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest",
           "guest_nice")


@dataclass(frozen=True)
class CpuTimes:
    """Host-wide CPU seconds by kind (all CPUs together), from one /proc/stat reading."""

    user: float  # user + nice (includes guest time: QEMU's KVM vCPUs)
    system: float
    irq: float
    softirq: float
    idle: float  # idle + iowait
    steal: float  # time a hypervisor under this host ran something else

    @property
    def busy(self) -> float:
        return self.user + self.system + self.irq + self.softirq

    def __sub__(self, other: CpuTimes) -> CpuTimes:
        return CpuTimes(self.user - other.user, self.system - other.system,
                        self.irq - other.irq, self.softirq - other.softirq,
                        self.idle - other.idle, self.steal - other.steal)


def parse_proc_stat(text: str, ticks_per_s: float = 100.0) -> CpuTimes:
    """The aggregate `cpu` line of /proc/stat text, in seconds. Pure."""
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            vals = [int(x) for x in parts[1:]] + [0] * len(_FIELDS)
            f = dict(zip(_FIELDS, vals, strict=False))
            t = ticks_per_s
            return CpuTimes(
                user=(f["user"] + f["nice"]) / t, system=f["system"] / t, irq=f["irq"] / t,
                softirq=f["softirq"] / t, idle=(f["idle"] + f["iowait"]) / t,
                steal=f["steal"] / t)
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def read_cpu_times() -> CpuTimes:
    return parse_proc_stat(PROC_STAT.read_text(), float(os.sysconf("SC_CLK_TCK")))


def cpu_method() -> str:
    """Which CPU-cost method isotax uses on this host, and why, in words for the report."""
    if PMU_DIR.is_dir():
        # A PMU exists, but isotax does not drive perf cycles yet: say what was used.
        return "/proc/stat (hardware perf events exist; perf cycles not used yet)"
    return "/proc/stat (no hardware perf events on this host: no PMU in " \
           f"{PMU_DIR.parent})"


def cost_per_gb(delta: CpuTimes, nbytes: float) -> dict[str, float]:
    """Host-wide CPU seconds per GB (1e9 bytes) moved, by kind: user, system (with hardirq),
    softirq, and their total."""
    if nbytes <= 0:
        raise ValueError("no bytes moved: CPU cost per GB is undefined")
    gb = nbytes / 1e9
    return {
        "user": delta.user / gb,
        "system": (delta.system + delta.irq) / gb,
        "softirq": delta.softirq / gb,
        "total": delta.busy / gb,
    }
