"""redis for real: a tiny connection sweep run through the load generator natively, in runc
on a bridge with NAT, and in the QEMU VM (TCG here: tiny), leaving nothing behind."""

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
from isotax.workloads.redis import REDIS_PORT, Redis

ENVS = {"native": ("native", "host"), "runc-bridge": ("runc", "bridge"),
        "qemu": ("qemu", "bridge")}


def _why_not() -> str | None:
    return why_not_root_and("nsenter", "iptables", "redis-server", "redis-benchmark", "redis-cli",
                            root_for="network namespaces, veth pairs, containers and the VM's tap")


image = image_where(_why_not)


@pytest.fixture(scope="module", params=list(ENVS))
def inst(request: pytest.FixtureRequest, image: ImageArtifacts, loadgen: NamespaceLoadGen,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    kind, net = ENVS[request.param]
    name = f"test-redis-{request.param}"
    with started(name, kind, net, image, tmp_path_factory.mktemp(request.param)) as i:
        yield i
    # Only this test's own names: other suites may run beside it on a shared host.
    assert ours(name, "redis") == []


@pytest.mark.integration
def test_sweep(inst: Instance, loadgen: NamespaceLoadGen) -> None:
    """Two connection counts; every point a fresh server, stopped afterwards."""
    w = Redis()
    # redis-benchmark's clock ticks in ms: natively enough requests to last tens of ms; the
    # emulated VM answers ~100x slower, so a few thousand are plenty there.
    requests = 3000 if inst.facts().emulated else 30000
    for conns in (1, 10):
        params = {**{p.name: p.default for p in Redis.params}, "connections": conns,
                  "requests": requests, "pipeline": 10, "value_bytes": 50, "keyspace": 10000}
        w.prepare(inst, params, loadgen)
        samples = {s.metric: s for s in w.run(inst, params, loadgen)}
        names = {f"{op}_{m}" for op in ("set", "get") for m in
                 ("requests_per_s", "latency_mean_ms", "latency_p50_ms", "latency_p99_ms")}
        assert set(samples) == names | {"requests_per_s"}
        for op in ("set", "get"):
            assert samples[f"{op}_requests_per_s"].value > 100
            assert samples[f"{op}_latency_p50_ms"].value <= samples[f"{op}_latency_p99_ms"].value
        mix = samples["requests_per_s"]
        lo, hi = sorted(samples[f"{op}_requests_per_s"].value for op in ("set", "get"))
        assert lo <= mix.value <= hi
        assert mix.labels["connections"] == conns and mix.labels["in_flight"] == conns * 10
        assert 0 < mix.labels["keys_after"] <= 10000
        assert mix.labels["path"].startswith(f"loadgen netns {loadgen.netns}")
        if inst.facts().display().get("network") == "bridge":
            assert "DNAT" in mix.labels["path"]
        v = {k: s.value for k, s in samples.items()}
        print(f"{inst.facts().kind} c={conns}: SET {v['set_requests_per_s']:.0f} "
              f"GET {v['get_requests_per_s']:.0f} mix {v['requests_per_s']:.0f} req/s, p99 "
              f"SET {v['set_latency_p99_ms']} GET {v['get_latency_p99_ms']} ms")
        assert running_in(inst, "redis-server") == 0


@pytest.mark.integration
def test_a_dead_server_is_a_sanity_failure(image: ImageArtifacts, loadgen: NamespaceLoadGen,
                                           tmp_path: Path) -> None:
    """Nothing listening where redis-benchmark connects: one clear failure, not a hang. The
    client side is the same for every environment, so the host itself is enough."""
    from isotax.workloads.redis import _ping

    spec = EnvSpec(name="test-redis-dead", kind="native", image=image, workdir=tmp_path)
    inst = protocols.environments()["native"]().start(spec)
    try:
        host, port = loadgen.target(inst, REDIS_PORT, "tcp")
        with pytest.raises(SanityError, match="does not answer PING"):
            _ping(loadgen, host, port, "before the run")
    finally:
        inst.stop()
