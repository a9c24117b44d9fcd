"""The CPU an environment's own host processes use while a workload runs in it.

What a sandbox or a VM costs is not only what the workload inside gets: gVisor's Sentry runs
the workload and its user-space kernel, the Gofer serves its files, QEMU emulates devices
beside the vCPUs, an engine adds a shim and a docker-proxy per published port. Around every
measured run the runner reads, for every host process that makes up the instance
(Instance.host_pids() and their descendants), the CPU time the kernel accounts to it: user +
system of all its threads. The difference, per program name, is stored with the cell as the
`env_host_cpu_s` sample.

The time of the children a process reaped (cutime, cstime) is left out on purpose: the
commands a workload runs in a container are reaped by whatever started them, which is the
engine's shim under docker, conmon under podman, the container's init after a daemon
detaches, and runc on the host (outside the instance) under plain runc. Counting it would
charge the workload's own CPU to docker's shim but not to runc's nothing, and make the
engines look costly for work they did not do. So a command that ends within the run is not
counted at all, anywhere; what is counted is the environment's machinery (Sentry, Gofer and
systrap stubs, QEMU, shims, proxies, the container's init) and whatever else of it is alive
when the run starts and ends. In gVisor and in a VM that machinery also runs the workload.

What this does not see either: work the kernel does for the instance outside any of its
processes (softirq in a bridge; see telemetry.py's host-wide figures for that).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from isotax.model import Sample
from isotax.parsers import procfs
from isotax.protocols import Instance
from isotax.telemetry.footprint import process_parents, program_names, with_descendants

METRIC = "env_host_cpu_s"  # the sample every measured cell carries (see the runner)
UNIT = "CPU-s"


# (pid, starttime) -> (program name, ticks)
Snapshot = Mapping[tuple[int, int], tuple[str, int]]


def snapshot(inst: Instance, proc: Path = Path("/proc")) -> Snapshot:
    """CPU ticks of every host process of the instance now; processes that exit while being
    read are left out."""
    parents = process_parents()
    names = program_names(with_descendants(inst.host_pids(), parents), parents, proc)
    out: dict[tuple[int, int], tuple[str, int]] = {}
    for pid, name in names.items():
        try:
            cpu = procfs.parse_pid_stat((proc / str(pid) / "stat").read_text())
        except (OSError, ValueError):
            continue
        out[(pid, cpu.starttime)] = (name, cpu.own)
    return out


def delta_by_program(before: Snapshot, after: Snapshot,
                     ticks_per_s: float | None = None) -> dict[str, float]:
    """CPU seconds per program name between two snapshots. A process seen in both counts its
    growth; one that started in between counts all it used; one that ended in between counts
    nothing more. Pure when ticks_per_s is given."""
    hz = ticks_per_s or float(os.sysconf("SC_CLK_TCK"))
    out: dict[str, float] = {}
    for key, (name, ticks) in after.items():
        used = ticks - before[key][1] if key in before else ticks
        out[name] = out.get(name, 0.0) + max(0, used) / hz
    return {k: round(v, 4) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


def cpu_sample(before: Snapshot, after: Snapshot) -> Sample:
    """The CPU the instance's own host processes (Sentry, Gofer, shim, QEMU, ...) used during
    the run, with the split by program."""
    by_program = delta_by_program(before, after)
    return Sample(METRIC, round(sum(by_program.values()), 4), UNIT,
                  higher_is_better=False, labels={"by_program": by_program})
