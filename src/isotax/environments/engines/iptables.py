"""The iptables rules an engine makes and never removes (Docker and CNI keep their chains):
found by comparing listings before and after, removed when the engine is done, and reported
by the engines' leak finder where one made rules for an isotax bridge.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from isotax.host.network import COMMENT, iptables
from isotax.protocols import Leftover, Stage

_BUILTIN = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}


def iptables_leftovers(before: str, after: str, table: str, chain_prefixes: Sequence[str],
                       interfaces: Sequence[str]) -> list[list[str]]:
    """iptables commands that remove what an engine added to `table` between two `iptables -S`
    listings and left behind (Docker and CNI never delete their chains): rules in built-in
    chains that jump to its chains or name its interfaces, then its chains themselves (flushed,
    then deleted). Only what was NOT there before counts. Pure."""
    old = set(before.splitlines())
    ours = tuple(chain_prefixes)
    out: list[list[str]] = []
    chains: list[str] = []
    # Rules added to engine chains that were there before (a system Docker, or a private
    # dockerd that was killed, left DOCKER-ISOLATION-STAGE-1 and friends): those chains stay,
    # the rules naming isotax's interfaces go.
    in_old_chains: list[list[str]] = []
    for line in after.splitlines():
        if line in old:
            continue
        try:
            parts = shlex.split(line)  # comments are quoted: "CNI firewall plugin rules"
        except ValueError:
            continue
        if len(parts) >= 2 and parts[0] == "-N" and parts[1].startswith(ours):
            chains.append(parts[1])
        elif len(parts) >= 2 and parts[0] == "-A" and parts[1].startswith(ours):
            if any(i in parts for i in interfaces):
                in_old_chains.append(parts)
        elif len(parts) >= 2 and parts[0] == "-A" and parts[1] in _BUILTIN:
            target = parts[parts.index("-j") + 1] if "-j" in parts[:-1] else ""
            if target.startswith(ours) or any(i in parts for i in interfaces):
                if "--comment" in parts and parts[parts.index("--comment") + 1] == COMMENT:
                    continue  # isotax's own rule: its owner removes it
                out.append(["-t", table, "-D", *parts[1:]])
    out += [["-t", table, "-D", *parts[1:]] for parts in in_old_chains if parts[1] not in chains]
    for c in chains:
        out.append(["-t", table, "-F", c])
    for c in chains:
        out.append(["-t", table, "-X", c])
    return out


def foreign_rules_on_our_links(text: str, table: str) -> list[Leftover]:
    """Rules of `iptables -S` output that name an isotax interface (itx-...) but lack isotax's
    comment: what an engine (dockerd, CNI) made for an isotax bridge and left. Pure."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0] != "-A":
            continue
        links = [parts[i + 1] for i, w in enumerate(parts[:-1]) if w in ("-i", "-o")]
        if any(x.startswith("itx") for x in links) and not (
                "--comment" in parts and parts[parts.index("--comment") + 1] == COMMENT):
            out.append(Leftover("iptables rule", [
                ("iptables", "-w", "10", "-t", table, "-D", *shlex.split(line)[1:])],
                how=f"iptables -t {table} -D {line[3:]}", stage=Stage.RULE, names=(line,)))
    return out


def engine_iptables_leaks() -> list[Leftover]:
    out: list[Leftover] = []
    for table in ("filter", "nat"):
        out += foreign_rules_on_our_links(iptables("-t", table, "-S").stdout, table)
    return out


def iptables_snapshot() -> dict[str, str]:
    return {t: iptables("-t", t, "-S").stdout for t in ("filter", "nat")}


def remove_iptables_leftovers(before: Mapping[str, str], chain_prefixes: Sequence[str],
                              interfaces: Sequence[str]) -> list[str]:
    """Remove what the engine left (see iptables_leftovers); the errors, if any."""
    errors = []
    for table, text in before.items():
        after = iptables("-t", table, "-S").stdout
        for cmd in iptables_leftovers(text, after, table, chain_prefixes, interfaces):
            p = iptables(*cmd)
            if p.returncode != 0:
                errors.append(f"iptables {' '.join(cmd)}: {p.stderr.strip()}")
    return errors


