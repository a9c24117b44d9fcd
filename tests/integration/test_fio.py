"""fio for real: the workload run natively, in runc/crun (volume and overlayfs rootfs) and in
the VM."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import why_not_root_and

from isotax import protocols
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec, Instance
from isotax.workloads.fio import Fio

SHORT = {"pattern": "randread", "bs": "4k", "iodepth": 16, "numjobs": 1, "size_mib": 8,
         "runtime_s": 2, "ramp_s": 0}


CASES = [  # kind, storage, network, the words describe()["storage"] must contain, fs type
    ("native", "volume", "host", "host directory", "ext2/ext3"),
    ("runc", "volume", "host", "bind-mounted volume", "ext2/ext3"),
    ("runc", "rootfs", "bridge", "overlayfs rootfs", "overlayfs"),
    ("crun", "rootfs", "host", "overlayfs rootfs", "overlayfs"),
    ("qemu", "volume", "none", "virtio-blk raw disk, cache=", "ext2/ext3"),
]


def _why_not(kind: str) -> str | None:
    tools = {"native": ["fio"], "runc": ["runc"], "crun": ["crun"],
             "qemu": ["qemu-system-x86_64", "qemu-img", "mkfs.ext4"]}[kind]
    return why_not_root_and(*tools, root_for="containers, mounts, the VM and the workload image")


@pytest.fixture(params=CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def case(request: pytest.FixtureRequest, image: ImageArtifacts
         ) -> Iterator[tuple[Instance, str, str, set[str]]]:
    from isotax.run.leaks import find_leaks

    kind, storage, net, words, fs = request.param
    if (why := _why_not(kind)) is not None:
        pytest.skip(why)
    before = set(find_leaks())
    # Under /var/tmp like the runner's workdirs: on the host's disk even where /tmp is tmpfs.
    workdir = Path(tempfile.mkdtemp(prefix="itx-test-fio-", dir="/var/tmp"))
    spec = EnvSpec(name=f"fio-{kind}", kind=kind, image=image, workdir=workdir, network=net,
                   storage=storage, vcpus=2 if kind == "qemu" else None,
                   memory_mib=1024 if kind == "qemu" else None)
    inst = protocols.environments()[kind]().start(spec)
    try:
        yield inst, words, fs, before
    finally:
        inst.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.integration
def test_fio_short_job_everywhere(case: tuple[Instance, str, str, set[str]]) -> None:
    from isotax.run.leaks import find_leaks

    inst, words, fs, before = case
    d = inst.facts().display()
    assert words in d["storage"]
    # What names this instance's resources (other tests may create and remove their own
    # meanwhile, so only leaks that name this instance count).
    ours = [v for k, v in d.items() if k in ("container", "bridge", "qemu_pid") and v]
    ours.append("itx-test-fio-")
    wl = Fio()
    wl.prepare(inst, SHORT, None)
    # The layout wrote the file: reads will read written blocks.
    size = inst.exec(["stat", "-c", "%s", f"{inst.data_dir}/itx-fio-8m.0.0"], 30).check()
    assert int(size.stdout) == 8 << 20
    samples = wl.run(inst, SHORT, None)
    m = {s.metric: s for s in samples}
    assert m["read_iops"].value > 0 and m["read_bw"].value > 0
    assert 0 < m["read_clat_p50"].value <= m["read_clat_p99"].value
    lab = m["read_iops"].labels
    assert lab["fs"] == fs and lab["fio"] == "3.33"
    # O_DIRECT works on ext4, overlayfs and the VM's ext4 here: no silent fallback.
    assert lab["direct"] == 1 and lab["ioengine"] == "libaio" and "io_note" not in lab
    assert inst.exec(["stat", "-f", "-c", "%T", inst.data_dir], 30).check().stdout.strip() == fs
    inst.stop()  # idempotent: the fixture stops it again
    # The workdir itself is the fixture's, removed after the test.
    assert not [x for x in set(find_leaks()) - before if any(o in x for o in ours)
                and not x.startswith("directory /var/tmp/itx-test-fio-")]
