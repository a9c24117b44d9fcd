"""Detected vs declared: every environment proves what it is before its numbers count.

A plan says "runc" or "qemu", but a misconfigured host can give something else: an engine
whose default runtime is not the one asked for, a "VM" that is a container, a sandbox whose
runtime fell back to runc. isotax asks each instance, from inside, for facts that only the
real thing can show, and compares them with the host's:

  kernel    uname -r and -v: a container shares the host's kernel; gVisor reports its own
            ("4.19.0-gvisor", dmesg "Starting gVisor..."); a VM boots its own.
  boot      /proc/sys/kernel/random/boot_id: a VM's kernel booted separately (a new id).
            systemd-nspawn fakes the id, so it decides nothing for containers.
  pid ns    /proc/self/ns/pid: the host and a VM's guest are in their kernel's initial PID
            namespace (inode 0xEFFFFFFC, a constant); a container is not.
  dmesg     a VM's guest kernel prints "Hypervisor detected: KVM" under KVM, nothing under TCG.

What an environment declares is its kind's `isolation` fact, read from the registry, unless
its instance's facts say its runtime makes it something else (an engine running runsc: a
sandbox): a new kind is checked
without an edit here. A mismatch fails the run (the runner refuses it), with one line per
environment naming what was declared and what was found.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from isotax import protocols
from isotax.protocols import Facts, Instance, Isolation

# What the instance prints about itself; plain sh and coreutils, the same in every kind.
PROBE = (
    'echo "boot_id=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)"; '
    'echo "pidns=$(readlink /proc/self/ns/pid 2>/dev/null)"; '
    'echo "release=$(uname -r)"; echo "version=$(uname -v)"; '
    'echo "dmesg=$(dmesg 2>/dev/null | grep -m1 -E "Starting gVisor|Hypervisor detected")"; '
    'echo "cgroup=$(head -1 /proc/self/cgroup 2>/dev/null)"'
)
INIT_PID_NS = "pid:[4026531836]"  # PROC_PID_INIT_INO: the initial PID namespace of a kernel

@dataclass(frozen=True)
class Evidence:
    """What an instance shows of itself from inside (the PROBE), or the host of itself."""

    boot_id: str
    pidns: str
    release: str
    version: str
    dmesg: str  # the first gVisor or hypervisor line of the kernel log ("" if none or refused)
    cgroup: str  # the first line of /proc/self/cgroup: evidence, not a rule

    def words(self) -> str:
        return (f"kernel {self.release} {self.version}, boot {self.boot_id[:8]}, {self.pidns}"
                + (f", dmesg {self.dmesg!r}" if self.dmesg else ""))


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


def declared(facts: Facts) -> Isolation | None:
    """What the plan's environment claims to be: the isolation its instance says its runtime
    makes it (an engine running runsc: a sandbox), else its kind's declared isolation; None
    for a kind not registered."""
    return facts.isolation or protocols.isolation_of(facts.kind)


def mismatch(facts: Facts, env: Evidence, host: Evidence) -> str | None:
    """Why the instance is not what it says it is, in one line; None when it is. Pure."""
    claim = declared(facts)
    if claim is None:
        return None
    found = detected(env, host)
    if found != claim:
        return f"declared {facts.kind} (a {claim}) but it is a {found}: {env.words()}"
    accel = facts.accelerator
    if claim is Isolation.VM and accel:
        kvm_seen = "Hypervisor detected: KVM" in env.dmesg
        if accel == "kvm" and not kvm_seen:
            return ("declared accelerator kvm but the guest kernel saw no KVM hypervisor "
                    f"(dmesg has no 'Hypervisor detected: KVM'): {env.words()}")
        if accel == "tcg" and kvm_seen:
            return f"declared accelerator tcg but the guest kernel runs on KVM: {env.words()}"
    return None


def probe(inst: Instance) -> Evidence:
    """Ask the instance (raises ValueError when it cannot say)."""
    done = inst.exec(["sh", "-c", PROBE], timeout=60)
    if done.returncode != 0:
        raise ValueError(f"identity probe exited {done.returncode}: {done.stderr.strip()[:200]}")
    return parse_facts(done.stdout)
