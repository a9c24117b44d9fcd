"""Container engines (Docker, Podman) as isotax environments: what both have in common.

An engine runs the same workload image as runc and crun, imported from the image's tar
(`ImageArtifacts.tar`) as `itx-image:<recipe hash>` with the label `isotax`, once per recipe
hash. A container is `<engine> run --detach` of the image with isotax's `itx-ready --hold` as
PID 1; workloads run through `<engine> exec`. The plan's axes map onto the engine's own options:

  network  "bridge": the engine's bridge (its NAT, forwarding and isolation rules);
           "host": the host's network stack (`--network host`).
  ports    Both engines reserve every port they publish with `-p` by holding a listening
           socket on the host (dockerd's docker-proxy, or its "dummy proxy" when the userland
           proxy is off; Podman's conmon). A socket on ADDR:PORT makes a later wildcard bind
           of PORT fail, so a container with `-p` for isotax's server ports would keep native's
           and the host-network environments' servers in the same run from starting (seen
           here: "listen tcp4 10.213.3.1:45201: bind: address already in use", and the other
           way round). By default the ports are therefore not published by the engine: the
           load generator maps them to the container's address on the engine's bridge with
           the same iptables DNAT that `-p` installs (loadgen's "bridge" mode, as for runc),
           so packets take the kernel path of a published port, without the reservation.
           options.publish = true uses the engine's own `-p` (on a host address of the
           instance's own, never 0.0.0.0; loadgen's "published" mode), for plans whose other
           environments run no servers on the host's network.
  storage  "rootfs": data in the container's own overlay root filesystem (the engine's
           storage driver); "volume": a named engine volume at /mnt;
           options.storage = "bind": a host directory under the workdir bind-mounted at /mnt.
  runtime  options.runtime = runc | crun | runsc | kata, run by the engine. kata is Kata
           Containers' containerd shim v2 (each container in its own small VM): Docker 23 and
           later drive it by the shim's name; podman cannot (Kata 2 dropped the OCI
           command-line runtime podman needs). It also needs hardware virtualisation.

The engine-specific parts (which daemon, how to name a runtime, which processes belong to a
container) live in docker.py and podman.py; everything here is pure or engine-neutral.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import secrets
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from isotax.environments.base import GUEST_ENV, READY_HELPER, READY_MARKER, Stopwatch, bound_cpus
from isotax.environments.native import host_storage
from isotax.environments.oci.runtime import ROOTFS_DATA_DIR, SCRATCH, VOLUME_DIR, exec_not_found
from isotax.host.locks import exclusive
from isotax.host.network import COMMENT, STATE_DIR, iptables
from isotax.host.numa import placement_words
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import PORTS
from isotax.protocols import Availability, Completed, EnvSpec, Unavailable
from isotax.telemetry import cpuacct
from isotax.telemetry.footprint import cgroup_kernel_bytes

LABEL = "isotax"  # every container, volume, network and image isotax makes carries it
IMAGE_REPO = "itx-image"
NETWORKS = ("bridge", "host")
STORAGES = ("rootfs", "volume", "bind")  # "bind" only through options.storage
RUNTIMES = ("runc", "crun", "runsc", "kata")
KATA_SHIM = "containerd-shim-kata-v2"
KATA_RUNTIME_TYPE = "io.containerd.kata.v2"
KATA_INSTALL = ("install Kata Containers 3 (its release tarball puts containerd-shim-kata-v2 in "
                "/opt/kata/bin; link it into /usr/local/bin) on a host with hardware KVM; "
                "meanwhile kind \"vm9p\" is the same shape (a container's rootfs in a microVM)")
# Ports published over UDP as well as TCP: the request-response tests' UDP variants.
UDP_PORTS = ("netperf-data", "sockperf")
_IMPORT_LOCK = STATE_DIR / "engine-import.lock"
# Engine-specific options beside storage and runtime (see docker.py and podman.py).
ENGINE_OPTIONS = {"docker": ("publish", "userland_proxy"), "podman": ("publish",)}


class EngineError(Exception):
    """An engine command failed; the message has the engine's own words."""


# -- the plan's choices -------------------------------------------------------------------------

@dataclass(frozen=True)
class Choices:
    """What the plan asks of an engine container, validated."""

    network: str
    storage: str
    runtime: str

    @classmethod
    def of(cls, spec: EnvSpec, engine: str) -> Choices:
        storage = str(spec.options.get("storage", spec.storage))
        runtime = str(spec.options.get("runtime", "runc"))
        allowed = ("storage", "runtime", *ENGINE_OPTIONS.get(engine, ()))
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
    """(port, proto) for every isotax server port: TCP, plus UDP where a test uses it."""
    out = [(p, "tcp") for p in sorted(set(PORTS.values()))]
    out += [(PORTS[n], "udp") for n in UDP_PORTS]
    return out


def new_name(name: str) -> str:
    """itx-<plan name>-<random>: a container name engines accept (and leaks.py recognises)."""
    clean = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:24] or "c"
    return f"itx-{clean}-{secrets.token_hex(3)}"


def image_ref(image: ImageArtifacts) -> str:
    return f"{IMAGE_REPO}:{image.recipe_hash}"


# Podman's runc refuses an nproc limit above this here ("error setting rlimit type 6:
# operation not permitted" at 65536 with a host hard limit of 96365; 32768 works): both engines
# get at most this, so docker and podman containers run with the same limits.
NPROC_CAP = 32768


def host_limits() -> list[str]:
    """--ulimit flags with the host's own nofile/nproc limits (nproc at most NPROC_CAP), as
    oci.py gives its bundles: root here lacks CAP_SYS_RESOURCE, so podman's defaults (higher)
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


def mem_total_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 1 << 30


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
    # Scratch and /run in tmpfs as in oci.py's bundles; /dev/shm half of memory, not the
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
    limit = max(1, int(timeout + 0.999))
    return ["exec", *guest_env_flags(), "--workdir", "/", name,
            "/usr/bin/timeout", "--kill-after=3", str(limit), *argv]


# -- logs -----------------------------------------------------------------------------------------

def ready_from_log(text: str) -> int | None:
    """The CLOCK_MONOTONIC ns of the first `ITX-READY <ns>` in an engine's container log, in
    Docker's json-file format ({"log":"ITX-READY 12\\n",...}) or Podman's k8s-file format
    (`<time> stdout F ITX-READY 12`). Pure."""
    m = re.search(rf"{READY_MARKER} (\d+)(?:\\n|\s|$)", text)
    return int(m.group(1)) if m else None


# -- processes and cgroups ---------------------------------------------------------------------

def cmdlines() -> Iterator[tuple[int, list[str]]]:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
        if args:
            yield int(name), args


def pids_matching(program: str, needles: Sequence[str]) -> list[int]:
    """Host processes whose program is `program` (basename) and whose arguments contain every
    one of the needles as a whole argument."""
    out = []
    for pid, args in cmdlines():
        if os.path.basename(args[0]) == program and all(n in args[1:] for n in needles):
            out.append(pid)
    return out


def parse_proc_cgroup(text: str) -> tuple[str | None, str | None]:
    """(memory controller path of v1, path of the v2 hierarchy) from /proc/PID/cgroup. Pure."""
    return cpuacct.parse_proc_cgroup(text, "memory")


def cgroup_dirs(pid: int) -> tuple[Path | None, Path | None]:
    """The v1 memory cgroup directory and the v2 directory of a host process."""
    try:
        v1, v2 = parse_proc_cgroup(Path(f"/proc/{pid}/cgroup").read_text())
    except OSError:
        return None, None
    d1 = Path("/sys/fs/cgroup/memory") / v1.lstrip("/") if v1 else None
    v2root = Path("/sys/fs/cgroup/unified") if Path("/sys/fs/cgroup/unified").is_dir() \
        else Path("/sys/fs/cgroup")
    d2 = v2root / v2.lstrip("/") if v2 else None
    return (d1 if d1 and d1.is_dir() else None,
            d2 if d2 and (d2 / "cgroup.procs").exists() else None)


def cgroup_pids(pid: int) -> list[int]:
    """Every process in the same cgroup as pid (the container's processes)."""
    for d in cgroup_dirs(pid):
        if d is not None:
            with contextlib.suppress(OSError, ValueError):
                return [int(x) for x in (d / "cgroup.procs").read_text().split()]
    return [pid] if Path(f"/proc/{pid}").exists() else []


# -- iptables left behind by an engine -------------------------------------------------------

_BUILTIN = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}


def iptables_leftovers(before: str, after: str, table: str, chain_prefixes: Sequence[str],
                       interfaces: Sequence[str]) -> list[list[str]]:
    """iptables commands that remove what an engine added to `table` between two `iptables -S`
    listings and left behind (Docker and CNI never delete their chains): rules in built-in
    chains that jump to its chains or name its interfaces, then its chains themselves (flushed,
    then deleted). Only what was NOT there before counts. Pure."""
    old = set(before.splitlines())
    ours = tuple(chain_prefixes)
    out: list[list[str]] = []
    chains: list[str] = []
    # Rules added to engine chains that were there before (a system Docker, or a private
    # dockerd that was killed, left DOCKER-ISOLATION-STAGE-1 and friends): those chains stay,
    # the rules naming isotax's interfaces go.
    in_old_chains: list[list[str]] = []
    for line in after.splitlines():
        if line in old:
            continue
        try:
            parts = shlex.split(line)  # comments are quoted: "CNI firewall plugin rules"
        except ValueError:
            continue
        if len(parts) >= 2 and parts[0] == "-N" and parts[1].startswith(ours):
            chains.append(parts[1])
        elif len(parts) >= 2 and parts[0] == "-A" and parts[1].startswith(ours):
            if any(i in parts for i in interfaces):
                in_old_chains.append(parts)
        elif len(parts) >= 2 and parts[0] == "-A" and parts[1] in _BUILTIN:
            target = parts[parts.index("-j") + 1] if "-j" in parts[:-1] else ""
            if target.startswith(ours) or any(i in parts for i in interfaces):
                if "--comment" in parts and parts[parts.index("--comment") + 1] == COMMENT:
                    continue  # isotax's own rule: its owner removes it
                out.append(["-t", table, "-D", *parts[1:]])
    out += [["-t", table, "-D", *parts[1:]] for parts in in_old_chains if parts[1] not in chains]
    for c in chains:
        out.append(["-t", table, "-F", c])
    for c in chains:
        out.append(["-t", table, "-X", c])
    return out


def foreign_rules_on_our_links(text: str, table: str) -> list[str]:
    """Rules of `iptables -S` output that name an isotax interface (itx-...) but lack isotax's
    comment: what an engine (dockerd, CNI) made for an isotax bridge and left. Pure."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2 or parts[0] != "-A":
            continue
        links = [parts[i + 1] for i, w in enumerate(parts[:-1]) if w in ("-i", "-o")]
        if any(x.startswith("itx") for x in links) and not (
                "--comment" in parts and parts[parts.index("--comment") + 1] == COMMENT):
            out.append(f"iptables rule (iptables -t {table} -D {line[3:]})")
    return out


def engine_iptables_leaks() -> list[str]:
    out: list[str] = []
    for table in ("filter", "nat"):
        out += foreign_rules_on_our_links(iptables("-t", table, "-S").stdout, table)
    return out


def iptables_snapshot() -> dict[str, str]:
    return {t: iptables("-t", t, "-S").stdout for t in ("filter", "nat")}


def remove_iptables_leftovers(before: Mapping[str, str], chain_prefixes: Sequence[str],
                              interfaces: Sequence[str]) -> list[str]:
    """Remove what the engine left (see iptables_leftovers); the errors, if any."""
    errors = []
    for table, text in before.items():
        after = iptables("-t", table, "-S").stdout
        for cmd in iptables_leftovers(text, after, table, chain_prefixes, interfaces):
            p = iptables(*cmd)
            if p.returncode != 0:
                errors.append(f"iptables {' '.join(cmd)}: {p.stderr.strip()}")
    return errors


# -- the engine's command line ----------------------------------------------------------------

@dataclass
class EngineCli:
    """`<program> <global flags> ...`; calls never raise, they return what happened."""

    program: str
    global_flags: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None

    def argv(self, *args: str) -> list[str]:
        return [self.program, *self.global_flags, *args]

    def call(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        argv = self.argv(*args)
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True,
                                 env=self.env)
        except OSError as e:
            return subprocess.CompletedProcess(argv, 127, "", str(e))
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            return subprocess.CompletedProcess(argv, 124, out, f"timed out after {timeout} s")
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def check(self, *args: str, timeout: float = 60) -> str:
        p = self.call(*args, timeout=timeout)
        if p.returncode != 0:
            words = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
            raise EngineError(f"{self.program} {' '.join(args[:2])} failed "
                              f"({p.returncode}): {words[0]}")
        return p.stdout

    def inspect(self, what: str, *names: str) -> list[dict[str, Any]]:
        p = self.call(*([what] if what else []), "inspect", *names, timeout=30)
        try:
            data = json.loads(p.stdout or "[]")
        except ValueError:
            return []
        return data if isinstance(data, list) else []


def ensure_image(cli: EngineCli, image: ImageArtifacts, log: Any = None) -> tuple[str, float]:
    """The image in the engine as itx-image:<recipe hash>, imported from its tar when the
    engine has no image of that hash (a new recipe imports anew; older isotax images are
    removed where no container uses them). Returns (reference, seconds the import took)."""
    ref = image_ref(image)
    with exclusive(_IMPORT_LOCK):
        if cli.call("image", "inspect", ref, timeout=30).returncode == 0:
            return ref, 0.0
        if not image.tar.exists():
            raise Unavailable(Availability.no(
                f"image tar {image.tar} is missing", "rebuild the image: isotax image build"))
        if log:
            log(f"importing {image.tar} into {cli.program} as {ref} ...")
        t0 = time.monotonic()
        cli.check("import", "--change", f"LABEL {LABEL}=1", "--change",
                  f'CMD ["{READY_HELPER}", "--hold"]', str(image.tar), ref, timeout=900)
        took = time.monotonic() - t0
        old = cli.call("images", "--filter", f"label={LABEL}", "--format",
                       "{{.Repository}}:{{.Tag}}", timeout=30).stdout.split()
        for other in old:
            other = other.removeprefix("localhost/")  # podman's name for a local image
            if other != ref and other.startswith(f"{IMAGE_REPO}:"):
                cli.call("rmi", other, timeout=60)  # refused while in use: fine
        return ref, took


# -- the instance ---------------------------------------------------------------------------------

class EngineInstance:
    """One container of an engine. Subclasses say how the engine is reached (`cli`), how a
    runtime is named, where ports are published, and which host processes belong to it."""

    scratch = SCRATCH
    engine = "engine"

    def __init__(self, spec: EnvSpec) -> None:
        self.spec = spec
        self.choices = Choices.of(spec, self.engine)
        self.name = new_name(spec.name)
        self.address = "127.0.0.1"
        self.data_dir = ROOTFS_DATA_DIR if self.choices.storage == "rootfs" else VOLUME_DIR
        self.milestones: Mapping[str, float] = {}
        self.cli = EngineCli(self.engine)
        self.command_line = ""  # the engine's run command that started it
        self.container_id = ""
        self.pid1 = 0
        self.bridge_name = ""
        self.published = ""  # the host address the engine published the ports on
        self.import_s = 0.0
        self._volume: str | None = None
        self._bind: Path | None = None
        self._created = False
        self._stopped = False
        self._runtime_words = self.choices.runtime
        self._version_words = ""
        # Ports: see the module's docstring. False: the load generator maps them (DNAT) to the
        # container's address on the engine's bridge; True: the engine's own `-p`.
        self.publish = bool(spec.options.get("publish", False))
        # NUMA placement: the node's CPUs (the first vcpus of them where the plan limits the
        # count) and its memory, as the container's cpuset.
        self.node_cpus = bound_cpus(self.engine, spec)

    # -- hooks for docker.py / podman.py ----------------------------------------------------
    def _prepare_engine(self, sw: Stopwatch) -> None:
        """Make the engine reachable (start a daemon, ...)."""

    def _runtime_flags(self) -> tuple[list[str], list[str]]:
        """(flags before `run`, flags of `run`) that choose the plan's runtime."""
        raise NotImplementedError

    def _network_flags(self) -> tuple[str | None, list[str]]:
        """(the host address to publish ports on, extra `run` flags) for network "bridge"."""
        raise NotImplementedError

    def _engine_pids(self) -> list[int]:
        """The engine's own per-container processes (shim, proxy, conmon)."""
        return []

    def _release_engine(self) -> None:
        """Undo _prepare_engine and _network_flags; never raises."""

    def _engine_words(self) -> Mapping[str, str]:
        return {}

    def _rm_flags(self) -> list[str]:
        return ["--force", "--volumes"]  # docker: SIGKILL at once

    def _log_path(self, container_id: str) -> Path | None:
        """Where the engine writes the container's log, when known without asking it (a
        question costs a client process, ~50 ms, which would count into "ready")."""
        return None

    # -- start ------------------------------------------------------------------------------
    def _start(self) -> None:
        sw = Stopwatch()
        spec = self.spec
        self._prepare_engine(sw)
        ref, self.import_s = ensure_image(self.cli, spec.image)
        before_run, runtime = self._runtime_flags()
        publish_on, extra = (None, []) if self.choices.network == "host" \
            else self._network_flags()
        if self.choices.storage == "volume":
            self._volume = self.name
            self.cli.check("volume", "create", "--label", f"{LABEL}=1", self._volume)
        elif self.choices.storage == "bind":
            self._bind = spec.workdir / f"{self.name}-bind"
            self._bind.mkdir(parents=True, exist_ok=True)
        argv = run_argv(name=self.name, image=ref, choices=self.choices, publish_on=publish_on,
                        runtime_flags=runtime, volume=self._volume,
                        bind_dir=str(self._bind) if self._bind else None, vcpus=spec.vcpus,
                        memory_mib=spec.memory_mib, limits=host_limits(), extra=extra,
                        cpuset=None if self.node_cpus is None
                        else (self.node_cpus, str(spec.numa_node)))
        if publish_on:
            self.address = publish_on
        self.published = publish_on or ""
        sw.mark("create")
        self._created = True  # from here, stop() removes a container of this name
        self.command_line = shlex.join(self.cli.argv(*before_run, *argv))
        p = self.cli.call(*before_run, *argv, timeout=120)
        sw.mark("started")
        if p.returncode != 0:
            words = (p.stderr or p.stdout).strip().splitlines()[-2:] or ["no output"]
            raise Unavailable(Availability.no(
                f"{self.engine} run ({self.choices.runtime}) failed ({p.returncode}): "
                + " | ".join(words),
                f"try `{' '.join(self.cli.argv(*before_run, *argv))}` by hand"))
        self.container_id = p.stdout.strip().splitlines()[-1]
        ready_ns = self._wait_ready(timeout=60)
        seen = sw.mark("ready")
        self.pid1 = int(self._state().get("State", {}).get("Pid") or 0)
        sw.marks["first_instruction"] = seen
        if ready_ns is not None and sw.t0 < ready_ns / 1e9 <= time.monotonic():
            # itx-ready's own CLOCK_MONOTONIC stamp: when user code ran, free of the polling.
            sw.marks["first_instruction"] = ready_ns / 1e9 - sw.t0
        if self.choices.network == "bridge" and not self.published:
            self.address = self._container_ip()
        if self.choices.storage == "rootfs":
            self.exec(["mkdir", "-p", ROOTFS_DATA_DIR], 30).check()
        self.milestones = dict(sw.marks)
        self._version_words = self._engine_version()

    def _container_ip(self) -> str:
        """The container's address on the engine's bridge."""
        ns = self._state().get("NetworkSettings", {})
        ips = [ns.get("IPAddress") or ""]
        ips += [(n or {}).get("IPAddress") or "" for n in (ns.get("Networks") or {}).values()]
        ip = next((x for x in ips if x), "")
        if not ip:
            raise Unavailable(Availability.no(
                f"{self.engine} gave container {self.name} no address on its bridge"))
        return ip

    def _state(self) -> dict[str, Any]:
        data = self.cli.inspect("container", self.name)
        return data[0] if data else {}

    def _wait_ready(self, timeout: float) -> int | None:
        """Wait for the ready marker in the container's log file (read directly: asking the
        engine for its logs costs a client process per look)."""
        guess = self._log_path(self.container_id)
        if guess is not None and guess.exists():
            log_path = str(guess)
        else:
            st = self._state()
            log_path = st.get("LogPath") or st.get("HostConfig", {}).get("LogConfig", {}).get(
                "Path", "")
        deadline = time.monotonic() + timeout
        checks = 0
        while time.monotonic() < deadline:
            text = ""
            if log_path:
                with contextlib.suppress(OSError):
                    text = Path(log_path).read_text(errors="replace")
            if READY_MARKER in text:
                return ready_from_log(text)
            checks += 1
            if checks % 100 == 0 or not log_path:
                st = self._state()
                status = st.get("State", {}).get("Status", "gone")
                if status not in ("running", "created", "configured", "initialized"):
                    raise Unavailable(Availability.no(
                        f"container {self.name} is {status} before it was ready: "
                        + self._log_tail()))
                if not log_path:
                    text = self.cli.call("logs", self.name, timeout=10).stdout
                    if READY_MARKER in text:
                        return ready_from_log(text)
            time.sleep(0.002)
        raise Unavailable(Availability.no(
            f"container {self.name} not ready within {timeout:.0f} s: {self._log_tail()}"))

    def _log_tail(self) -> str:
        p = self.cli.call("logs", "--tail", "3", self.name, timeout=10)
        return " | ".join((p.stdout + p.stderr).strip().splitlines()[-3:]) or "(no output)"

    # -- the protocol -----------------------------------------------------------------------
    def exec(self, argv: Sequence[str], timeout: float) -> Completed:
        t0 = time.monotonic()
        p = self.cli.call(*exec_argv(self.name, argv, timeout), timeout=timeout + 15)
        rc, out, err = p.returncode, p.stdout, p.stderr
        # `timeout` says 127 itself for a missing program; an engine's own words for it
        # (should the exec fail before `timeout` runs) mean the same.
        if rc not in (0, 124, 127, 137) and exec_not_found(err):
            rc = 127
        if rc == 137:  # timeout's KILL after the grace period
            rc = 124
        return Completed(tuple(argv), rc, out, err, time.monotonic() - t0)

    def describe(self) -> Mapping[str, str]:
        d = {
            "kind": self.engine,
            "engine": self._version_words,
            "runtime": self._runtime_words,
            "command_line": self.command_line,
            "container": self.name,
            "network": self.choices.network,
            "address": self.address,
            "bridge": self.bridge_name,
            "cpus": f"{self.node_cpus} (cpuset)" if self.node_cpus is not None
            else f"0-{self.spec.vcpus - 1} (cpuset)" if self.spec.vcpus else "all (no limit)",
            "memory": f"{self.spec.memory_mib} MiB (limit)" if self.spec.memory_mib
            else "no limit",
            "numa": placement_words(self.spec.numa_node, "cpuset", self.node_cpus),
            "seccomp": "the engine's default profile",
            "rootfs": f"{self.engine} image {image_ref(self.spec.image)} on the engine's "
                      "overlay storage driver, writable; tmpfs /tmp /run /dev/shm",
            "storage": self._storage_words(),
            "pid1": f"{READY_HELPER} --hold",
        }
        if self.published:
            d["published"] = self.published
        d.update(self._engine_words())
        return d

    def _engine_version(self) -> str:
        p = self.cli.call("version", "--format", "{{.Server.Version}}", timeout=20)
        v = p.stdout.strip() if p.returncode == 0 else ""
        return f"{self.engine} {v}".strip()

    def _storage_words(self) -> str:
        if self.choices.storage == "rootfs":
            return f"{self.engine} overlay rootfs, data in {self.data_dir}"
        if self.choices.storage == "volume":
            return f"named {self.engine} volume {self._volume} at {VOLUME_DIR}"
        where = host_storage(self._bind) if self._bind else "unknown"
        return f"bind mount of a host directory at {VOLUME_DIR} ({where})"

    def host_pids(self) -> Sequence[int]:
        if not self.pid1:
            return []
        seen = set(cgroup_pids(self.pid1))
        return sorted(seen | set(self._engine_pids()))

    def kernel_memory_bytes(self) -> int | None:
        return cgroup_kernel_bytes(*cgroup_dirs(self.pid1)) if self.pid1 else None

    def pause(self) -> None:
        p = self.cli.call("pause", self.name, timeout=30)
        if p.returncode != 0:
            raise RuntimeError(f"{self.engine} pause {self.name}: {p.stderr.strip()}")

    def resume(self) -> None:
        p = self.cli.call("unpause", self.name, timeout=30)
        if p.returncode != 0 and "not paused" not in p.stderr:
            raise RuntimeError(f"{self.engine} unpause {self.name}: {p.stderr.strip()}")

    def stop(self) -> None:
        """Remove the container, its volume and bind directory, then what the engine needed
        (network, daemon). Idempotent; never raises."""
        if self._stopped:
            return
        self._stopped = True
        if self._created:
            with contextlib.suppress(Exception):
                if self._state().get("State", {}).get("Paused"):
                    self.cli.call("unpause", self.name, timeout=30)
                self.cli.call("rm", *self._rm_flags(), self.name, timeout=60)
        if self._volume is not None:
            with contextlib.suppress(Exception):
                self.cli.call("volume", "rm", "--force", self._volume, timeout=60)
        if self._bind is not None:
            shutil.rmtree(self._bind, ignore_errors=True)
        with contextlib.suppress(Exception):
            self._release_engine()
