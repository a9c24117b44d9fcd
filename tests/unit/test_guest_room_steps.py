"""The guest room's default steps (tests/guests/room.py, pure): every step under KVM; under TCG
all but the measured pods, which the room names with why instead of skipping them in silence."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS / "guests"))
import room  # noqa: E402


def test_kvm_runs_every_step_in_inside_sh_order() -> None:
    assert room.default_steps("kvm") == room.ALL_STEPS.split()
    script = (TESTS / "guests/inside.sh").read_text()
    for step in room.ALL_STEPS.split():
        assert f"{step})" in script or f'"{step}"' in script, f"inside.sh has no step {step}"


def test_tcg_leaves_out_only_the_measured_pods_and_says_why() -> None:
    tcg = room.default_steps("tcg")
    assert "cluster" not in tcg and set(room.ALL_STEPS.split()) - set(tcg) == {"cluster"}
    # A pod of each RuntimeClass still starts under TCG: the sandbox step stays.
    assert {"sandbox", "plan", "vm", "doctor"} <= set(tcg)
    why = room.NOT_UNDER_TCG["cluster"]
    assert "TCG" in why and "sandbox" in why
