"""The fleet's hosts, from a standard Ansible inventory.

Ansible itself reads the inventory (`ansible-inventory -i FILE --list`): INI, YAML, a
directory or a dynamic inventory all work, with group and host variables resolved exactly as
the playbooks will see them. The JSON it prints is parsed here by a pure function (tested on
real captured output, tests/data/fleet/). Hosts come in inventory order: groups as `all` lists
them, depth first, each host once.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isotax.host import owners

DEFAULT_DIR = "/opt/isotax"  # where isotax is installed on a host (host var isotax_dir)
SSH_PORT = 22


class InventoryError(Exception):
    """An inventory the fleet cannot use: one line naming the problem and the fix."""


@dataclass(frozen=True)
class Host:
    name: str  # the inventory name
    address: str  # ansible_host, else the name
    port: int  # ansible_port, else 22
    user: str  # ansible_user; "" when unset (ssh's default)
    vars: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def endpoint(self) -> str:
        """Where its sshd is, as the duplicate check compares it: address:port."""
        return f"[{self.address}]:{self.port}" if ":" in self.address else \
            f"{self.address}:{self.port}"

    @property
    def isotax_dir(self) -> str:
        return str(self.vars.get("isotax_dir") or DEFAULT_DIR)


def host_order(doc: Mapping[str, Any]) -> list[str]:
    """Every host name of an `ansible-inventory --list` document in inventory order."""
    seen: dict[str, None] = {}
    visited: set[str] = set()

    def walk(group: str) -> None:
        if group in visited:  # a group listed under two parents is walked once
            return
        visited.add(group)
        entry = doc.get(group)
        if not isinstance(entry, Mapping):
            return
        for h in entry.get("hosts") or []:
            seen.setdefault(str(h))
        for child in entry.get("children") or []:
            walk(str(child))

    walk("all")
    # Hosts with variables but in no group walked (never printed so by Ansible; defensive).
    for h in (doc.get("_meta") or {}).get("hostvars") or {}:
        seen.setdefault(str(h))
    return list(seen)


def parse_inventory_list(doc: Mapping[str, Any]) -> list[Host]:
    """The hosts of an `ansible-inventory --list` JSON document, with their variables."""
    hostvars = (doc.get("_meta") or {}).get("hostvars") or {}
    hosts = []
    for name in host_order(doc):
        v = hostvars.get(name) or {}
        try:
            port = int(v.get("ansible_port") or SSH_PORT)
        except (TypeError, ValueError):
            raise InventoryError(f"host {name}: ansible_port {v.get('ansible_port')!r} is not "
                                 "a port number; fix it in the inventory") from None
        hosts.append(Host(name, str(v.get("ansible_host") or name), port,
                          str(v.get("ansible_user") or ""), dict(v)))
    return hosts


def duplicates(hosts: Sequence[Host]) -> list[list[Host]]:
    """Groups of hosts that are one sshd (same address and port) under several names."""
    by_endpoint: dict[str, list[Host]] = {}
    for h in hosts:
        by_endpoint.setdefault(h.endpoint, []).append(h)
    return [g for g in by_endpoint.values() if len(g) > 1]


def duplicate_refusal(path: str, hosts: Sequence[Host]) -> str | None:
    """The one-line refusal of an inventory that lists one host twice, or None."""
    dups = duplicates(hosts)
    if not dups:
        return None
    g = dups[0]
    names = " and ".join(h.name for h in g)
    return (f"inventory {path} lists the same host twice: {names} are all {g[0].endpoint} "
            "(ansible_host:ansible_port); keep one of them: a fleet runs one run per host")


def _first_problem(stderr: str) -> str:
    """The line of ansible-inventory's stderr that says what is wrong."""
    lines = [x.strip() for x in stderr.splitlines() if x.strip()]
    for x in lines:
        if x.startswith("Failed to parse inventory:"):
            return x
    for x in lines:
        if "Failed to parse" in x or x.startswith("[ERROR]"):
            return x.removeprefix("[WARNING]: ").removeprefix("[ERROR]: ")
    return lines[-1] if lines else "no output"


def read_inventory(path: Path, ansible_inventory: str) -> list[Host]:
    """The hosts of the inventory at `path`, read by Ansible; InventoryError (one line) for a
    missing, unparsable or empty inventory."""
    if not path.exists():
        raise InventoryError(f"inventory {path} does not exist; give an Ansible inventory "
                             "file (INI or YAML) with --inventory")
    try:
        # Unparsable sources are an error, not a warning and an empty inventory; Ansible's
        # local temp is ours (a HOME that cannot be written is no reason to fail).
        with tempfile.TemporaryDirectory(prefix=owners.temp_prefix("inventory")) as tmp:
            env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
                   "ANSIBLE_LOCAL_TEMP": tmp}
            p = subprocess.run([ansible_inventory, "-i", str(path), "--list"], env=env,
                               capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InventoryError(f"cannot run {ansible_inventory} ({e}); reinstall isotax "
                             "(pip install -e .) to get ansible-core") from None
    if p.returncode != 0:
        raise InventoryError(f"inventory {path} cannot be read by Ansible "
                             f"({_first_problem(p.stderr)}); fix it (ansible-inventory -i "
                             f"{path} --list shows what Ansible sees)")
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise InventoryError(f"ansible-inventory printed no JSON for {path}; check it with "
                             f"ansible-inventory -i {path} --list") from None
    hosts = parse_inventory_list(doc)
    if not hosts:
        raise InventoryError(f"inventory {path} has no hosts; list the machines to run on "
                             "(one per line, e.g. `bench1 ansible_host=192.0.2.10`)")
    return hosts
