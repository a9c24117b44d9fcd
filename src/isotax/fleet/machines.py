"""Which of the fleet's hosts are one machine.

Two runs on one machine measure each other, so hosts of one machine run one after another
and different machines in parallel. Inventory names and addresses do not tell (two names, two
addresses, containers or network namespaces of one box): the kernel does. A machine is
(/etc/machine-id, boot_id): machine-id names the installation, and boot_id
(/proc/sys/kernel/random/boot_id, new at every boot, one per kernel) tells apart VMs cloned
from one image, which share a machine-id but never a running kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Identity:
    machine_id: str
    boot_id: str

    @property
    def short(self) -> str:
        return self.machine_id[:12]

    def to_json(self) -> dict[str, str]:
        return {"machine_id": self.machine_id, "boot_id": self.boot_id}


def parse_identity(text: str) -> Identity | None:
    """`cat /etc/machine-id /proc/sys/kernel/random/boot_id` -> Identity; None if it is not
    two non-empty lines."""
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    if len(lines) != 2:
        return None
    return Identity(lines[0], lines[1])


def group_machines(order: Sequence[str], identities: Mapping[str, Identity]
                   ) -> list[list[str]]:
    """The hosts of `order` that have an identity, grouped by machine: groups in the order of
    their first host, hosts in inventory order within each."""
    groups: dict[Identity, list[str]] = {}
    for name in order:
        ident = identities.get(name)
        if ident is not None:
            groups.setdefault(ident, []).append(name)
    return list(groups.values())


def same_machine_lines(groups: Sequence[Sequence[str]], identities: Mapping[str, Identity]
                       ) -> list[str]:
    """One line per machine with several hosts, saying that they run one after the other."""
    out = []
    for g in groups:
        if len(g) < 2:
            continue
        names = ", ".join(g[:-1]) + f" and {g[-1]}"
        out.append(f"{names} are the same machine (machine-id {identities[g[0]].short}…, "
                   "same boot): run one after the other")
    return out
