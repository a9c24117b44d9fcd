"""The OCI bundle runc, crun and runsc run: its config.json (bundle_config), written under the
instance's workdir, over the workload image's rootfs, read-only (or, with the plan's storage =
"rootfs", an overlayfs over it, as Docker's overlay2 builds: OverlayRoot).

Everything here is pure or touches only the bundle's own directories; the runtime that runs
it is in runtime.py, the container in instance.py.
"""

from __future__ import annotations

import json
import os
import re
import resource
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from isotax.environments.base import GUEST_ENV, mem_total_bytes
from isotax.environments.container_fs import SCRATCH
from isotax.host import owners

STORAGES = ("volume", "rootfs")

# Docker's default capability set: what users of containers usually run with.
DEFAULT_CAPS = [
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
    "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
]
# runc's `spec` defaults: keep the kernel's knobs out of reach, as every engine does.
MASKED_PATHS = [
    "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
    "/proc/scsi",
]
READONLY_PATHS = [
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
]


def bundle_config(*, root: Path, args: Sequence[str], hostname: str, cgroups_path: str,
                  network: str | None, readonly: bool = True, vcpus: int | None = None,
                  memory_mib: int | None = None, extra_mounts: Sequence[Mapping[str, Any]] = (),
                  cpuset: tuple[str, str] | None = None) -> dict[str, Any]:
    """An OCI runtime config. network: None shares the host's netns, "new" gives an empty
    private one, anything else is the path of a netns to join. cpuset: (CPUs, memory nodes)
    of a NUMA placement (numa_node), in place of vcpus' "0-<vcpus-1>" on node 0."""
    mem_bytes = memory_mib * 1024 * 1024 if memory_mib else mem_total_bytes()
    # /dev/shm: half of memory, like a plain tmpfs, not Docker's 64 MB (MPI and databases use it).
    shm = f"size={mem_bytes // 2 // 1024}k"
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)

    def lim(v: int) -> int:
        return v if v != resource.RLIM_INFINITY else 2**64 - 1

    namespaces: list[dict[str, str]] = [{"type": t} for t in ("pid", "ipc", "uts", "mount")]
    if network == "new":
        namespaces.append({"type": "network"})
    elif network is not None:
        namespaces.append({"type": "network", "path": network})
    resources: dict[str, Any] = {"devices": [{"allow": False, "access": "rwm"}]}
    if cpuset is not None:
        # The runtime writes both into the container's cpuset cgroup before its PID 1 runs:
        # every process in the container, exec'd ones included, inherits them, and the
        # kernel allocates their memory on these nodes only.
        resources["cpu"] = {"cpus": cpuset[0], "mems": cpuset[1]}
    elif vcpus:
        resources["cpu"] = {"cpus": f"0-{vcpus - 1}" if vcpus > 1 else "0", "mems": "0"}
    if memory_mib:
        resources["memory"] = {"limit": memory_mib * 1024 * 1024}
    tmpfs = ["nosuid", "nodev"]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(args),
            "env": [f"{k}={v}" for k, v in {**GUEST_ENV, "TMPDIR": SCRATCH}.items()],
            "cwd": "/",
            "capabilities": {k: DEFAULT_CAPS for k in ("bounding", "effective", "permitted")},
            # The host's own limits: root here lacks CAP_SYS_RESOURCE, so a container may not
            # ask for more, and equal limits keep native and container runs comparable.
            "rlimits": [
                {"type": "RLIMIT_NOFILE", "soft": lim(nofile[0]), "hard": lim(nofile[1])},
                {"type": "RLIMIT_NPROC", "soft": lim(nproc[0]), "hard": lim(nproc[1])},
            ],
            "noNewPrivileges": True,
        },
        "root": {"path": str(root), "readonly": readonly},
        "hostname": hostname,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": [*tmpfs, "noexec", "mode=1777", shm]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
             "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
            {"destination": SCRATCH, "type": "tmpfs", "source": "tmpfs",
             "options": [*tmpfs, "mode=1777"]},
            {"destination": "/run", "type": "tmpfs", "source": "tmpfs",
             "options": [*tmpfs, "mode=755"]},
            *extra_mounts,
        ],
        "linux": {
            "namespaces": namespaces,
            "cgroupsPath": cgroups_path,
            "resources": resources,
            "maskedPaths": MASKED_PATHS,
            "readonlyPaths": READONLY_PATHS,
        },
    }


def write_bundle(bundle: Path, config: Mapping[str, Any]) -> None:
    bundle.mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_text(json.dumps(config, indent=1))


def new_container_id(name: str) -> str:
    """itx-<name>-<random>; the name squeezed to what runtimes accept in an id."""
    clean = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:24] or "c"
    return f"itx-{clean}-{owners.new_tag(3)}"


def probe_bundle(dirpath: Path) -> tuple[Path, list[dict[str, Any]]]:
    """A rootfs made of the host's own /usr, bound read-only: enough to run /bin/true without
    depending on a built image."""
    root = dirpath / "rootfs"
    root.mkdir()
    mounts: list[dict[str, Any]] = []
    for d in ("bin", "sbin", "lib", "lib64", "usr"):
        host = Path("/") / d
        if host.is_symlink():  # merged /usr: /bin -> usr/bin
            (root / d).symlink_to(os.readlink(host))
        elif host.is_dir():
            (root / d).mkdir()
            mounts.append({"destination": f"/{d}", "type": "bind", "source": str(host),
                           "options": ["rbind", "ro"]})
    return root, mounts


