"""Each workload tool's version inside a started environment, recorded with it: the same
bits everywhere should give the same versions, and the report shows them side by side."""

from __future__ import annotations

from isotax import protocols
from isotax.plan import Plan
from isotax.protocols import Instance


def tool_versions(inst: Instance, plan: Plan) -> dict[str, str]:
    """Each workload tool's version inside the environment (same bits => same versions)."""
    versions: dict[str, str] = {}
    wls = protocols.workloads()
    for w in plan.workloads:
        for tool, argv in wls[w.name].tools.items():
            if tool in versions:
                continue
            done = inst.exec(list(argv), timeout=60)
            first = done.stdout.strip().splitlines()[0] if done.stdout.strip() else ""
            versions[tool] = first if done.returncode == 0 else f"unavailable ({done.returncode})"
    return versions
