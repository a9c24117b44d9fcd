"""The guest room's reading of a guest's console (tests/guests/room.py, pure): a kernel panic
becomes one line naming the oops, the process and the path, from the real consoles of the
Debian 13 guest whose kernel died under multi-threaded TCG while a gVisor pod ran, twice on
2026-11-29: a double fault in runsc, and an int3 left in patched kernel text (the trace of
code one emulated CPU changed while the other ran a stale translation of it)."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TESTS / "guests"))
import room  # noqa: E402

CONSOLE = (TESTS / "data/guests/console-trixie-gvisor-pod-double-fault.txt").read_text()


def test_a_panic_is_named_with_its_oops_process_and_path() -> None:
    said = room.kernel_panic(CONSOLE)
    assert said.startswith("Kernel panic - not syncing: Fatal exception in interrupt")
    assert "Oops: double fault" in said
    assert "Comm: runsc" in said
    assert "in kmem_cache_alloc_lru_noprof < alloc_inode < create_pipe_files < do_pipe2" in said
    assert "?" not in said  # the trace's unreliable frames are left out


def test_a_console_without_a_panic_says_nothing() -> None:
    before = CONSOLE.split("[ 3598.517875]")[0]
    assert "itxcni0" in before
    assert room.kernel_panic(before) == ""
    assert room.kernel_panic("") == ""


def test_the_other_panic_is_named_too() -> None:
    said = room.kernel_panic(
        (TESTS / "data/guests/console-trixie-gvisor-pod-int3.txt").read_text())
    assert said.startswith("Kernel panic - not syncing: Fatal exception in interrupt")
    assert "Oops: int3: 0000 [#1]" in said and "Comm: kube-scheduler" in said
    assert "in finish_task_switch.isra.0 < __schedule < schedule" in said
