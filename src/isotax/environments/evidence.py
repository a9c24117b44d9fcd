"""What an instance shows of itself from inside, and what that makes it: the identity probe
(PROBE), its reader, and the rule that tells host, container, sandbox and VM apart. Below
the run's identity check (isotax.run.identity), so an environment whose runtime is not its
own to declare (a pod on a cluster isotax did not build, whose RuntimeClass handler's name
says nothing) can find what it is with the same probe and rule.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from isotax import protocols
from isotax.protocols import Evidence, Isolation

# What the instance prints about itself; plain sh and coreutils, the same in every kind.
PROBE = (
    'echo "boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"; '
    'echo "pidns=$(readlink /proc/self/ns/pid 2>/dev/null)"; '
    'echo "release=$(uname -r)"; echo "version=$(uname -v)"; '
    'echo "dmesg=$(dmesg 2>/dev/null | grep -m1 -E "Starting gVisor|Hypervisor detected")"; '
    'echo "cgroup=$(head -1 /proc/self/cgroup 2>/dev/null)"'
)
INIT_PID_NS = "pid:[4026531836]"  # PROC_PID_INIT_INO: the initial PID namespace of a kernel

def parse_facts(text: str) -> Evidence:
    """The PROBE's output -> Evidence. Pure; raises ValueError on output that is not it."""
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in ("boot_id", "pidns", "release", "version", "dmesg", "cgroup"):
            kv.setdefault(key, value.strip())
    if "release" not in kv or "pidns" not in kv:
        raise ValueError(f"not the identity probe's output: {text[:120]!r}")
    return Evidence(kv.get("boot_id", ""), kv["pidns"], kv["release"], kv.get("version", ""),
                 kv.get("dmesg", ""), kv.get("cgroup", ""))


def host_facts(root: Path = Path("/")) -> Evidence:
    """The same facts of the host itself, read directly."""
    def read(p: str) -> str:
        try:
            return (root / p).read_text().strip()
        except OSError:
            return ""

    return Evidence(read("proc/sys/kernel/random/boot_id"), os.readlink(root / "proc/self/ns/pid"),
                 read("proc/sys/kernel/osrelease"), read("proc/sys/kernel/version"), "", "")


Recogniser = Callable[[str, str], bool]


def sandbox_recognisers() -> tuple[Recogniser, ...]:
    """How each registered sandbox kind recognises its own kernel from inside."""
    return tuple(cls.recognises for cls in protocols.environments().values()
                 if cls.isolation is Isolation.SANDBOX)


def detected(env: Evidence, host: Evidence, sandboxes: Sequence[Recogniser] | None = None
             ) -> Isolation:
    """What the facts say the instance is: host, container, sandbox or vm. Pure, given the
    sandbox kinds' recognisers (default: the registered ones)."""
    recognisers = sandbox_recognisers() if sandboxes is None else sandboxes
    if any(r(env.release, env.dmesg) for r in recognisers):
        return Isolation.SANDBOX
    same_kernel = (env.release, env.version) == (host.release, host.version)
    if same_kernel and env.boot_id == host.boot_id and env.pidns == host.pidns:
        return Isolation.HOST
    if env.pidns == INIT_PID_NS and env.boot_id != host.boot_id:
        # a kernel's own first namespace, in a kernel that booted on its own
        return Isolation.VM
    return Isolation.CONTAINER if same_kernel else Isolation.VM
