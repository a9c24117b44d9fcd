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

from isotax import protocols
from isotax.environments.evidence import (  # noqa: F401  (the identity check's words)
    INIT_PID_NS,
    PROBE,
    Evidence,
    Recogniser,
    detected,
    host_facts,
    parse_facts,
    sandbox_recognisers,
)
from isotax.protocols import Facts, Instance, Isolation


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
