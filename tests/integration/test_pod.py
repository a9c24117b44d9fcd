"""Pods for real, on the cluster `isotax cluster up` starts: a pod of each RuntimeClass is
what its class says (the identity check: gVisor's kernel in the gvisor pod, the host's in the
runc pod), pauses and resumes through its cgroup, and serves a workload's clients on each of
its networks (the pod's address, hostNetwork, a ClusterIP Service through kube-proxy), with
nothing left once stopped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support import local_cluster, ours, running_in, started

from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.local import NamespaceLoadGen
from isotax.protocols import Instance, Isolation, ServiceEndpoints
from isotax.run import identity
from isotax.run.applicability import why_not_applicable
from isotax.workloads.memcached import Memcached
from isotax.workloads.redis import Redis
from isotax.workloads.rr import RequestResponse

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kube() -> Iterator[None]:
    """The local cluster: started for this module where none runs, and stopped after it."""
    with local_cluster():
        yield


@pytest.mark.parametrize("runtime_class", ["runc", "gvisor"])
def test_a_pod_is_what_its_runtime_class_says(kube: None, image: ImageArtifacts,
                                              tmp_path: Path, runtime_class: str) -> None:
    from isotax.environments.kube.pod import Pod
    from isotax.environments.kube_api import kubectl
    from isotax.protocols import EnvSpec

    # The gvisor pod with vcpus and memory_mib: Guaranteed; the runc pod without: Burstable.
    sized = {"vcpus": 1, "memory_mib": 512} if runtime_class == "gvisor" else {}
    inst = Pod().start(EnvSpec(name=f"test-pod-{runtime_class}", kind="pod", image=image,
                               workdir=tmp_path, network="pod",
                               options={"runtime_class": runtime_class}, **sized))
    try:
        f = inst.facts()
        want = Isolation.SANDBOX if runtime_class == "gvisor" else Isolation.CONTAINER
        assert identity.declared(f) is want
        assert identity.mismatch(f, identity.probe(inst), identity.host_facts()) is None
        assert f"{'Guaranteed' if sized else 'Burstable'} QoS" in f.words["pod"]
        # The limits its cgroup really has, read from the host (v1 here, v2 in the guests).
        print(f"pod cgroup: {f.words['cgroup']}")
        if sized:
            assert f.words["cgroup"].startswith("CPU 1, memory 512 MiB, CPUs ")
        assert "the cgroupfs driver" in f.words["cgroup"] or "systemd" in f.words["cgroup"]
        assert set(inst.milestones) >= {"create", "started", "first_instruction", "ready"}
        assert inst.exec(["sh", "-c", "exit 3"], 30).returncode == 3
        assert inst.exec(["no-such-program"], 30).returncode == 127
        assert inst.exec(["sleep", "5"], 1).returncode == 124
        assert inst.host_pids()  # the pod's cgroup holds its processes
        inst.pause()
        inst.resume()
        assert inst.exec(["true"], 30).returncode == 0
        assert inst.alive() == ""
        # The pod's own warnings: none from its DNS (the local cluster has no DNS add-on, so
        # its pods resolve as the node does); any other is printed.
        events = kubectl("get", "events", "-n", inst.namespace,  # type: ignore[attr-defined]
                         "--field-selector", "type=Warning", "-o",
                         "jsonpath={range .items[*]}{.reason}: {.message}{'\\n'}{end}")
        assert events.returncode == 0, events.stderr
        print(f"pod warnings: {events.stdout.strip() or 'none'}")
        assert "MissingClusterDNS" not in events.stdout
    finally:
        inst.stop()
    inst.stop()
    assert ours(inst.namespace) == []  # type: ignore[attr-defined]


@pytest.fixture(scope="module", params=["pod", "host", "service"])
def pod(request: pytest.FixtureRequest, kube: None, image: ImageArtifacts,
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Instance]:
    with started(f"test-pod-{request.param}", "pod", request.param, image,
                 tmp_path_factory.mktemp(request.param)) as inst:
        yield inst


def test_a_server_in_the_pod_serves_the_load_generator(pod: Instance,
                                                      loadgen: NamespaceLoadGen) -> None:
    w = Memcached()
    params = {**{p.name: p.default for p in Memcached.params}, "duration_s": 1,
              "connections": 4}
    w.prepare(pod, params, loadgen)
    samples = {s.metric: s for s in w.run(pod, params, loadgen)}
    rate = samples["requests_per_s"]
    assert rate.value > 100
    path = rate.labels["path"]
    network = pod.facts().reach.value
    print(f"pod {network}: {rate.value:.0f} req/s via {path}")
    if network == "service":
        assert "kube-proxy" in path and pod.facts().published in path
    elif network == "routed":
        assert pod.address in path and "itxcni0" in path
    else:
        assert "host network stack" in path


def test_a_service_with_three_endpoints_spreads_the_connections_over_them(
        kube: None, image: ImageArtifacts, loadgen: NamespaceLoadGen, tmp_path: Path) -> None:
    """endpoints = 3: two more pods behind the Service. Redis with a connection per request
    is served by all three (kube-proxy's statistic rules send each new connection to any
    endpoint), so each one's server holds keys afterwards; a workload whose connections must
    meet one server (netperf) is not applicable there; the namespace takes them all."""
    with started("test-pod-ep3", "pod", "service", image, tmp_path,
                 options={"endpoints": 3}) as pod:
        assert isinstance(pod, ServiceEndpoints)
        others = pod.other_endpoints()
        addresses = {pod.facts().container_address,
                     *(o.facts().container_address for o in others)}
        assert len(others) == 2 and len(addresses) == 3 and "" not in addresses
        assert "and 2 more endpoints" in pod.facts().words["network"]
        w = Redis()
        params = {**{p.name: p.default for p in Redis.params}, "keepalive": False,
                  "requests": 3000, "connections": 1, "pipeline": 1}
        assert why_not_applicable(w, pod, params) is None
        w.prepare(pod, params, loadgen)
        samples = {s.metric: s for s in w.run(pod, params, loadgen)}
        labels = samples["requests_per_s"].labels
        print(f"3 endpoints, a connection per request: {samples['requests_per_s'].value:.0f} "
              f"req/s, keys by endpoint {labels['keys_by_endpoint']}")
        assert labels["keepalive"] is False and len(labels["keys_by_endpoint"]) == 3
        assert all(k > 0 for k in labels["keys_by_endpoint"])
        rr = RequestResponse()
        why = why_not_applicable(rr, pod, {p.name: p.default for p in rr.params})
        assert why is not None and "Service with 3 endpoints" in why
        assert all(running_in(one, "redis-server") == 0 for one in (pod, *others))
        namespace = pod.facts().words["pod"].split("/")[0]
    assert ours(namespace) == []


@pytest.mark.parametrize("runtime_class", ["runc", "gvisor"])
def test_a_burst_of_pods_is_timed_from_the_watch_and_the_nodes_cri(
        kube: None, image: ImageArtifacts, tmp_path: Path, runtime_class: str) -> None:
    from isotax.environments.kube.pod import Pod
    from isotax.protocols import EnvSpec

    burst = Pod().bursts(EnvSpec(name=f"test-burst-{runtime_class}", kind="pod", image=image,
                                 workdir=tmp_path, network="pod",
                                 options={"runtime_class": runtime_class}))
    assert burst is not None
    namespace = burst.pods.namespace  # type: ignore[attr-defined]
    try:
        one = burst.start(2, 0.0, 120)  # one at a time
        many = burst.start(4, 20.0, 120)  # a burst beside those two
        assert burst.running == 6
        assert [r.name for r in one + many] == [f"itx-start-{i}" for i in range(1, 7)]
        for r in one + many:
            ms = {k: v * 1000 for k, v in r.phases.items()}
            print(r.name, {k: round(v, 1) for k, v in ms.items()})
            assert 0 < ms["created"] < ms["scheduled"] < ms["sandbox_ready"] <= ms["started"]
            assert ms["started"] <= ms["ready"]
            # The node's CRI: the sandbox begun after the pod was scheduled, the container
            # made after the sandbox and started before the watch showed it.
            assert ms["cri_sandbox"] < ms["cri_created"] < ms["cri_started"] < ms["started"]
            assert r.node == "itx-node1" and r.api["created"].endswith("Z")
        # The ones one at a time never overlapped: each was asked once the one before started.
        assert one[1].requested_at > one[0].requested_at + one[0].phases["started"]
    finally:
        burst.close()
    burst.close()
    assert ours(namespace) == []


def test_a_pod_is_sized_like_its_bare_container(kube: None, image: ImageArtifacts,
                                                tmp_path: Path) -> None:
    """The pod-against-bare-container pair of the built-in plans (no vcpus, no memory_mib):
    the same CPUs and no quota, the same memory (none limited), /dev/shm half of memory in
    both, as each one's own parity probe reads it from inside."""
    from isotax.host.facts import parity

    with started("test-size-runc", "runc", "host", image, tmp_path / "runc") as bare, \
            started("test-size-pod", "pod", "host", image, tmp_path / "pod") as pod:
        outs = {n: i.exec(["sh", "-c", parity.PROBE], 60) for n, i in
                (("runc", bare), ("pod", pod))}
        for n, done in outs.items():
            print(f"--- {n}\n{done.stdout}")
        got = {n: parity.parse_probe(d.stdout) for n, d in outs.items()}
        assert got["pod"].cpu_quota is None and got["pod"].shm_mib is not None
        assert got["pod"].shm_mib >= got["pod"].memory_mib // 2 - 64
        assert parity.problems("pod", got["pod"], "runc", got["runc"], pod.facts(),
                               bare.facts()) == []
        assert "/dev/shm" in pod.facts().words["pod"] and "limits no CPU" in \
            pod.facts().words["pod"]
