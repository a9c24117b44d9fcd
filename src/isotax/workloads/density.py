"""density: what idle instances cost the host in memory, and how starting slows as they pile up.

Start fresh instances of the environment one after another and keep them all running, idle,
until `max_instances` run or the host's MemAvailable would fall below `min_available_mib`.
After each start (and `settle_s` for it to settle) isotax measures every instance's footprint
(isotax.telemetry.footprint: the PSS of its host processes plus its cgroup's kernel memory) and the
host's MemAvailable. Then everything is stopped and removed.

Reported per cell:
  idle_instance_mib   footprint of the first instance while it runs alone: the memory cost
                      of one idle container, VM or (natively) process;
  mean_instance_mib   the mean footprint per instance with all of them running (shared pages
                      split between them: PSS);
  instances           how many ran together (the plan's limit or the memory floor);
  first_start_s       time from request to ready of the first instance;
  last_start_s        the same for the last one, started beside all the others;
and in the labels the curve (per K: total footprint, MemAvailable used since the start, start
time) and which limit stopped the sweep. MemAvailable is a host-wide cross-check (page cache
and other tenants move it), not the result.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from isotax.model import Sample, SanityError
from isotax.parsers import procfs
from isotax.protocols import (
    FigureHints,
    Instance,
    Launched,
    Launcher,
    LoadGen,
    Need,
    Needs,
    Params,
    ParamSpec,
    Port,
)
from isotax.telemetry.footprint import Footprint, measure
from isotax.workloads.base import MIB, BaseWorkload, register, starts_not_behind_a_service

# What an idle instance costs the host at the least, for the load-time check of max_instances
# (host_needs): below the smallest footprint measured on the development machine, native's one
# idle itx-ready process at 0.17 MiB PSS (docs/measured-here.md, "Startup phases and idle
# memory"); a container costs 0.3 MiB and more there, a VM hundreds.
MIN_INSTANCE_BYTES = 128 * 1024


def parse_mem_available(meminfo: str) -> int:
    """MemAvailable from /proc/meminfo, in bytes."""
    found = procfs.parse_meminfo(meminfo).get("MemAvailable")
    if found is None:
        raise ValueError("no MemAvailable line: not the text of /proc/meminfo")
    return found


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        return parse_mem_available(f.read())


def _footprint(launched: Launched, k: int) -> Footprint:
    fp = measure(launched.instance)
    if not fp.processes:
        raise SanityError(f"instance {k} has no live host process: it died while idle")
    return fp


@register
class Density(BaseWorkload):
    name: ClassVar[str] = "density"
    version: ClassVar[str] = "1"
    description: ClassVar[str] = ("K idle instances side by side: memory per instance (PSS + "
                                  "cgroup kernel memory, MiB) and start time as K grows")
    params: ClassVar[Sequence[ParamSpec]] = (
        ParamSpec("max_instances", int, 4, "stop after this many instances", minimum=1),
        ParamSpec("min_available_mib", int, 2048, "stop before the host's MemAvailable "
                  "would fall below this", minimum=0),
        ParamSpec("settle_s", float, 1.0, "idle time after each start before measuring",
                  minimum=0),
    )
    tools: ClassVar[Mapping[str, Sequence[str]]] = {}
    needs_loadgen: ClassVar[bool] = False
    ports: ClassVar[Mapping[str, Port]] = {}
    packages: ClassVar[Sequence[str]] = ()  # it measures the environments themselves
    figures: ClassVar[FigureHints] = FigureHints(
        footprint=(("idle_instance_mib", "idle instance (MiB)"),
                   ("mean_instance_mib", "per instance with all up (MiB)"),
                   ("instances", "instances"),
                   ("first_start_s", "first start (s)"),
                   ("last_start_s", "last start (s)")),
        curve="curve")

    def work(self, params: Params, samples: Sequence[Sample]) -> tuple[float, str] | None:
        """Instances started (and stopped) side by side."""
        s = next((x for x in samples if x.metric == "instances"), None)
        return (s.value, "instance") if s is not None else None

    def prepare(self, inst: Instance, params: Params, loadgen: LoadGen | None) -> None:
        pass

    def not_applicable(self, inst: Instance, params: Params) -> str | None:
        return starts_not_behind_a_service(inst)

    def host_needs(self, params: Params) -> Needs:
        """max_instances idle instances, MIN_INSTANCE_BYTES each at least, beside the
        MemAvailable floor the sweep keeps free."""
        return Needs(host_memory=Need(
            int(params["max_instances"]) * MIN_INSTANCE_BYTES
            + int(params["min_available_mib"]) * MIB, ("max_instances", "min_available_mib"),
            "128 KiB or more per idle instance, and the floor kept free"))

    def launch_and_measure(self, launcher: Launcher, params: Params,
                           loadgen: LoadGen | None) -> list[Sample]:
        limit, floor = int(params["max_instances"]), int(params["min_available_mib"]) * MIB
        settle = float(params["settle_s"])
        before = mem_available()
        running: list[Launched] = []
        curve: list[dict[str, Any]] = []
        idle: Footprint | None = None
        stopped_by = f"max_instances = {limit}"
        try:
            while len(running) < limit:
                # The next instance is expected to cost what the mean one costs so far.
                per = curve[-1]["total_mib"] * MIB / len(running) if running else 0
                if mem_available() - per < floor:
                    stopped_by = f"MemAvailable would fall below {floor // MIB} MiB"
                    break
                launched = launcher.launch()
                running.append(launched)
                start_s = launched.instance.milestones["ready"]
                time.sleep(settle)
                fps = [_footprint(r, i + 1) for i, r in enumerate(running)]
                if idle is None:
                    idle = fps[0]
                total = sum(f.total_bytes for f in fps)
                curve.append({"instances": len(running), "start_s": round(start_s, 4),
                              "total_mib": round(total / MIB, 3),
                              "pss_mib": round(sum(f.pss_bytes for f in fps) / MIB, 3),
                              "kernel_mib": round(sum(f.kernel_bytes or 0 for f in fps) / MIB,
                                                  3),
                              "host_used_mib": round((before - mem_available()) / MIB, 1)})
        finally:
            for r in reversed(running):
                launcher.stop(r)
        if idle is None or not curve:
            raise SanityError(f"not even one instance fit: {stopped_by}")
        last = curve[-1]
        labels = {"curve": curve, "stopped_by": stopped_by, "settle_s": settle,
                  "idle_pss_mib": round(idle.pss_bytes / MIB, 3),
                  "idle_kernel_mib": None if idle.kernel_bytes is None
                  else round(idle.kernel_bytes / MIB, 3),
                  "idle_by_program_mib": {k: round(v / MIB, 3)
                                          for k, v in idle.by_program().items()}}
        return [
            Sample("idle_instance_mib", idle.total_bytes / MIB, "MiB", False, labels),
            Sample("mean_instance_mib", last["total_mib"] / last["instances"], "MiB", False,
                   labels),
            Sample("instances", last["instances"], "instances", True, labels),
            Sample("first_start_s", curve[0]["start_s"], "s", False, labels),
            Sample("last_start_s", last["start_s"], "s", False, labels),
        ]
