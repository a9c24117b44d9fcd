"""VM tuning for real: the host-side mechanisms that need root (hugepages, pinning)."""

from __future__ import annotations

import mmap
import os
import subprocess
import time
from pathlib import Path

import pytest
from support import requires_root_and

from isotax.environments.vm import qemu_tuning

needs_root = requires_root_and(root_for="sysctl vm.nr_hugepages, mount and sched_setaffinity of "
                                        "another process")


@pytest.mark.integration
@needs_root
def test_hugepage_reservation_is_given_back_exactly(tmp_path: Path, monkeypatch:
                                                    pytest.MonkeyPatch) -> None:
    from isotax.run.leaks import parse_mountinfo

    before = int(qemu_tuning.NR_HUGEPAGES.read_text())
    r = qemu_tuning.HugepageReservation("qtest1", 8)  # 4 pages
    try:
        r.acquire()
    except qemu_tuning.HugepageError as e:
        pytest.skip(f"this host cannot reserve 4 hugepages: {e}")
    try:
        assert int(qemu_tuning.NR_HUGEPAGES.read_text()) == before + 4
        assert str(r.mountpoint) in parse_mountinfo(Path("/proc/self/mountinfo").read_text())
        assert any("itx-qtest1" in x for x in qemu_tuning.leaked_hugepage_reservations())
        # A file mapped there takes a hugepage (hugetlbfs has no write(): QEMU maps it too).
        free = r.free_pages()
        f = r.mountpoint / "x"
        with open(f, "w+b") as fh:
            fh.truncate(2 << 20)
            with mmap.mmap(fh.fileno(), 2 << 20) as m:
                m[0] = 1
                assert r.free_pages() == free - 1
        f.unlink()
    finally:
        assert r.release() == []
        assert r.release() == []  # idempotent
    assert int(qemu_tuning.NR_HUGEPAGES.read_text()) == before
    assert not r.mountpoint.exists()
    assert not any("itx-qtest1" in x for x in qemu_tuning.leaked_hugepage_reservations())


@pytest.mark.integration
@needs_root
def test_hugepages_of_a_vm_bound_to_a_node_come_from_its_pool() -> None:
    """numa_node: the node's own counter rises and falls back; the host-wide one follows."""
    node = qemu_tuning.node_nr_hugepages(0)
    if not node.exists():
        pytest.skip(f"no {node}: this kernel shows no per-node hugepage pools")
    before, total = int(node.read_text()), int(qemu_tuning.NR_HUGEPAGES.read_text())
    r = qemu_tuning.HugepageReservation("qtestn", 8, node=0)  # 4 pages
    try:
        r.acquire()
    except qemu_tuning.HugepageError as e:
        pytest.skip(f"node 0 cannot give 4 hugepages: {e}")
    try:
        assert int(node.read_text()) == before + 4
        assert int(qemu_tuning.NR_HUGEPAGES.read_text()) == total + 4
        assert any("itx-qtestn" in x and str(node) in x
                   for x in qemu_tuning.leaked_hugepage_reservations())
    finally:
        assert r.release() == []
    assert int(node.read_text()) == before
    assert not any("itx-qtestn" in x for x in qemu_tuning.leaked_hugepage_reservations())


@pytest.mark.integration
@needs_root
def test_pinning_a_thread_of_another_process() -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one usable CPU: pinning cannot be told from no pinning")
    p = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.05)
        cpu = max(os.sched_getaffinity(0))
        assert qemu_tuning.pin_vcpus([(0, p.pid)], [cpu]) == [f"vcpu0:{p.pid}->cpu{cpu}"]
        assert os.sched_getaffinity(p.pid) == {cpu}
    finally:
        p.kill()
        p.wait()
