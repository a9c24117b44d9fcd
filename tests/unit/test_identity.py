"""Detected vs declared: the identity probe's output, captured in every kind on this host
(tests/data/identity), says what each one is, and a label that lies is named."""

from __future__ import annotations

import pytest
from support import DATA

from isotax.facts import Facts, Isolation, Reach
from isotax.run import identity

KINDS = {"native": "host", "runc": "container", "docker": "container", "podman": "container",
         "nspawn": "container", "gvisor": "sandbox", "qemu": "vm"}


def claims(kind: str, **typed: object) -> Facts:
    """What an instance of the kind declares of itself (its facts)."""
    return Facts(kind, Reach.HOST, **typed)  # type: ignore[arg-type]


def facts(name: str) -> identity.Evidence:
    return identity.parse_facts((DATA / "identity" / f"{name}.txt").read_text())


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_is_what_it_shows(kind: str) -> None:
    host = facts("host")
    got = facts(kind)
    assert identity.detected(got, host) == KINDS[kind]
    said = claims(kind, **({"accelerator": "tcg"} if kind == "qemu" else {}))
    assert identity.mismatch(said, got, host) is None


def test_a_label_that_lies_is_named_in_one_line() -> None:
    host = facts("host")
    why = identity.mismatch(claims("qemu"), facts("runc"), host)
    assert why is not None and why.startswith("declared qemu (a vm) but it is a container")
    assert "\n" not in why
    # an engine asked for runsc whose container runs on the host kernel: runc underneath
    why = identity.mismatch(claims("docker", isolation=Isolation.SANDBOX), facts("docker"), host)
    assert why is not None and "(a sandbox) but it is a container" in why
    # a VM declared kvm whose guest saw no KVM (this host has none: TCG)
    why = identity.mismatch(claims("qemu", accelerator="kvm"), facts("qemu"), host)
    assert why is not None and "no KVM hypervisor" in why
    # nspawn fakes the boot id; its own PID namespace still makes it a container
    assert facts("nspawn").boot_id != host.boot_id
    assert identity.mismatch(claims("nspawn"), facts("nspawn"), host) is None
    assert identity.mismatch(claims("firecracker"), facts("qemu"), host) is None  # no rule


def test_probe_output_is_checked() -> None:
    with pytest.raises(ValueError, match="not the identity probe's output"):
        identity.parse_facts("sh: 1: uname: not found\n")
