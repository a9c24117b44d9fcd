"""What a load generator says of itself for the run's record (LoadGen.describe()), typed:
where its clients ran and, for a second machine or a pod, that machine's facts and the link
to it, in words as measured. The store keeps it as the run's "loadgen" metadata
(isotax.store.run_meta) and the report reads it back typed.

Measured values stay words ("1500", "unknown (no reply)"): what the report shows is what was
measured. The one judgement, whether the load generator is this very machine, is a boolean.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class LoadGenDescription(BaseModel):
    # A producer may add a field without a change here (extra="allow"); runs stored by an
    # older isotax read back with the fields they had.
    model_config = ConfigDict(extra="allow", frozen=True)

    kind: str = ""  # the load generator plugin's: "local", "ssh", "pod"
    where: str = ""  # LoadGen.where: where its clients ran, in words
    netns: str = ""  # a local one's network namespace
    mtu: str = ""  # its link's MTU on this host's side
    # Whether the load generator is this very machine (another network namespace of it: the
    # same machine-id and boot), None where that was not asked (a local one is, by design).
    same_machine: bool | None = None
    # A second machine's (loadgen.ssh) facts and link, in the order the report lists them.
    destination: str = ""
    hostname: str = ""
    os: str = ""
    kernel: str = ""
    cpu_model: str = ""
    cpus: str = ""
    mem_total_kib: str = ""
    client_address: str = ""
    host_address: str = ""
    uplink: str = ""
    speed_mbit_s: str = ""
    remote_mtu: str = ""
    offloads: str = ""
    rtt_floor_ms: str = ""
    rtt_avg_ms: str = ""
    tools: str = ""
    installed: str = ""
    # A load generator pod's (loadgen.pod): its node, namespace and image.
    node: str = ""
    namespace: str = ""
    image: str = ""

    @field_validator("same_machine", mode="before")
    @classmethod
    def _words(cls, value: Any) -> Any:
        # Runs stored before this was typed said "yes" / "no"; "" said nothing.
        return None if value in ("", None) else value

    def listed(self) -> list[tuple[str, str]]:
        """The second machine's (or the pod's) facts and link that it has, as (name, value),
        in order."""
        names = ("destination", "hostname", "node", "namespace", "image", "os", "kernel",
                 "cpu_model", "cpus", "mem_total_kib", "client_address", "host_address",
                 "uplink", "speed_mbit_s", "mtu", "remote_mtu", "offloads", "rtt_floor_ms",
                 "rtt_avg_ms", "tools", "installed")
        return [(n, getattr(self, n)) for n in names if getattr(self, n)]

    def to_stored(self) -> dict[str, Any]:
        """The run's "loadgen" metadata: the fields it has (JSON)."""
        return self.model_dump(mode="json", exclude_defaults=True)
