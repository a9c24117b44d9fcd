"""Container engines (docker, podman): golden command lines for every network, storage and
runtime choice, and parsers on real engine output (tests/data/engines)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from support import DATA

from isotax import protocols
from isotax.environments.engines.client import IMPORT_MIN_TIMEOUT_S, import_timeout
from isotax.environments.engines.commands import (
    Choices,
    exec_argv,
    published_ports,
    ready_from_log,
    run_argv,
)
from isotax.environments.engines.dockerd import (
    DATA_ROOT,
    EXEC_ROOT_PREFIX,
    crun_wrapper_text,
    dockerd_argv,
)
from isotax.environments.engines.engine import EngineInstance, parse_proc_cgroup
from isotax.environments.engines.iptables import foreign_rules_on_our_links, iptables_leftovers
from isotax.environments.engines.podman import (
    NETWORK_BACKEND,
    netavark_network,
    parse_network_backend,
    podman_flags,
    runsc_wrapper_text,
)
from isotax.image.artifacts import ImageArtifacts
from isotax.protocols import EnvSpec, Isolation, Reach

UPDATE = os.environ.get("ITX_UPDATE_GOLDEN") == "1"  # rewrite the golden files from the code


def golden(name: str, value: object) -> None:
    """Compare with tests/data/engines/<name>.json (ITX_UPDATE_GOLDEN=1 rewrites it)."""
    path = DATA / "engines" / f"{name}.json"
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
    netavark network, not the engine's default `podman`; the backend is named on the
    command line, whatever the host's containers.conf says."""
    choices = Choices("bridge", "volume", "crun")
    argv = run_argv(name="itx-eng-abc123", image="itx-image:h", choices=choices,
                    publish_on="10.213.9.1", runtime_flags=[], volume="itx-eng-abc123",
                    bind_dir=None, memory_mib=1024, limits=LIMITS,
                    extra=["--network", "itx-brpabc123"])
    assert argv.count("--network") == 1
    flags = podman_flags()
    assert flags[flags.index("--network-backend") + 1] == NETWORK_BACKEND == "netavark"
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


def test_netavark_network_golden() -> None:
    """The network file Podman loads from its network directory: it skips a file whose name
    is not <name>.json and refuses an id that is not 64 hex digits."""
    net = netavark_network("itx-brpabc123", "itx-brpabc123", "10.213.9.0/24", "10.213.9.1",
                           mtu=1450)
    golden("netavark-network", net)
    assert len(net["id"]) == 64 and int(net["id"], 16) >= 0
    assert net["network_interface"] == "itx-brpabc123" and net["options"] == {"mtu": "1450"}
    assert net["dns_enabled"] is False and net["labels"] == {"isotax": "1"}


def test_podman_info_network_backend() -> None:
    assert parse_network_backend("netavark\n") == "netavark"
    assert parse_network_backend("cni") == "cni"
    assert parse_network_backend("") == ""
    assert parse_network_backend("Error: unsupported network backend") == ""
    assert parse_network_backend("<no value>") == ""  # a template field Podman lacks


# -- parsers on real engine output ---------------------------------------------------------

def test_ready_marker_in_docker_and_podman_logs() -> None:
    assert ready_from_log((DATA / "engines" / "docker-json.log").read_text()) == int(
        (DATA / "engines" / "docker-json.stamp").read_text())
    assert ready_from_log((DATA / "engines" / "podman-k8s-file.log").read_text()) == int(
        (DATA / "engines" / "podman-k8s-file.stamp").read_text())
    assert ready_from_log('{"log":"hello\\n","stream":"stdout"}\n') is None
    assert ready_from_log("") is None


def test_proc_cgroup_of_a_docker_container() -> None:
    v1, v2 = parse_proc_cgroup((DATA / "engines" / "proc-cgroup-docker.txt").read_text())
    assert v1 is not None and v1.startswith("/itx-docker-")
    assert v2 is not None


def test_iptables_leftovers_of_a_stopped_dockerd() -> None:
    """Real `iptables -S` before a private dockerd started and after it stopped: its chains
    and the rules for its bridge go; isotax's own rules and everything older stay."""
    for table in ("filter", "nat"):
        before = (DATA / "engines" / f"iptables-{table}-before.txt").read_text()
        after = (DATA / "engines" / f"iptables-{table}-after.txt").read_text()
        bridge = (DATA / "engines" / "bridge.txt").read_text().strip()
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
    text = (DATA / "engines" / "iptables-filter-running.txt").read_text()
    found = foreign_rules_on_our_links(text, "filter")
    assert found and all("itx" in f and "isotax" not in f.split("-D", 1)[1] for f in found)
    assert foreign_rules_on_our_links(
        "-A FORWARD -o itx-br1 -m comment --comment isotax -j ACCEPT\n"
        "-A FORWARD -o docker0 -j DOCKER\n", "filter") == []


@pytest.mark.parametrize(("network", "published", "runtime", "reach", "isolation"), [
    ("bridge", "10.213.7.1", "runc", Reach.PUBLISHED, None),
    ("bridge", "", "crun", Reach.BRIDGE, None),
    ("host", "", "runsc", Reach.HOST, Isolation.SANDBOX),
    ("bridge", "", "kata", Reach.BRIDGE, Isolation.VM),
])
def test_an_engines_facts_say_how_it_is_reached_and_what_its_runtime_makes_it(
        network: str, published: str, runtime: str, reach: Reach,
        isolation: Isolation | None) -> None:
    """Typed, from the instance's own state: never from its words (issue 30)."""
    inst = SimpleNamespace(
        engine="docker", published=published, container_address="172.17.0.2",
        choices=SimpleNamespace(network=network, runtime=runtime), bridge_name="itx-brd1",
        _runtime_words=f"{runtime} 1 via dockerd", spec=SimpleNamespace(memory_mib=512, vcpus=0),
        _words=lambda: {"network": network}, _engine_words=lambda: {"daemon": "private"})
    f = EngineInstance.facts(inst)  # type: ignore[arg-type]
    assert (f.kind, f.reach, f.isolation) == ("docker", reach, isolation)
    assert f.published == published and f.memory_limit_mib == 512 and f.vcpus is None
    assert f.container_address == ("172.17.0.2" if published else "")
    assert f.display()["daemon"] == "private" and f.display()["runtime"].startswith(runtime)


def test_registered() -> None:
    envs = protocols.environments()
    assert {"docker", "podman"} <= set(envs)


def test_docker_runs_shim_runtimes_from_23() -> None:
    from isotax.environments.engines.dockerd import runs_shim_runtimes

    assert not runs_shim_runtimes("20.10.24+dfsg1")  # Debian 12's docker.io
    assert runs_shim_runtimes("23.0.0") and runs_shim_runtimes("27.3.1")
    assert not runs_shim_runtimes("")


def test_iptables_leftovers_in_engine_chains_that_were_there_before() -> None:
    """Real `iptables -S` after a private dockerd stopped on a host whose DOCKER chains were
    already there (left by an earlier dockerd that was killed): the chains stay, the rules it
    added for its bridge go. `before` is that listing without the bridge's rules."""
    bridge = "itx-brdd3c146"
    for table in ("filter", "nat"):
        after = (DATA / "engines" / f"iptables-{table}-after-prechains.txt").read_text()
        before = "\n".join(ln for ln in after.splitlines() if bridge not in ln) + "\n"
        cmds = iptables_leftovers(before, after, table, ("DOCKER",), (bridge,))
        removed = [" ".join(c) for c in cmds]
        assert removed and all(bridge in c and " -D DOCKER" in c for c in removed), removed
        assert not any(" -X " in c or " -F " in c for c in removed)  # the chains stay


def test_an_imports_time_limit_grows_with_the_image() -> None:
    """A hung engine still ends; a big image on a slow host is not cut off at 15 min (the
    workload image, 1.3 GB, in a guest under TCG on a busy host took longer than that)."""
    assert import_timeout(0) == IMPORT_MIN_TIMEOUT_S == 900
    assert import_timeout(100 * 10**6) == 900  # small images: the floor
    assert import_timeout(1_300 * 10**6) == 2600  # the workload image: 0.5 MB/s at least
    assert import_timeout(2 * 1_300 * 10**6) == 2 * import_timeout(1_300 * 10**6)
