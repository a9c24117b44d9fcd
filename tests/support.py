"""Shared by the end-to-end tests: skips that name exactly what the machine lacks, and
running instances of real environments."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from isotax import protocols
from isotax.image.artifacts import ImageArtifacts
from isotax.plan import parse_plan
from isotax.protocols import EnvSpec, Instance
from isotax.run.runner import Runner, new_run_id
from isotax.store.sqlite import SQLiteStore


def why_not_root_and(*tools: str,
                     root_for: str = "containers, network namespaces and the VM's tap",
                     ) -> str | None:
    """Why this host cannot run a test that needs root and `tools`; None if it can."""
    if os.geteuid() != 0:
        return f"needs root for {root_for}"
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed (scripts/setup.sh installs them)"
    return None


def requires_root_and(*tools: str) -> pytest.MarkDecorator:
    reason = why_not_root_and(*tools)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


@contextlib.contextmanager
def started(name: str, kind: str, network: str, image: ImageArtifacts,
            workdir: Path) -> Iterator[Instance]:
    """A running instance of `kind`, stopped afterwards; skips, with the reason, where this
    host lacks the environment."""
    # gvisor: available() names the runsc it lacks (isotax's own build, not on PATH).
    tool = {"native": None, "qemu": "qemu-system-x86_64", "docker": "dockerd", "gvisor": None,
            "microvm": "qemu-system-x86_64", "vm9p": "qemu-system-x86_64",
            "nspawn": "systemd-nspawn"}.get(kind, kind)
    if tool is not None and shutil.which(tool) is None:
        pytest.skip(f"{kind} is not installed (scripts/setup.sh installs it)")
    env = protocols.environments()[kind]()
    avail = env.available()
    if not avail.ok:
        pytest.skip(f"{kind} unavailable here: {avail}")
    inst = env.start(EnvSpec(name=name, kind=kind, image=image, workdir=workdir,
                             network=network))
    try:
        yield inst
    finally:
        inst.stop()


def running_in(inst: Instance, program: str) -> int:
    """Live (not zombie) processes named program inside inst."""
    done = inst.exec(["sh", "-c", 'cat /proc/[0-9]*/stat 2>/dev/null | awk \'{print $2, $3}\' '
                      '| grep -c "^($1) [^Z]"; true', "sh", program], 60)
    return int(done.stdout.strip() or 0)


@contextlib.contextmanager
def ran(plan_text: str, image: ImageArtifacts, tmp_path: Path,
        host: Mapping[str, Any] | None = None,
        status: str = "complete") -> Iterator[tuple[SQLiteStore, str]]:
    """plan_text run through the real Runner into a fresh store under tmp_path: (store, run
    id) once the run ended with `status`; the store is closed afterwards."""
    plan = parse_plan(plan_text)
    store = SQLiteStore(tmp_path / "isotax.db")
    run_id = new_run_id(plan.name)
    store.create_run(run_id, plan.name, plan_text, plan.seed, dict(host or {"hostname": "h"}))
    try:
        got = Runner(plan, plan_text, store, image, log=lambda m: None).run(run_id)
        assert got == status, got
        yield store, run_id
    finally:
        store.close()
