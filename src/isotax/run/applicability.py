"""Whether a workload applies to an environment at all, decided before anything runs.

Some combinations make no sense rather than fail: a network benchmark in an environment with
no network has no path from the load generator to the server. Those cells are stored as
"n/a" with the reason (model.CellStatus.NOT_APPLICABLE) and the report says so, instead of a
failure that invites a rerun. A workload can also find out while it runs that it does not
apply (an emulated CPU model refusing an instruction its build relies on); it raises
model.NotApplicable, and the runner treats that the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from isotax.loadgen.local import network_mode
from isotax.protocols import Instance


def needs_network(workload: Any, params: Mapping[str, Any]) -> bool:
    """Whether this point of the workload needs a network path from the load generator: a
    workload may narrow its class-wide `needs_loadgen` per point with `needs_network(params)`
    (startup needs one only for its redis probe)."""
    hook = getattr(workload, "needs_network", None)
    return bool(hook(params)) if callable(hook) else bool(workload.needs_loadgen)


def why_not_applicable(workload: Any, inst: Instance, params: Mapping[str, Any]) -> str | None:
    """Why this workload point does not apply to the instance, in one line; None when it does.
    The workload's own `not_applicable(inst, params)` hook, where it has one, comes after the
    rules every workload shares."""
    if needs_network(workload, params):
        mode = network_mode(inst.describe(), inst.address)
        if mode == "none":
            return ("the environment has no network (network = \"none\"): no path from the "
                    "load generator to a server in it; give it network = \"host\" or "
                    "\"bridge\" to measure this")
    hook = getattr(workload, "not_applicable", None)
    if callable(hook):
        why = hook(inst, params)
        if why:
            return str(why)
    return None
