"""Memory footprint: parsers on real /proc text and the process tree."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import DATA

from isotax.parsers import procfs
from isotax.telemetry.footprint import (
    parse_smaps_rollup,
    program_name,
    resident_bytes,
    with_descendants,
)
from isotax.workloads.density import parse_mem_available


def test_smaps_rollup_of_a_real_process() -> None:
    f = parse_smaps_rollup((DATA / "proc" / "smaps_rollup-itx-ready.txt").read_text())
    assert f["Pss"] == 688 * 1024 and f["Rss"] == 692 * 1024
    assert f["Pss_Anon"] + f["Pss_File"] + f["Pss_Shmem"] == f["Pss"]


def test_hugetlb_pages_count_beside_pss() -> None:
    f = parse_smaps_rollup((DATA / "proc" / "smaps_rollup-itx-ready.txt").read_text())
    assert f["Private_Hugetlb"] == f["Shared_Hugetlb"] == 0  # the fields are there
    assert resident_bytes(f) == f["Pss"]
    # A VM whose 1 GiB of RAM is on hugetlbfs: PSS alone would miss it.
    assert resident_bytes({**f, "Private_Hugetlb": 1 << 30}) == f["Pss"] + (1 << 30)


def test_smaps_rollup_refuses_other_text() -> None:
    with pytest.raises(ValueError, match="Pss"):
        parse_smaps_rollup((DATA / "proc" / "meminfo.txt").read_text())


def test_ppid_of_a_process_whose_name_holds_parentheses() -> None:
    # The command name here is "a) (b": splitting on spaces or the first ")" gets it wrong.
    line = (DATA / "proc" / "stat-paren-comm.txt").read_text()
    assert line.startswith("12698 (a) (b) S ")
    assert procfs.parse_pid_stat(line).ppid == 1


def test_mem_available_from_real_meminfo() -> None:
    assert parse_mem_available((DATA / "proc" / "meminfo.txt").read_text()) == 23977296 * 1024
    with pytest.raises(ValueError, match="MemAvailable"):
        parse_mem_available((DATA / "proc" / "smaps_rollup-itx-ready.txt").read_text())


def test_program_name_of_a_self_reexecuted_process() -> None:
    assert program_name("exe\n", b"runsc-sandbox\0--root=/run/x\0boot\0") == "runsc-sandbox"
    assert program_name("qemu-system-x86\n", b"/usr/bin/qemu-system-x86_64\0") == \
        "qemu-system-x86"
    assert program_name("exe\n", b"") == "exe"


def test_descendants_follow_the_tree_and_nothing_else() -> None:
    parents = {1: 0, 10: 1, 11: 10, 12: 11, 13: 10, 20: 1, 21: 20}
    assert with_descendants([10], parents) == [10, 11, 12, 13]
    assert with_descendants([12, 21], parents) == [12, 21]
    assert with_descendants([99], parents) == [99]  # gone from the table: itself only


def test_sentry_stubs_are_named_whatever_their_pid_order(tmp_path: Path) -> None:
    """gVisor's systrap stubs are runsc re-executions with no argv (comm "exe"): named by their
    place below the Sentry, also when a stub's PID is lower than its parent's (PIDs wrap)."""
    from isotax.telemetry.footprint import STUB, program_names

    tree = {30: ("exe", b"runsc-sandbox\0--root=/run/isotax/runsc\0"), 5: ("exe", b""),
            40: ("exe", b""), 50: ("exe", b""), 60: ("exe", b"runsc-gofer\0--root=x\0")}
    for pid, (comm, cmdline) in tree.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
        (tmp_path / str(pid) / "cmdline").write_bytes(cmdline)
    parents = {30: 1, 40: 30, 5: 40, 50: 60, 60: 1}  # 5: a stub of a stub, lower PID
    names = program_names(list(tree), parents, proc=tmp_path)
    assert names == {30: "runsc-sandbox", 40: STUB, 5: STUB, 50: "exe", 60: "runsc-gofer"}
