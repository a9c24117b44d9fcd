"""memcached for real: memaslap through the load generator natively, in runc on a bridge with
NAT, in gVisor, and in the QEMU VM (TCG here: one short point), leaving nothing behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import image_where, ours, running_in, started, why_not_root_and

from isotax import protocols
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import NamespaceLoadGen
from isotax.model import SanityError
from isotax.protocols import EnvSpec, Instance
from isotax.workloads.memcached import PORT, Memcached

ENVS = {"native": ("native", "host"), "runc-bridge": ("runc", "bridge"),
        "gvisor": ("gvisor", "bridge"), "qemu": ("qemu", "bridge")}


def _why_not() -> str | None:
    return why_not_root_and("nsenter", "iptables", "memcached", "memcaslap", "memcstat",
                            root_for="network namespaces, veth pairs, containers and the VM's tap")


image = image_where(_why_not)


@pytest.fixture(scope="module", params=list(ENVS))
def inst(request: pytest.FixtureRequest, image: ImageArtifacts, loadgen: NamespaceLoadGen,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    kind, net = ENVS[request.param]
    name = f"test-memcached-{request.param}"
    with started(name, kind, net, image, tmp_path_factory.mktemp(request.param)) as i:
        yield i
    # Only this test's own names: other suites may run beside it on a shared host.
    assert ours(name, "memcached") == []


@pytest.mark.integration
def test_sweep(inst: Instance, loadgen: NamespaceLoadGen) -> None:
    """Two connection counts (one in the emulated VM); every point a fresh server, stopped
    afterwards, its numbers memaslap's own."""
    w = Memcached()
    defaults = {p.name: p.default for p in Memcached.params}
    for conns in (1,) if inst.facts().emulated else (1, 8):
        params = {**defaults, "connections": conns, "duration_s": 1, "value_bytes": 100}
        w.prepare(inst, params, loadgen)
        samples = {s.metric: s for s in w.run(inst, params, loadgen)}
        assert set(samples) == {"requests_per_s"} | {
            f"{op}latency_{m}_us" for op in ("", "get_", "set_") for m in ("mean", "geo")}
        rate = samples["requests_per_s"]
        assert rate.value > 50 and rate.higher_is_better
        labels = rate.labels
        assert labels["cmd_get"] + labels["cmd_set"] == labels["ops"] > 0
        assert labels["connections"] == conns and labels["items_after"] > 0
        assert labels["path"].startswith(f"loadgen netns {loadgen.netns}")
        if inst.facts().display().get("network") == "bridge":
            assert "DNAT" in labels["path"]
        lat = samples["latency_mean_us"]
        assert lat.labels["min_us"] <= lat.value <= lat.labels["max_us"]
        assert lat.labels["p99_at_most_us"] >= lat.labels["min_us"]
        print(f"{inst.facts().kind} c={conns}: {rate.value:.0f} req/s, mean "
              f"{lat.value:.0f} µs, p99 <= {lat.labels['p99_at_most_us']:.0f} µs")
        assert running_in(inst, "memcached") == 0


@pytest.mark.integration
def test_a_dead_server_is_a_sanity_failure(image: ImageArtifacts, loadgen: NamespaceLoadGen,
                                           tmp_path: Path) -> None:
    """Nothing listening where memaslap connects: one clear failure, not a hang."""
    from isotax.workloads.memcached import _items

    spec = EnvSpec(name="test-memcached-dead", kind="native", image=image, workdir=tmp_path)
    inst = protocols.environments()["native"]().start(spec)
    try:
        host, port = loadgen.target(inst, PORT.number, "tcp")
        with pytest.raises(SanityError, match="memcached does not answer before the run"):
            _items(loadgen, host, port, "before the run")
    finally:
        inst.stop()
