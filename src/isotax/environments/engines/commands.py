"""An engine container's command lines, from the plan's choices: `<engine> run` and `<engine>
exec` (pure, golden-tested), the ports it publishes, its limits, and the ready marker in its
log. engine.py has the axes these choices stand for.
"""

from __future__ import annotations

import re
import resource
from collections.abc import Sequence
from dataclasses import dataclass

from isotax import protocols
from isotax.environments.base import GUEST_ENV, READY_HELPER, READY_MARKER, mem_total_bytes
from isotax.environments.container_fs import SCRATCH, VOLUME_DIR
from isotax.environments.engines.client import LABEL
from isotax.environments.runtime_cli import under_timeout
from isotax.host import owners
from isotax.protocols import EnvSpec

NETWORKS = ("bridge", "host")
STORAGES = ("rootfs", "volume", "bind")  # "bind" only through options.storage
RUNTIMES = ("runc", "crun", "runsc", "kata")
KATA_SHIM = "containerd-shim-kata-v2"
KATA_RUNTIME_TYPE = "io.containerd.kata.v2"
KATA_INSTALL = ("install Kata Containers 3 (its release tarball puts containerd-shim-kata-v2 in "
                "/opt/kata/bin; link it into /usr/local/bin) on a host with hardware KVM; "
                "meanwhile kind \"vm9p\" is the same shape (a container's rootfs in a microVM)")

# -- the plan's choices -------------------------------------------------------------------------

@dataclass(frozen=True)
class Choices:
    """What the plan asks of an engine container, validated."""

    network: str
    storage: str
    runtime: str

    @classmethod
    def of(cls, spec: EnvSpec, engine: str, options: Sequence[str] = ()) -> Choices:
        """options: the engine's own, beside storage and runtime."""
        storage = str(spec.options.get("storage", spec.storage))
        runtime = str(spec.options.get("runtime", "runc"))
        allowed = ("storage", "runtime", *options)
        unknown = set(spec.options) - set(allowed)
        if unknown:
            raise ValueError(f"{engine}: unknown option(s) {', '.join(sorted(unknown))}; "
                             f"use {', '.join(allowed)}")
        if spec.network not in NETWORKS:
            raise ValueError(f"{engine}: network {spec.network!r}; use one of "
                             + ", ".join(NETWORKS))
        if storage not in STORAGES:
            raise ValueError(f"{engine}: storage {storage!r}; use storage = \"rootfs\" or "
                             "\"volume\", or options.storage = \"bind\"")
        if runtime not in RUNTIMES:
            raise ValueError(f"{engine}: options.runtime {runtime!r}; use one of "
                             + ", ".join(RUNTIMES))
        return cls(spec.network, storage, runtime)


def published_ports() -> list[tuple[int, str]]:
    """(port, proto) for every port a registered workload's server listens on (its `ports`):
    TCP, plus UDP where the workload declares it (the request-response tests' variants)."""
    ports = protocols.workload_ports()
    out = [(n, "tcp") for n in sorted({p.number for p in ports if "tcp" in p.protocols})]
    out += [(p.number, "udp") for p in ports if "udp" in p.protocols]
    return out


def new_name(name: str) -> str:
    """itx-<plan name>-<random>: a container name engines accept (and leaks.py recognises)."""
    clean = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:24] or "c"
    return f"itx-{clean}-{owners.new_tag(3)}"



# Podman's runc refuses an nproc limit above this here ("error setting rlimit type 6:
# operation not permitted" at 65536 with a host hard limit of 96365; 32768 works): both engines
# get at most this, so docker and podman containers run with the same limits.
NPROC_CAP = 32768


def host_limits() -> list[str]:
    """--ulimit flags with the host's own nofile/nproc limits (nproc at most NPROC_CAP), as
    oci/bundle.py gives its bundles: root here lacks CAP_SYS_RESOURCE, so podman's defaults (higher)
    fail, and equal limits keep native and container runs comparable."""
    out = []
    for flag, res in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        soft, hard = resource.getrlimit(res)
        if flag == "nproc":
            hard = NPROC_CAP if hard == resource.RLIM_INFINITY else min(hard, NPROC_CAP)
        elif hard == resource.RLIM_INFINITY:
            continue  # unlimited: the engine's own default is no lower
        soft = hard if soft == resource.RLIM_INFINITY else min(soft, hard)
        out += ["--ulimit", f"{flag}={soft}:{hard}"]
    return out


def guest_env_flags() -> list[str]:
    return [a for k, v in {**GUEST_ENV, "TMPDIR": SCRATCH}.items() for a in ("--env", f"{k}={v}")]


def run_argv(*, name: str, image: str, choices: Choices, publish_on: str | None,
             runtime_flags: Sequence[str], volume: str | None, bind_dir: str | None,
             vcpus: int | None = None, memory_mib: int | None = None,
             limits: Sequence[str] = (), hold: Sequence[str] = (READY_HELPER, "--hold"),
             extra: Sequence[str] = (), cpuset: tuple[str, str] | None = None) -> list[str]:
    """The arguments of `<engine> run` (after the engine's own global flags). Pure.

    publish_on: the host address the ports are published on (network "bridge"; None: none
    published, the load generator maps them to the container's address); runtime_flags:
    the engine's spelling of the runtime (`--runtime X`); volume: the named volume (storage
    "volume"); bind_dir: the host directory (storage "bind"); cpuset: (CPUs, memory nodes) of
    a NUMA placement (numa_node), in place of vcpus' "0-<vcpus-1>"."""
    mem = memory_mib * 1024 * 1024 if memory_mib else mem_total_bytes()
    argv = ["run", "--detach", "--name", name, "--hostname", name[:63],
            "--label", f"{LABEL}=1", *runtime_flags, *extra]
    if choices.network == "host":
        argv += ["--network", "host"]
    else:
        argv += ["--network", "bridge"] if not any(e.startswith("--network") for e in extra) \
            else []
        for port, proto in published_ports() if publish_on else []:
            argv += ["--publish", f"{publish_on}:{port}:{port}/{proto}"]
    # Scratch and /run in tmpfs as in oci/bundle.py's bundles; /dev/shm half of memory, not the
    # engines' 64 MB (MPI and databases use it).
    argv += ["--tmpfs", f"{SCRATCH}:rw,nosuid,nodev,mode=1777",
             "--tmpfs", "/run:rw,nosuid,nodev,mode=755",
             "--shm-size", f"{mem // 2 // 1024}k", *limits]
    if cpuset is not None:
        # The engine's runtime writes both into the container's cpuset cgroup: every
        # process of the container (exec'd ones too) runs on these CPUs, its memory on
        # these nodes.
        argv += ["--cpuset-cpus", cpuset[0], "--cpuset-mems", cpuset[1]]
    elif vcpus:
        argv += ["--cpuset-cpus", f"0-{vcpus - 1}" if vcpus > 1 else "0"]
    if memory_mib:
        argv += ["--memory", f"{memory_mib}m"]
    if choices.storage == "volume":
        if not volume:
            raise ValueError("storage volume needs a volume name")
        argv += ["--mount", f"type=volume,source={volume},target={VOLUME_DIR}"]
    elif choices.storage == "bind":
        if not bind_dir:
            raise ValueError("storage bind needs a host directory")
        argv += ["--mount", f"type=bind,source={bind_dir},target={VOLUME_DIR}"]
    argv += [*guest_env_flags(), "--workdir", "/", image, *hold]
    return argv


def exec_argv(name: str, argv: Sequence[str], timeout: float) -> list[str]:
    """The arguments of `<engine> exec`. Pure. The program runs under coreutils' `timeout`
    inside the container: killing the engine's client does not stop an exec'd process there
    (neither engine forwards signals without a terminal), so the time limit has to be
    enforced inside. Its exit status 124 is the same "timed out" as run_host's."""
    return ["exec", *guest_env_flags(), "--workdir", "/", name, *under_timeout(argv, timeout)]


# -- logs -----------------------------------------------------------------------------------------

def ready_from_log(text: str) -> int | None:
    """The CLOCK_MONOTONIC ns of the first `ITX-READY <ns>` in an engine's container log, in
    Docker's json-file format ({"log":"ITX-READY 12\\n",...}) or Podman's k8s-file format
    (`<time> stdout F ITX-READY 12`). Pure."""
    m = re.search(rf"{READY_MARKER} (\d+)(?:\\n|\s|$)", text)
    return int(m.group(1)) if m else None


