"""The summary printed at the end of a run: within 100 columns on a wide terminal, colour on
a terminal, plain text when piped."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from rich.console import Console
from rich.text import Text

from isotax.analysis.report_data import ReportData, analyze
from isotax.host.facts.description import EnvironmentDescription
from isotax.model import CellKey, CellStatus, Sample
from isotax.report.terminal import WIDTH, print_summary, summary_table
from isotax.store.base import CellOutcome, EnvRecord
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
        store.put_environment(EnvRecord("r", env, kind, True, "",
                                        EnvironmentDescription.from_stored({"kind": kind}), {}, {}))
    for depth in (1, 16):
        params = {"pattern": "randread", "bs": "4k", "iodepth": depth, "size_mib": 64,
                  "runtime_s": 10, "ramp_s": 2, "direct": True, "ioengine": "libaio",
                  "numjobs": 1}
        for rep in (1, 2, 3):
            for env, v in (("native", 100 + rep), ("a-long-environment-name", 60 + rep),
                           ("vm", 100 + 2 * rep), ("crun-on-the-host-network", 90 + rep),
                           ("gvisor-systrap-netstack", 30 + rep),
                           ("docker-bridge-overlay", 95 + rep)):
                store.commit_cell("r", CellKey(env, "fio", params, rep), "1",
                                  CellOutcome(CellStatus.OK, "",
                                              [Sample("read_bw", v, "MB/s")]), 0, 1)
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


def _seventeen() -> list[str]:
    """The warnings of a realistic run on a noisy host without KVM: 17 paragraphs."""
    from isotax.analysis.report_data import ReportWarning as W

    envs = ["runc-bridge", "crun", "gvisor-systrap", "docker-bridge", "podman", "qemu-tuned",
            "qemu-stock"]
    out = [W.HIGH_VARIANCE.say(env=e, count=3, workload="fio", metric="read_iops", cv=0.08)
           for e in envs]
    out += [W.OUTLIERS.say(env=e, count=2, metrics="xz throughput") for e in envs[:4]]
    out += [W.EMULATED.say(env="qemu-tuned"), W.EMULATED.say(env="qemu-stock")]
    out += [W.PARITY.say("qemu-tuned", problem="qemu-tuned was given memory_mib = 2048 (its "
                         "guest sees 1955 MiB), native has all of the host's 23960 MiB: a VM "
                         "cannot be given all of its host's memory; run with parity = \"flag\" "
                         "and have the report list it")]
    out += [W.VERSION_MISMATCH.say(tool="xz-utils", env="runc-bridge", other="5.4.1-0.2",
                                   base="native", version="5.4.1-1",
                                   fix="install the same package version on the host")]
    out += [W.INCOMPLETE.say(status="interrupted", run="20250101-120000-ab12")]
    out.append("a plain warning without a kind")
    return out


def test_warnings_grouped_one_line_per_kind_most_important_first() -> None:
    from isotax.analysis.report_data import ReportWarning as W
    from isotax.report.terminal import grouped_warnings

    warnings = _seventeen()
    lines = grouped_warnings(warnings)
    assert len(warnings) == 17 and len(lines) == 7
    assert lines[0] == ("warning: the run is interrupted: `isotax run --resume "
                        "20250101-120000-ab12` finishes it.")  # one, short: in full
    assert lines[1] == ("warning: emulated, not KVM (2): qemu-tuned, qemu-stock; see the "
                        "report's Warnings")
    assert lines[2].startswith("warning: unequal resources (1): qemu-tuned;")  # one, long
    assert lines[3].startswith("warning: xz-utils differs between runc-bridge")
    assert lines[4].startswith("warning: high variance (7): runc-bridge, ")
    assert " and " in lines[4] and lines[4].endswith(" more; see the report's Warnings")
    assert lines[5] == ("warning: outlying values (4): runc-bridge, crun and 2 more; see the "
                        "report's Warnings")  # all four would take 105 columns
    assert lines[6] == "warning: a plain warning without a kind"  # no kind: last, in full
    assert all(len(ln) <= WIDTH for ln in lines if ln not in ("warning: " + w for w in warnings))
    assert all(len(ln) <= 200 + len("warning: ") for ln in lines)
    # Narrower: fewer names, still the count of the rest.
    narrow = grouped_warnings(warnings, 80)[4]
    assert narrow == ("warning: high variance (7): runc-bridge and 6 more; see the report's "
                      "Warnings")
    assert grouped_warnings(warnings, 50)[4] == \
        "warning: high variance (7); see the report's Warnings"  # not even one name fits
    assert grouped_warnings([W.FEW_REPETITIONS.say(n=1)] * 2)[0] == \
        "warning: too few repetitions (2); see the report's Warnings"  # no subject to name
    assert grouped_warnings([]) == []


def test_every_kind_has_a_short_title_and_a_subject() -> None:
    from isotax.analysis.report_data import ReportWarning, Warned

    assert all(0 < len(k.title) <= 40 for k in ReportWarning)
    w = ReportWarning.FAILURES.say(count=2, env="crun")
    assert isinstance(w, Warned) and (w.kind, w.subject) == (ReportWarning.FAILURES, "crun")
    assert w == "2 cell(s) of crun failed (see Failures); rerun or fix, then `isotax run " \
        "--resume` finishes an interrupted run."  # the text every report prints, unchanged


def test_printed_warnings_fit_and_read_no_markup() -> None:
    from isotax.analysis.report_data import ReportWarning as W
    from isotax.report.terminal import print_warnings

    # print_warnings reads the warnings, and what their counts count (nothing here)
    data = cast(ReportData, SimpleNamespace(warnings=[
        *_seventeen(), W.HIGH_VARIANCE.say(env="x", count=1, workload="a", metric="b", cv=0.1)],
        sequential=None, failures=[], outliers=[], unwatched=0, rejudged=[]))
    buf = io.StringIO()
    print_warnings(data, Console(file=buf, width=200, force_terminal=True,
                                 color_system="standard"))
    plain = Text.from_ansi(buf.getvalue()).plain
    assert max(len(line) for line in plain.splitlines()) <= WIDTH
    assert "\x1b[" in buf.getvalue() and plain.count("warning:") == 7
    assert "[adaptive]" not in plain  # grouped: the long text is not shown
    assert "high variance (8)" in plain
