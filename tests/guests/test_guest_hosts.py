"""The guest room (the test command's slow room: `bash scripts/test.sh --guests`): isotax on the
hosts its users run, Debian 13 and Debian 12 booting systemd on the unified cgroup v2
hierarchy, made here with debootstrap, isotax installed in each by its own setup.sh (in a
chroot), booted under QEMU (room.py). Inside each: `isotax system show`, `doctor`, `envs`, a
small plan (native, runc, crun, gVisor, Podman; a CPU, a network and a footprint workload),
`isotax cluster up` with a pod of each RuntimeClass, a QEMU VM beside native (emulation inside
emulation under TCG: timed, bounded, named in the facts, not a failure when it runs out of
time), and `doctor` after each, which must find nothing left behind.

Each guest's facts, its step times and its log are printed (pytest -s shows them) and kept in
$ISOTAX_GUEST_CACHE/<suite>-<key>/last/ for the notes."""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from pathlib import Path

import pytest
import room

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent
# Under TCG on the 2-vCPU development machine a guest's boot, plan and cluster take tens of
# minutes; the limit is there to end a hung guest, not to time it.
TIMEOUT_S = float(os.environ.get("ISOTAX_GUEST_TIMEOUT_S", 4 * 3600))
# The steps of inside.sh to run: fewer while one is being mended, say
# ISOTAX_GUEST_STEPS="show plan". The test then checks the plans of those steps alone.
STEPS = (os.environ.get("ISOTAX_GUEST_STEPS", "").split()
         or room.default_steps(room.accelerator()))


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "the guest room needs root (debootstrap, chroot, mkfs.ext4 -d)"
    for tool, pkg in (("debootstrap", "debootstrap"), ("qemu-system-x86_64", "qemu-system-x86"),
                      ("mkfs.ext4", "e2fsprogs")):
        if not shutil.which(tool):
            return f"{tool} is not installed (apt-get install {pkg}; scripts/setup.sh installs it)"
    return None


def _workload_image() -> None:
    """The workload image, built here once (a no-op when cached): each guest gets this
    host's copy, so guests and host measure the same bits."""
    from isotax import protocols
    from isotax.image.build import ensure_image
    ensure_image(protocols.image_recipe(), log=print)


def facts_of(text: str) -> dict[str, str]:
    """The guest's out/facts ("key: value" lines) as a dict; a key seen twice keeps both."""
    facts: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            facts[key] = f"{facts[key]}; {value}" if key in facts else value
    return facts


def measured(results: Path, plan: str) -> dict[str, dict[str, float | None]]:
    """{environment: {"workload metric": ratio to native}} of the newest run of that plan
    name among the results the guest copied back (its results.json). {} when none ran."""
    # A run's directory is <date>-<time>-<plan>-<tag>: "guest-room" must not match the runs
    # of "guest-room-vm" (the vm step's, newer) or "guest-room-pods".
    runs = sorted(p for p in results.glob("*/results.json")
                  if re.fullmatch(rf"\d{{8}}-\d{{6}}-{re.escape(plan)}-[0-9a-f]+", p.parent.name))
    if not runs:
        return {}
    out: dict[str, dict[str, float | None]] = {}
    for row in json.loads(runs[-1].read_text())["results"]:
        out.setdefault(row["environment"], {})[f"{row['workload']} {row['metric']}"] = \
            row["ratio"]
    return out


@pytest.mark.parametrize("suite", ["trixie", "bookworm"])
def test_guest_host(suite: str, tmp_path: Path) -> None:
    why = _why_not()
    if why:
        pytest.skip(why)
    _workload_image()
    g = room.Guest(suite)
    room.prepare(g, CHECKOUT)
    share = tmp_path / "share"
    share.mkdir()
    room.share_checkout(CHECKOUT, share, os.environ.get("ISOTAX_GUEST_REV") or None)
    shutil.copy(HERE / "inside.sh", share / "run.sh")
    for name in ("plan.toml", "pods.toml", "vm.toml"):
        shutil.copy(HERE / name, share / name)
    (share / "steps").write_text(" ".join(STEPS) + "\n")
    result = room.boot(g, share, TIMEOUT_S)
    last = g.dir / "last"
    shutil.rmtree(last, ignore_errors=True)
    shutil.copytree(share / "out", last, dirs_exist_ok=True)
    (last / "console.log").write_text(result.console)
    log = (share / "out/run.log").read_text(errors="replace") \
        if (share / "out/run.log").exists() else ""
    facts = facts_of((share / "out/facts").read_text()) \
        if (share / "out/facts").exists() else {}
    print(f"\n{suite}: {result.seconds:.0f} s under {result.accel}; facts: {facts}")
    panic = room.kernel_panic(result.console)
    assert not panic, f"the guest's kernel panicked (console in {last}): {panic}"
    assert not result.timed_out, f"the guest did not power off in {TIMEOUT_S:.0f} s; " \
        f"console's end:\n{result.console[-3000:]}"
    assert facts, f"the guest's room script never ran; console's end:\n{result.console[-3000:]}"
    # The host it claims to be: systemd as PID 1 on the unified hierarchy.
    assert facts["cgroup_fs"] == "cgroup2fs", facts
    assert facts["pid1"] == "systemd", facts
    for step, why in room.NOT_UNDER_TCG.items():
        if step not in STEPS and result.accel == "tcg":
            print(f"{suite}: step {step}: not run under TCG: {why}")
    for step, plan, name in (("plan", "plan.toml", "guest-room"),
                             ("cluster", "pods.toml", "guest-room-pods")):
        if step not in STEPS:
            print(f"{suite}: {name}: not run (ISOTAX_GUEST_STEPS={' '.join(STEPS)})")
            continue
        got = measured(share / "out/results", name)
        print(f"{suite}: {name}: {json.dumps(got, indent=1)}")
        want = {e["name"] for e in tomllib.loads((HERE / plan).read_text())["environments"]}
        assert set(got) == want, f"{name}: measured {sorted(got)}, the plan has {sorted(want)}"
    assert result.status == 0, f"{facts.get('failed')}; the log's end:\n{log[-6000:]}"
