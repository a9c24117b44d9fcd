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

from isotax.protocols import AnyWorkload, Instance, Reach, ServiceEndpoints


def why_not_applicable(workload: AnyWorkload, inst: Instance, params: Mapping[str, Any]
                       ) -> str | None:
    """Why this workload point does not apply to the instance, in one line; None when it does.
    The rules every workload shares come first: a point that needs a network path from the
    load generator (its `needs_network(params)` hook: by default its class-wide
    `needs_loadgen`; startup needs one only for its redis probe) has none in an environment
    without network. Then the workload's own `not_applicable(inst, params)` hook."""
    if workload.needs_network(params) and inst.facts().reach is Reach.NONE:
        return ("the environment has no network (network = \"none\"): no path from the "
                "load generator to a server in it; give it network = \"host\" or "
                "\"bridge\" to measure this")
    if workload.needs_network(params) and not workload.spreads_over_endpoints and \
            isinstance(inst, ServiceEndpoints) and (others := inst.other_endpoints()):
        return (f"behind a Service with {len(others) + 1} endpoints its client's connections "
                "would land on different ones, and they must meet one server; with "
                "endpoints = 1 it measures the Service's path (a workload whose every "
                "connection stands alone, redis, serves from all of them)")
    why = workload.not_applicable(inst, params)
    return str(why) if why else None
