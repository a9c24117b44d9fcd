"""Container engines (docker, podman) for real: short workloads in docker with a bridge and
with the host's network, and in podman, with every runtime and storage choice, leaving
nothing behind (the private dockerd included)."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from support import ours

from isotax import protocols
from isotax.environments.engines.docker import docker_leaks
from isotax.environments.engines.dockerd import RUNSC, docker_cli
from isotax.environments.engines.podman import (
    podman_leaks,
)
from isotax.facts import Reach
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import NamespaceLoadGen
from isotax.protocols import PHASES, EnvSpec, Instance, Unavailable
from isotax.workloads.redis import Redis


def _why_not(kind: str) -> str | None:
    if os.geteuid() != 0:
        return "needs root for container engines"
    tools = {"docker": ("dockerd", "containerd"), "podman": ("podman", "conmon")}[kind]
    for tool in (*tools, "nsenter", "iptables", "redis-benchmark"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (scripts/setup.sh installs it)"
    if kind == "docker" and docker_cli() is None:
        return "docker's CLI is not installed (apt-get install docker.io)"
    avail = protocols.environments()[kind]().available()
    return None if avail.ok else f"{kind} unavailable here: {avail}"


def _ours(kind: str) -> list[str]:
    """Leaks of this engine only: other suites may run beside this one on a shared host."""
    words = {"docker": ("itx-brd", "itx-pub", "dockerd", "itx-docker", "DOCKER"),
             "podman": ("itx-brp", "podman", "NETAVARK", "CNI")}[kind]
    return ours(*words)


def _start(kind: str, image: ImageArtifacts, workdir: Path, network: str,
           storage: str = "rootfs", options: dict[str, object] | None = None) -> Instance:
    why = _why_not(kind)
    if why:
        pytest.skip(why)
    s = EnvSpec(name=f"itx-eng-{kind}-{network}", kind=kind, image=image, workdir=workdir,
                network=network, storage=storage, options=options or {})
    return protocols.environments()[kind]().start(s)


@pytest.fixture(scope="module")
def keeper(image: ImageArtifacts, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Instance]:
    """A docker instance held for the module: the private dockerd (if any) starts once; when
    it stops, every trace of the daemon must be gone."""
    inst = _start("docker", image, tmp_path_factory.mktemp("keeper"), "host")
    try:
        yield inst
    finally:
        inst.stop()
    assert list(Path("/run").glob("itx-dockerd-*")) == []
    assert docker_leaks() == []
    assert _ours("docker") == []


def _programs(pids: Iterable[int]) -> set[str]:
    """The executables of those pids still alive: one may exit between listing and looking
    (a short exec's process), which is no failure."""
    out = set()
    for p in pids:
        with contextlib.suppress(OSError):
            out.add(Path(os.readlink(f"/proc/{p}/exe")).name)
    return out


def _exercise(inst: Instance, loadgen: NamespaceLoadGen) -> dict[str, float]:
    """Everything an environment must do, and a short redis run through the load generator."""
    d = inst.facts().display()
    assert all(p in inst.milestones for p in PHASES), inst.milestones
    assert 0 <= inst.milestones["first_instruction"] <= inst.milestones["ready"]
    # The exec path: environment, not-found and time limit.
    out = inst.exec(["sh", "-c", "echo $PATH; echo $TMPDIR; id -u"], 30).check().stdout
    assert out.split() == ["/opt/isotax/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                           "/sbin:/bin", "/tmp", "0"]
    assert inst.exec(["no-such-program-itx"], 30).returncode == 127
    slow = inst.exec(["sleep", "30"], 1)
    assert slow.returncode == 124 and slow.wall_s < 10
    # Scratch is tmpfs; the data directory is on the plan's storage, writable.
    fs = inst.exec(["stat", "-f", "-c", "%T", inst.scratch, inst.data_dir], 30).check().stdout
    scratch_fs, data_fs = fs.split()
    assert scratch_fs == "tmpfs"
    inst.exec(["sh", "-c", f"echo x > {inst.data_dir}/f && rm {inst.data_dir}/f"], 30).check()
    # Cost: the engine's processes and the container's, and its cgroup's kernel memory.
    pids = inst.host_pids()
    progs = _programs(pids)
    assert "itx-ready" in progs, progs
    kmem = inst.kernel_memory_bytes()
    assert kmem is not None and kmem > 0
    inst.pause()
    inst.resume()
    assert inst.exec(["true"], 30).returncode == 0
    # A short redis run from the load generator, over the plan's network path.
    w = Redis()
    params = {**{p.name: p.default for p in Redis.params}, "connections": 2,
              "requests": 20000, "pipeline": 10, "value_bytes": 50, "keyspace": 1000}
    w.prepare(inst, params, loadgen)
    samples = {s.metric: s for s in w.run(inst, params, loadgen)}
    path = samples["requests_per_s"].labels["path"]
    f = inst.facts()
    if f.published:  # the engine's own -p
        assert f.reach is Reach.PUBLISHED
        assert "port mapping" in str(path) and f.published in str(path)
    elif d["network"] == "bridge":  # the load generator's DNAT to the container's address
        assert f.reach is Reach.BRIDGE
        assert "DNAT" in str(path) and f.bridge in str(path)
    else:
        assert "host network stack" in str(path)
    print(f"{d['kind']} {d['network']} {d['runtime']} storage {data_fs}: "
          f"phases {dict(inst.milestones)} redis {samples['requests_per_s'].value:.0f} req/s")
    return {"rps": samples["requests_per_s"].value}


@pytest.mark.integration
@pytest.mark.parametrize("network", ["bridge", "host"])
def test_docker(network: str, keeper: Instance, image: ImageArtifacts,
                loadgen: NamespaceLoadGen, tmp_path: Path) -> None:
    inst = _start("docker", image, tmp_path, network)
    try:
        d = inst.facts().display()
        assert d["kind"] == "docker" and d["network"] == network
        argv = shlex.split(d["command_line"])
        assert Path(argv[0]).name == "docker" and "run" in argv
        assert argv[argv.index("--name") + 1] == d["container"]
        assert d["engine"].startswith("docker 20.10") or d["engine"].startswith("docker ")
        if network == "bridge":
            assert d.get("bridge", "").startswith("itx-brd") or d["daemon"].startswith("system")
        progs = {Path(f"/proc/{p}/exe").resolve().name for p in inst.host_pids()}
        assert "containerd-shim-runc-v2" in progs, progs
        _exercise(inst, loadgen)
    finally:
        inst.stop()
        inst.stop()  # idempotent
    assert [x for x in _ours("docker") if inst.facts().display()["container"] in x] == []


@pytest.mark.integration
@pytest.mark.parametrize("storage", ["rootfs", "volume", "bind"])
def test_docker_storage(storage: str, keeper: Instance, image: ImageArtifacts,
                        tmp_path: Path) -> None:
    opts: dict[str, object] = {"storage": "bind"} if storage == "bind" else {}
    inst = _start("docker", image, tmp_path, "host", "rootfs" if storage == "bind" else storage,
                  opts)
    try:
        fs = inst.exec(["stat", "-f", "-c", "%T", inst.data_dir], 30).check().stdout.strip()
        assert fs == ("overlayfs" if storage == "rootfs" else "ext2/ext3"), fs
        words = inst.facts().display()["storage"]
        assert storage in words or "volume" in words
        name = inst.facts().display()["container"]
    finally:
        inst.stop()
    vols = [x for x in docker_leaks() if "volume" in x]
    assert [v for v in vols if name in v] == []
    assert not list(tmp_path.glob("*-bind"))


@pytest.mark.integration
@pytest.mark.parametrize("runtime", ["crun", "runsc"])
def test_docker_runtimes(runtime: str, keeper: Instance, image: ImageArtifacts,
                         tmp_path: Path) -> None:
    if runtime == "runsc" and not RUNSC.exists():
        pytest.skip(f"no current runsc at {RUNSC} (scripts/setup.sh builds one)")
    try:
        inst = _start("docker", image, tmp_path, "bridge", options={"runtime": runtime})
    except Unavailable as e:
        pytest.skip(f"docker with {runtime} unavailable here: {e}")
    try:
        assert inst.facts().display()["runtime"].startswith(runtime)
        assert inst.exec(["true"], 60).returncode == 0
        assert all(p in inst.milestones for p in PHASES)
    finally:
        inst.stop()


@pytest.mark.integration
@pytest.mark.parametrize("network", ["bridge", "host"])
def test_podman(network: str, image: ImageArtifacts, loadgen: NamespaceLoadGen,
                tmp_path: Path) -> None:
    inst = _start("podman", image, tmp_path, network, "volume")
    try:
        d = inst.facts().display()
        assert d["kind"] == "podman" and d["engine"].startswith("podman ")
        # As `podman info` reports it: netavark, never the host's default (CNI on Podman 4).
        assert d["network_backend"] == "netavark", d
        progs = {Path(f"/proc/{p}/exe").resolve().name for p in inst.host_pids()}
        assert "conmon" in progs, progs
        _exercise(inst, loadgen)
    finally:
        inst.stop()
    assert podman_leaks() == []
    assert _ours("podman") == []


@pytest.mark.integration
@pytest.mark.parametrize("runtime", ["runc", "crun", "runsc"])
def test_podman_runtimes(runtime: str, image: ImageArtifacts, tmp_path: Path) -> None:
    if runtime == "runsc" and not RUNSC.exists():
        pytest.skip(f"no current runsc at {RUNSC} (scripts/setup.sh builds one)")
    inst = _start("podman", image, tmp_path, "bridge", "rootfs", {"runtime": runtime})
    try:
        assert inst.facts().display()["runtime"].startswith(runtime)
        assert inst.exec(["true"], 60).returncode == 0
    finally:
        inst.stop()
    assert podman_leaks() == []


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["docker", "podman"])
def test_engine_published_ports(kind: str, keeper: Instance, image: ImageArtifacts,
                                loadgen: NamespaceLoadGen, tmp_path: Path) -> None:
    """options.publish: the engine's own -p on an address of the instance's own. The engine
    then holds a listening socket on every published port (why it is not the default)."""
    inst = _start(kind, image, tmp_path, "bridge", "rootfs", {"publish": True})
    try:
        pub = inst.facts().display()["published"]
        assert pub and pub == inst.address
        listening = Path("/proc/net/tcp").read_text()
        held = f"{ipv4_hex(pub)}:{46379:04X}"
        assert held in listening, f"{kind} holds no socket on {pub}:46379"
        _exercise(inst, loadgen)
        if kind == "docker":
            progs = {Path(f"/proc/{p}/exe").resolve().name for p in inst.host_pids()}
            assert "docker-proxy" in progs, progs  # Docker's default userland proxy
    finally:
        inst.stop()
    assert [x for x in _ours(kind) if "itx-pub" in x or "itx-brp" in x] == []


def ipv4_hex(addr: str) -> str:
    """An IPv4 address as /proc/net/tcp writes it (little-endian hex)."""
    return "".join(f"{int(b):02X}" for b in reversed(addr.split(".")))


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["docker", "podman"])
def test_kata_through_the_engine_or_why_not(kind: str, keeper: Instance,
                                            image: ImageArtifacts, tmp_path: Path) -> None:
    """kata runs where Kata's shim and a Docker that drives it are installed; everywhere else
    the environment is unavailable with one line saying which of them is missing."""
    import shutil

    from isotax.environments.engines.commands import KATA_SHIM

    try:
        inst = _start(kind, image, tmp_path, "bridge", options={"runtime": "kata"})
    except Unavailable as e:
        why = str(e)
        if kind == "podman":
            assert "podman cannot run Kata Containers" in why
        elif shutil.which(KATA_SHIM) is None:
            assert f"no {KATA_SHIM} on PATH" in why and "fix:" in why
        else:
            assert "Docker 23" in why or "kata" in why.lower()
        assert "\n" not in why
        return
    try:
        assert inst.facts().display()["runtime"].startswith("kata")
        assert inst.exec(["true"], 120).returncode == 0
    finally:
        inst.stop()
