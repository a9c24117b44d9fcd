"""Detected vs declared, for real: a mislabelled environment refuses the run."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from support import requires_root_and

from isotax.environments.base import register
from isotax.environments.native import Native
from isotax.facts import Facts
from isotax.protocols import EnvSpec, Instance


@register
class PretendVm(Native):
    """A host process that says it is a VM: what a broken setup could hand isotax."""

    kind: ClassVar[str] = "test-pretend-vm"
    description: ClassVar[str] = "test only: native, declaring itself a qemu VM"

    def start(self, spec: EnvSpec) -> Instance:
        inst = super().start(spec)
        real = inst.facts

        def facts() -> Facts:
            return dataclasses.replace(real(), kind="qemu", accelerator="tcg")

        inst.facts = facts  # type: ignore[method-assign]
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
    tests, results = str(Path(__file__).parents[1]), str(tmp_path / "r")
    code = (f"import sys; sys.path.insert(0, {tests!r}); import integration.test_identity; "
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
    assert envs["native"].describe.identity.startswith("host: kernel")
    store.close()
