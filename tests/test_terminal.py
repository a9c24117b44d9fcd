"""The summary printed at the end of a run: within 100 columns on a wide terminal, colour on
a terminal, plain text when piped."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from rich.text import Text

from isotax.analysis import analyze
from isotax.model import CellKey, CellStatus, Sample
from isotax.report.terminal import WIDTH, print_summary, summary_table
from isotax.store.base import EnvRecord
from isotax.store.sqlite import SQLiteStore

PLAN = """
name = "t"
repetitions = 3
[[environments]]
name = "native"
kind = "native"
[[environments]]
name = "a-long-environment-name"
kind = "runc"
[[environments]]
name = "vm"
kind = "qemu"
[[environments]]
name = "crun-on-the-host-network"
kind = "crun"
[[environments]]
name = "gvisor-systrap-netstack"
kind = "gvisor"
[[environments]]
name = "docker-bridge-overlay"
kind = "docker"
[[workloads]]
name = "fio"
params = { pattern = "randread", bs = "4k", iodepth = [1, 16] }
"""

ENVS = (("native", "native"), ("a-long-environment-name", "runc"), ("vm", "qemu"),
        ("crun-on-the-host-network", "crun"), ("gvisor-systrap-netstack", "gvisor"),
        ("docker-bridge-overlay", "docker"))


def test_the_table_alone_is_wider_than_the_limit(tmp_path: Path) -> None:
    """So the width tests below can fail: unlimited, this table takes more than 100."""
    buf = io.StringIO()
    Console(file=buf, width=300).print(summary_table(_data(tmp_path)))
    assert max(len(line) for line in buf.getvalue().splitlines()) > WIDTH


def _data(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = SQLiteStore(tmp_path / "isotax.db")
    store.create_run("r", "t", PLAN, 1, {"hostname": "h"})
    for env, kind in ENVS:
        store.put_environment(EnvRecord("r", env, kind, True, "", {"kind": kind}, {}, {}))
    for depth in (1, 16):
        params = {"pattern": "randread", "bs": "4k", "iodepth": depth, "size_mib": 64,
                  "runtime_s": 10, "ramp_s": 2, "direct": True, "ioengine": "libaio",
                  "numjobs": 1}
        for rep in (1, 2, 3):
            for env, v in (("native", 100 + rep), ("a-long-environment-name", 60 + rep),
                           ("vm", 100 + 2 * rep), ("crun-on-the-host-network", 90 + rep),
                           ("gvisor-systrap-netstack", 30 + rep),
                           ("docker-bridge-overlay", 95 + rep)):
                store.commit_cell("r", CellKey(env, "fio", params, rep), "1", CellStatus.OK,
                                  "", 0, 1, [Sample("read_bw", v, "MB/s")])
    return analyze(store, "r")


def test_fits_100_columns_with_colour_on_a_terminal(tmp_path: Path) -> None:
    buf = io.StringIO()
    print_summary(_data(tmp_path), Console(file=buf, width=200, force_terminal=True,
                                           color_system="standard"))
    text = buf.getvalue()
    assert "\x1b[" in text  # colour on a terminal
    plain = Text.from_ansi(text).plain
    assert max(len(line) for line in plain.splitlines()) <= WIDTH
    assert "fio" in text and "≈" in text  # vm within noise


def test_plain_when_piped(tmp_path: Path) -> None:
    buf = io.StringIO()
    print_summary(_data(tmp_path), Console(file=buf, width=200))  # not a terminal
    text = buf.getvalue()
    assert "\x1b[" not in text
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert "a-long-envir" in text  # folded within its column, not cut off the edge
