"""isotax.parsers.procfs, the one reader of each /proc, /sys and cgroup format, on captures of
the real files (tests/data)."""

from __future__ import annotations

import pytest
from support import DATA

from isotax.parsers import procfs


def test_stat_per_cpu_and_total_in_ticks() -> None:
    s = procfs.parse_stat((DATA / "telemetry/proc-stat.txt").read_text())
    assert sorted(s.cpus) == ["cpu0", "cpu1"]
    assert s.total is not None and len(s.total) == len(procfs.STAT_COLUMNS)
    assert all(len(v) == len(procfs.STAT_COLUMNS) for v in s.cpus.values())
    # the aggregate line is the sum of the per-CPU ones, column by column (the kernel rounds
    # each line on its own)
    for total, col in zip(s.total, zip(*s.cpus.values(), strict=True), strict=True):
        assert abs(total - sum(col)) <= len(s.cpus)
    assert s.ctxt > 0 and s.intr > 0


def test_stat_short_lines_are_padded_and_other_text_refused() -> None:
    s = procfs.parse_stat("cpu  1 2 3 4\ncpu0 1 2 3 4\n")  # an old kernel's, or gVisor's
    assert s.total == (1, 2, 3, 4, 0, 0, 0, 0, 0, 0) and (s.ctxt, s.intr) == (0, 0)
    with pytest.raises(ValueError):
        procfs.parse_stat("intr 5\nctxt 3\n")


def test_pid_stat_of_a_real_process_and_of_a_name_with_parens() -> None:
    init = procfs.parse_pid_stat((DATA / "proc/stat-process_api.txt").read_text())
    assert (init.name, init.state, init.ppid) == ("process_api", "S", 0)
    assert (init.utime, init.stime, init.cutime, init.cstime) == (2422, 7656, 1339841, 477761)
    assert init.starttime == 24 and init.own == 2422 + 7656  # reaped children's left out
    odd = procfs.parse_pid_stat((DATA / "proc/stat-paren-comm.txt").read_text())
    assert (odd.name, odd.ppid, odd.starttime) == ("a) (b", 1, 952206)
    with pytest.raises(ValueError):
        procfs.parse_pid_stat("1 (x) S 0 0")


def test_task_stat_has_the_fields_of_a_process() -> None:
    first = (DATA / "telemetry/task-stat.txt").read_text().split("\n\n")[0]
    assert procfs.parse_pid_stat(first).name == "process_api"


def test_cmdline() -> None:
    assert procfs.parse_cmdline(b"runsc-sandbox\0--root\0/run/x\0") == [
        "runsc-sandbox", "--root", "/run/x"]
    assert procfs.parse_cmdline(b"") == []
    assert procfs.parse_cmdline(b"a\xff\0") == ["a\ufffd"]


def test_pid_cgroup_v1_and_v2() -> None:
    text = (DATA / "engines/proc-cgroup-docker.txt").read_text()
    v1, v2 = procfs.parse_pid_cgroup(text, "memory")
    assert v1 is not None and v1.startswith("/itx-docker-") and v2 == v1
    assert procfs.parse_pid_cgroup(text, "cpuacct")[0] == v1  # "cpu,cpuacct" or alone
    assert procfs.parse_pid_cgroup("0::/itx-y\n", "cpuacct") == (None, "/itx-y")


def test_meminfo_in_bytes_and_counts() -> None:
    m = procfs.parse_meminfo((DATA / "proc/meminfo.txt").read_text())
    assert m["MemTotal"] == 24684084 * 1024
    assert m["MemAvailable"] == 23977296 * 1024
    assert m["HugePages_Free"] == 0 and m["Hugepagesize"] == 2048 * 1024
    with pytest.raises(ValueError):
        procfs.parse_meminfo("")


def test_mountinfo() -> None:
    mounts = procfs.parse_mountinfo((DATA / "network/mountinfo-with-netns.txt").read_text())
    proc = next(m for m in mounts if m.point == "/proc")
    assert (proc.root, proc.fstype, proc.source, proc.options) == ("/", "proc", "proc",
                                                                    "rw,relatime")
    line = r"36 27 0:5 /a\040b /mnt/x\040y rw - ext4 /dev/vda rw"
    (m,) = procfs.parse_mountinfo(line + "\nnot a mount line\n")
    assert (m.root, m.point, m.fstype, m.source) == ("/a b", "/mnt/x y", "ext4", "/dev/vda")


def test_hybrid_cgroup_mountinfo() -> None:
    mounts = procfs.parse_mountinfo((DATA / "oci/mountinfo-hybrid.txt").read_text())
    assert any(m.fstype == "cgroup2" and m.point == "/sys/fs/cgroup/unified" for m in mounts)
    assert any(m.fstype == "cgroup" for m in mounts)


@pytest.mark.parametrize(("text", "cpus"), [
    ("0-3,8,10-11\n", [0, 1, 2, 3, 8, 10, 11]),
    ("0\n", [0]),
    ("", []),
    ("0-2, 5", [0, 1, 2, 5]),
])
def test_cpulist(text: str, cpus: list[int]) -> None:
    assert procfs.parse_cpulist(text) == cpus


def test_cpulist_of_this_capture_and_nonsense() -> None:
    assert procfs.parse_cpulist((DATA / "numa/node0-cpulist.txt").read_text()) == [0, 1]
    for bad in ("a-b", "-1", "1-x"):
        with pytest.raises(ValueError):
            procfs.parse_cpulist(bad)


def test_pids_and_selected() -> None:
    assert procfs.parse_pids("12\n345\n") == [12, 345]
    assert procfs.parse_pids("") == []
    assert procfs.parse_selected("always defer defer+madvise [madvise] never\n") == "madvise"
    assert procfs.parse_selected("[none] mq-deadline") == "none"
    assert procfs.parse_selected("1\n") is None
