"""Container engines (docker, podman): golden command lines for every network, storage and
runtime choice, parsers on real engine output, and for real: short workloads in docker with a
bridge and with the host's network, and in podman, leaving nothing behind (the private dockerd
included)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from isotax import protocols
from isotax.environments.engines.docker import (
    DATA_ROOT,
    EXEC_ROOT_PREFIX,
    RUNSC,
    crun_wrapper_text,
    docker_cli,
    docker_leaks,
    dockerd_argv,
)
from isotax.environments.engines.engine import (
    Choices,
    exec_argv,
    foreign_rules_on_our_links,
    iptables_leftovers,
    parse_proc_cgroup,
    published_ports,
    ready_from_log,
    run_argv,
)
from isotax.environments.engines.podman import (
    cni_conflist,
    podman_flags,
    podman_leaks,
    runsc_wrapper_text,
)
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import NamespaceLoadGen, network_mode
from isotax.protocols import PHASES, EnvSpec, Instance, Unavailable
from isotax.run.leaks import find_leaks
from isotax.workloads.redis import Redis

DATA = Path(__file__).parent / "data" / "engines"
UPDATE = os.environ.get("ITX_UPDATE_GOLDEN") == "1"  # rewrite the golden files from the code


def golden(name: str, value: object) -> None:
    """Compare with tests/data/engines/<name>.json (ITX_UPDATE_GOLDEN=1 rewrites it)."""
    path = DATA / f"{name}.json"
    text = json.dumps(value, indent=1) + "\n"
    if UPDATE:
        path.write_text(text)
    assert json.loads(path.read_text()) == value, f"{path} differs: {text}"


def spec(network: str = "bridge", storage: str = "rootfs",
         options: dict[str, object] | None = None) -> EnvSpec:
    img = ImageArtifacts("0123456789abcdef", Path("/nonexistent"))
    return EnvSpec(name="eng", kind="docker", image=img, workdir=Path("/tmp/x"),
                   network=network, storage=storage, options=options or {})


# -- golden command lines -------------------------------------------------------------------

LIMITS = ["--ulimit", "nofile=1024:524288", "--ulimit", "nproc=94000:94000"]


@pytest.mark.parametrize("network", ["bridge", "host"])
@pytest.mark.parametrize("storage", ["rootfs", "volume", "bind"])
def test_run_argv_golden(network: str, storage: str) -> None:
    choices = Choices(network, storage, "runc")
    argv = run_argv(name="itx-eng-abc123", image="itx-image:0123456789abcdef", choices=choices,
                    publish_on="10.213.7.1" if network == "bridge" else None,
                    runtime_flags=["--runtime", "runc"], volume="itx-eng-abc123",
                    bind_dir="/var/tmp/w/itx-eng-abc123-bind", vcpus=2, memory_mib=2048,
                    limits=LIMITS)
    golden(f"run-{network}-{storage}", argv)


@pytest.mark.parametrize(("runtime", "flags"), [
    ("runc", ["--runtime", "runc"]), ("crun", ["--runtime", "crun"]),
    ("runsc", ["--runtime", "runsc"]), ("runsc-host", ["--runtime", "runsc-host"])])
def test_docker_runtime_flags_golden(runtime: str, flags: list[str]) -> None:
    net = "host" if runtime == "runsc-host" else "bridge"
    choices = Choices(net, "rootfs", runtime.split("-")[0])
    argv = run_argv(name="itx-eng-abc123", image="itx-image:h", choices=choices,
                    publish_on="10.213.7.1", runtime_flags=flags, volume=None, bind_dir=None,
                    memory_mib=1024, limits=())
    assert argv[:9] == ["run", "--detach", "--name", "itx-eng-abc123", "--hostname",
                        "itx-eng-abc123", "--label", "isotax=1", *flags[:1]]
    assert argv[9] == flags[1]
    golden(f"run-docker-{runtime}", argv)


@pytest.mark.parametrize("numa_node", [None, 1])
def test_run_argv_numa_golden(numa_node: int | None) -> None:
    """numa_node: the node's CPUs and memory node as the container's cpuset; unset, none."""
    argv = run_argv(name="itx-eng-abc123", image="itx-image:h",
                    choices=Choices("host", "rootfs", "runc"), publish_on=None,
                    runtime_flags=[], volume=None, bind_dir=None, vcpus=2, memory_mib=1024,
                    cpuset=None if numa_node is None else ("4-5", str(numa_node)))
    if numa_node is None:
        assert "--cpuset-mems" not in argv and argv[argv.index("--cpuset-cpus") + 1] == "0-1"
        return
    golden("run-host-rootfs-numa", argv)
    assert argv.count("--cpuset-cpus") == 1


def test_podman_run_argv_golden() -> None:
    """Podman: the runtime goes before `run` (a path it remembers); the network is isotax's
    CNI network, not the engine's default `bridge`."""
    choices = Choices("bridge", "volume", "crun")
    argv = run_argv(name="itx-eng-abc123", image="itx-image:h", choices=choices,
                    publish_on="10.213.9.1", runtime_flags=[], volume="itx-eng-abc123",
                    bind_dir=None, memory_mib=1024, limits=LIMITS,
                    extra=["--network", "itx-brpabc123"])
    assert argv.count("--network") == 1
    golden("run-podman-bridge-volume", ["podman", *podman_flags(), "--runtime",
                                        "/run/itx-podman/runtimes/crun-unified-detached", *argv])
    golden("podman-runsc-wrapper", runsc_wrapper_text("systrap", True).splitlines())


def test_every_port_is_published_on_the_given_address_only() -> None:
    argv = run_argv(name="n", image="i", choices=Choices("bridge", "rootfs", "runc"),
                    publish_on="10.213.7.1", runtime_flags=[], volume=None, bind_dir=None,
                    memory_mib=1024)
    published = [argv[i + 1] for i, a in enumerate(argv) if a == "--publish"]
    assert len(published) == len(published_ports()) >= 8
    assert all(p.startswith("10.213.7.1:") for p in published)
    assert "10.213.7.1:42866:42866/udp" in published  # netperf's UDP_RR data port
    host = run_argv(name="n", image="i", choices=Choices("host", "rootfs", "runc"),
                    publish_on=None, runtime_flags=[], volume=None, bind_dir=None,
                    memory_mib=1024)
    assert "--publish" not in host and host[host.index("--network") + 1] == "host"


def test_bad_choices_are_one_clear_line() -> None:
    with pytest.raises(ValueError, match=r"network 'none'; use one of bridge, host"):
        Choices.of(spec(network="none"), "docker")
    with pytest.raises(ValueError, match=r"storage 'tmpfs'.*options.storage = \"bind\""):
        Choices.of(spec(storage="tmpfs"), "docker")
    with pytest.raises(ValueError, match=r"options.runtime 'youki'; use one of runc, crun, "
                                         "runsc, kata"):
        Choices.of(spec(options={"runtime": "youki"}), "docker")
    with pytest.raises(ValueError, match=r"unknown option\(s\) platform"):
        Choices.of(spec(options={"platform": "x"}), "podman")
    assert Choices.of(spec(storage="volume", options={"storage": "bind"}),
                      "docker").storage == "bind"
    assert Choices.of(spec(), "podman") == Choices("bridge", "rootfs", "runc")
    unpublished = run_argv(name="n", image="i", choices=Choices("bridge", "rootfs", "runc"),
                           publish_on=None, runtime_flags=[], volume=None, bind_dir=None)
    assert "--publish" not in unpublished and "bridge" in unpublished


def test_exec_argv_enforces_the_time_limit_inside() -> None:
    golden("exec", exec_argv("itx-eng-abc123", ["fio", "--version"], 29.2))


def test_private_dockerd_golden() -> None:
    argv = dockerd_argv(tag="abc123", bridge="itx-brdabc123",
                        config_file="/run/itx-dockerd-abc123/daemon.json", userland_proxy=False)
    golden("dockerd", argv)
    assert all(a.startswith(("itx", "/run/itx-", "unix:///run/itx-", str(DATA_ROOT), "/itx-"))
               for a in (argv[argv.index(f) + 1] for f in
                         ("--exec-root", "-H", "--pidfile", "--bridge", "--cgroup-parent")))
    assert EXEC_ROOT_PREFIX == "/run/itx-dockerd-"


def test_crun_wrapper_detaches_only_the_unified_mount() -> None:
    text = crun_wrapper_text("/usr/bin/crun")
    assert text.startswith("#!/bin/sh\n")
    assert "unshare --mount --propagation private" in text
    assert "umount -l /sys/fs/cgroup/unified" in text and "/usr/bin/crun" in text


def test_cni_network_golden() -> None:
    golden("cni", cni_conflist("itx-brpabc123", "itx-brpabc123", "10.213.9.0/24",
                               "10.213.9.1"))


# -- parsers on real engine output ---------------------------------------------------------

def test_ready_marker_in_docker_and_podman_logs() -> None:
    assert ready_from_log((DATA / "docker-json.log").read_text()) == int(
        (DATA / "docker-json.stamp").read_text())
    assert ready_from_log((DATA / "podman-k8s-file.log").read_text()) == int(
        (DATA / "podman-k8s-file.stamp").read_text())
    assert ready_from_log('{"log":"hello\\n","stream":"stdout"}\n') is None
    assert ready_from_log("") is None


def test_proc_cgroup_of_a_docker_container() -> None:
    v1, v2 = parse_proc_cgroup((DATA / "proc-cgroup-docker.txt").read_text())
    assert v1 is not None and v1.startswith("/itx-docker-")
    assert v2 is not None


def test_iptables_leftovers_of_a_stopped_dockerd() -> None:
    """Real `iptables -S` before a private dockerd started and after it stopped: its chains
    and the rules for its bridge go; isotax's own rules and everything older stay."""
    for table in ("filter", "nat"):
        before = (DATA / f"iptables-{table}-before.txt").read_text()
        after = (DATA / f"iptables-{table}-after.txt").read_text()
        bridge = (DATA / "bridge.txt").read_text().strip()
        cmds = iptables_leftovers(before, after, table, ("DOCKER",), (bridge,))
        golden(f"leftovers-{table}", cmds)
        assert cmds, f"{table}: dockerd left nothing?"
        flat = [" ".join(c) for c in cmds]
        assert not any("isotax" in c for c in flat)
        assert all(c.startswith(f"-t {table} ") for c in flat)
        # chains are flushed before they are deleted, after the jumps into them are gone
        kinds = [c[2] for c in cmds]
        assert kinds == sorted(kinds, key=["-D", "-F", "-X"].index)
        assert iptables_leftovers(after, after, table, ("DOCKER",), (bridge,)) == []


def test_foreign_rules_on_isotax_links() -> None:
    text = (DATA / "iptables-filter-running.txt").read_text()
    found = foreign_rules_on_our_links(text, "filter")
    assert found and all("itx" in f and "isotax" not in f.split("-D", 1)[1] for f in found)
    assert foreign_rules_on_our_links(
        "-A FORWARD -o itx-br1 -m comment --comment isotax -j ACCEPT\n"
        "-A FORWARD -o docker0 -j DOCKER\n", "filter") == []


def test_published_network_mode() -> None:
    d = {"kind": "docker", "network": "bridge", "published": "10.213.7.1"}
    assert network_mode(d, "10.213.7.1") == "published"
    assert network_mode({"kind": "docker", "network": "host"}, "127.0.0.1") == "host"
    assert network_mode({"kind": "runc", "network": "bridge"}, "10.213.0.2") == "bridge"


def test_registered() -> None:
    envs = protocols.environments()
    assert {"docker", "podman"} <= set(envs)


# -- for real ---------------------------------------------------------------------------------

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
             "podman": ("itx-brp", "podman", "CNI")}[kind]
    return [x for x in find_leaks() if any(w in x for w in words)]


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


def _exercise(inst: Instance, loadgen: NamespaceLoadGen) -> dict[str, float]:
    """Everything an environment must do, and a short redis run through the load generator."""
    d = inst.describe()
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
    progs = {Path(f"/proc/{p}/exe").resolve().name for p in pids if Path(f"/proc/{p}").exists()}
    assert "itx-ready" in progs, progs
    kmem = inst.kernel_memory_bytes()
    assert kmem is not None and kmem > 0
    inst.pause()
    inst.resume()
    assert inst.exec(["true"], 30).returncode == 0
    # A short redis run from the load generator, over the plan's network path.
    w = Redis()
    params = {"connections": 2, "requests": 20000, "pipeline": 10, "value_bytes": 50,
              "keyspace": 1000}
    w.prepare(inst, params, loadgen)
    samples = {s.metric: s for s in w.run(inst, params, loadgen)}
    path = samples["requests_per_s"].labels["path"]
    if d.get("published"):  # the engine's own -p
        assert network_mode(d, inst.address) == "published"
        assert "port mapping" in str(path) and d["published"] in str(path)
    elif d["network"] == "bridge":  # the load generator's DNAT to the container's address
        assert network_mode(d, inst.address) == "bridge"
        assert "DNAT" in str(path) and d["bridge"] in str(path)
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
        d = inst.describe()
        assert d["kind"] == "docker" and d["network"] == network
        argv = shlex.split(d["command_line"])
        assert Path(argv[0]).name == "docker" and "run" in argv
        assert argv[argv.index("--name") + 1] == d["container"]
        assert d["engine"].startswith("docker 20.10") or d["engine"].startswith("docker ")
        if network == "bridge":
            assert d["bridge"].startswith("itx-brd") or d["daemon"].startswith("system")
        progs = {Path(f"/proc/{p}/exe").resolve().name for p in inst.host_pids()}
        assert "containerd-shim-runc-v2" in progs, progs
        _exercise(inst, loadgen)
    finally:
        inst.stop()
        inst.stop()  # idempotent
    assert [x for x in _ours("docker") if inst.describe()["container"] in x] == []


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
        assert storage in inst.describe()["storage"] or "volume" in inst.describe()["storage"]
        name = inst.describe()["container"]
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
        assert inst.describe()["runtime"].startswith(runtime)
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
        d = inst.describe()
        assert d["kind"] == "podman" and d["engine"].startswith("podman 4")
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
        assert inst.describe()["runtime"].startswith(runtime)
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
        pub = inst.describe()["published"]
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


def test_docker_runs_shim_runtimes_from_23() -> None:
    from isotax.environments.engines.docker import runs_shim_runtimes

    assert not runs_shim_runtimes("20.10.24+dfsg1")  # Debian 12's docker.io
    assert runs_shim_runtimes("23.0.0") and runs_shim_runtimes("27.3.1")
    assert not runs_shim_runtimes("")


@pytest.mark.integration
@pytest.mark.parametrize("kind", ["docker", "podman"])
def test_kata_through_the_engine_or_why_not(kind: str, keeper: Instance,
                                            image: ImageArtifacts, tmp_path: Path) -> None:
    """kata runs where Kata's shim and a Docker that drives it are installed; everywhere else
    the environment is unavailable with one line saying which of them is missing."""
    import shutil

    from isotax.environments.engines.engine import KATA_SHIM

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
        assert inst.describe()["runtime"].startswith("kata")
        assert inst.exec(["true"], 120).returncode == 0
    finally:
        inst.stop()


def test_iptables_leftovers_in_engine_chains_that_were_there_before() -> None:
    """Real `iptables -S` after a private dockerd stopped on a host whose DOCKER chains were
    already there (left by an earlier dockerd that was killed): the chains stay, the rules it
    added for its bridge go. `before` is that listing without the bridge's rules."""
    bridge = "itx-brdd3c146"
    for table in ("filter", "nat"):
        after = (DATA / f"iptables-{table}-after-prechains.txt").read_text()
        before = "\n".join(ln for ln in after.splitlines() if bridge not in ln) + "\n"
        cmds = iptables_leftovers(before, after, table, ("DOCKER",), (bridge,))
        removed = [" ".join(c) for c in cmds]
        assert removed and all(bridge in c and " -D DOCKER" in c for c in removed), removed
        assert not any(" -X " in c or " -F " in c for c in removed)  # the chains stay
