"""Instance.stop's contract, without a runtime (environments.base.Removals, the runner's
teardown): every removal is tried whatever the one before did, StopIncomplete alone is raised
and names what is left, and the runner reports it and goes on. (Every kind for real:
tests/integration/test_stop_contract.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from isotax.environments.base import Removals, remove_tree, undo_start
from isotax.protocols import StopIncomplete


def test_every_removal_is_tried_and_what_failed_is_named() -> None:
    done: list[str] = []

    def fails() -> None:
        done.append("bridge")
        raise OSError("Device or resource busy")

    out = Removals("runc container itx-x")
    out.attempt("the container", lambda: done.append("container"))
    out.attempt("bridge itx-br1", fails)
    out.attempt("its storage", lambda: done.append("storage"))
    with pytest.raises(StopIncomplete) as e:
        out.done()
    assert done == ["container", "bridge", "storage"]
    assert str(e.value) == ("runc container itx-x: could not remove bridge itx-br1 (OSError: "
                            "Device or resource busy); `isotax doctor --fix` removes what is "
                            "left")
    clean = Removals("x")
    clean.attempt("y", lambda: None)
    clean.done()  # nothing failed: nothing raised


def test_a_tree_already_gone_is_no_failure(tmp_path: Path) -> None:
    remove_tree(tmp_path / "never-made")
    (tmp_path / "d").mkdir()
    remove_tree(tmp_path / "d")
    assert not (tmp_path / "d").exists()


def test_a_failed_start_reports_its_own_error_not_the_stop() -> None:
    def stop() -> None:
        raise StopIncomplete("x: could not remove y")

    undo_start(stop)  # swallowed: the start's error is what the caller raises


def test_the_runner_reports_what_stop_left_and_goes_on() -> None:
    from isotax.run.runner import Runner

    said: list[str] = []

    class Leaves:
        def stop(self) -> None:
            raise StopIncomplete("qemu VM vm: could not remove bridge itx-brq1 (...); "
                                 "`isotax doctor --fix` removes what is left")

    class Broken:
        def stop(self) -> None:
            raise KeyError("bug")

    runner = Runner.__new__(Runner)
    runner.log = said.append  # type: ignore[method-assign]
    runner._stop_one("vm", Leaves())  # type: ignore[arg-type]
    runner._stop_one("odd", Broken())  # type: ignore[arg-type]
    assert "could not remove bridge itx-brq1" in said[0] and "doctor --fix" in said[0]
    assert said[1].startswith("[red]odd: stop failed (KeyError") and "doctor --fix" in said[1]
