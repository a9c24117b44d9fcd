"""Detected vs declared: the identity probe's output, captured in every kind on this host
(tests/data/identity), says what each one is; a mislabelled environment refuses the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from support import requires_root_and

from isotax.environments.base import register
from isotax.environments.native import Native
from isotax.protocols import EnvSpec, Instance
from isotax.run import identity

DATA = Path(__file__).parent / "data" / "identity"
KINDS = {"native": "host", "runc": "container", "docker": "container", "podman": "container",
         "nspawn": "container", "gvisor": "sandbox", "qemu": "vm"}


def facts(name: str) -> identity.Facts:
    return identity.parse_facts((DATA / f"{name}.txt").read_text())


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_kind_is_what_it_shows(kind: str) -> None:
    host = facts("host")
    got = facts(kind)
    assert identity.detected(got, host) == KINDS[kind]
    describe = {"kind": kind, **({"accelerator": "tcg"} if kind == "qemu" else {})}
    assert identity.mismatch(describe, got, host) is None


def test_a_label_that_lies_is_named_in_one_line() -> None:
    host = facts("host")
    why = identity.mismatch({"kind": "qemu"}, facts("runc"), host)
    assert why is not None and why.startswith("declared qemu (a vm) but it is a container")
    assert "\n" not in why
    # an engine asked for runsc whose container runs on the host kernel: runc underneath
    why = identity.mismatch({"kind": "docker", "runtime": "runsc 20240513.0 via dockerd"},
                            facts("docker"), host)
    assert why is not None and "(a sandbox) but it is a container" in why
    # a VM declared kvm whose guest saw no KVM (this host has none: TCG)
    why = identity.mismatch({"kind": "qemu", "accelerator": "kvm"}, facts("qemu"), host)
    assert why is not None and "no KVM hypervisor" in why
    # nspawn fakes the boot id; its own PID namespace still makes it a container
    assert facts("nspawn").boot_id != host.boot_id
    assert identity.mismatch({"kind": "nspawn"}, facts("nspawn"), host) is None
    assert identity.mismatch({"kind": "firecracker"}, facts("qemu"), host) is None  # no rule


def test_probe_output_is_checked() -> None:
    with pytest.raises(ValueError, match="not the identity probe's output"):
        identity.parse_facts("sh: 1: uname: not found\n")


@register
class PretendVm(Native):
    """A host process that says it is a VM: what a broken setup could hand isotax."""

    kind: ClassVar[str] = "test-pretend-vm"
    description: ClassVar[str] = "test only: native, declaring itself a qemu VM"

    def start(self, spec: EnvSpec) -> Instance:
        inst = super().start(spec)
        real = inst.describe

        def describe() -> dict[str, str]:
            return {**real(), "kind": "qemu", "accelerator": "tcg"}

        inst.describe = describe  # type: ignore[method-assign]
        return inst


@pytest.mark.integration
@requires_root_and("debootstrap")
def test_a_mislabelled_environment_refuses_the_run(tmp_path: Path) -> None:
    """Through the real CLI: exit 2, the line naming the environment and what it is, and no
    cell measured. The plugin module registers PretendVm in the child process."""
    plan = tmp_path / "plan.toml"
    plan.write_text('name = "t-id"\nrepetitions = 1\nwarmups = 0\n'
                    '[[environments]]\nname = "native"\nkind = "native"\n'
                    '[[environments]]\nname = "fake"\nkind = "test-pretend-vm"\n'
                    '[[workloads]]\nname = "compress"\nparams = { corpus_mib = 1 }\n')
    here, results = str(Path(__file__).parent), str(tmp_path / "r")
    code = (f"import sys; sys.path.insert(0, {here!r}); import test_identity; "
            "from isotax.cli import main; "
            f"sys.argv = ['isotax', 'run', {str(plan)!r}, '--results', {results!r}]; main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 2, out[-2000:]
    assert "fake: declared qemu (a vm) but it is a host" in out.replace("\n", " ")
    last = [ln for ln in p.stderr.splitlines() if ln.strip()][-1]
    assert last.startswith("isotax: refused: an environment is not what the plan declares")
    from isotax.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "r" / "isotax.db")
    (run,) = store.list_runs()
    assert run.status == "refused" and store.cells(run.id) == []
    envs = {e.name: e for e in store.environments(run.id)}
    assert envs["native"].describe["identity"].startswith("host: kernel")
    store.close()
