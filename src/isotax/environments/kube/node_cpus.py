"""Where a pod's host processes may run, as its node's kubelet placed them: the words a pod's
facts give for its CPUs."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

from isotax.host.kubernetes import layout as L


def cpu_words(layout: L.NodeLayout, pids: Sequence[int]) -> str:
    """The CPUs the pod's host processes (pids) may run on, and the node's CPU manager
    policy, in words: what the static policy's exclusive cores are, seen from the host (for
    gVisor the Sentry's own processes, which the policy does not pin)."""
    allowed: dict[str, list[str]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{pid}/status").read_text()
            name = Path(f"/proc/{pid}/comm").read_text().strip()
            m = re.search(r"^Cpus_allowed_list:\s*(\S+)", status, re.M)
            if m:
                allowed.setdefault(m.group(1), []).append(name)
    try:
        conf = json.loads((layout.etc / "kubelet.json").read_text())
        policy = str(conf.get("cpuManagerPolicy", "none"))
    except (OSError, ValueError):
        policy = "?"
    where = "; ".join(f"{', '.join(sorted(set(names)))} on CPUs {cpus}"
                      for cpus, names in sorted(allowed.items()))
    return f"CPU manager {policy}: {where or 'no process seen'}"
