"""Which load generator a run gets: the plan's [loadgen] names a host reached over SSH
(loadgen.ssh), or a Kubernetes node for a pod (loadgen.pod), or neither, and the run gets a
network namespace on this host (loadgen.local)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from isotax import protocols
from isotax.host.kubernetes import target
from isotax.image.artifacts import ImageArtifacts
from isotax.loadgen.base import LoadGenRefused
from isotax.loadgen.local import open_loadgen as open_local
from isotax.loadgen.pod import PodLoadGen
from isotax.loadgen.ssh import SshLoadGen
from isotax.plan import Plan
from isotax.protocols import LoadGen


def client_versions(plan: Plan, image_versions: Mapping[str, str]) -> dict[str, str]:
    """The client packages of the plan's network workloads, with the image's version of each
    (what a load generator elsewhere must have). LoadGenRefused names a client package the
    image lacks (an image built before the workload declared it: rebuild)."""
    wls = protocols.workloads()
    names = dict.fromkeys(p for w in plan.workloads if wls[w.name].needs_loadgen
                          for p in wls[w.name].client_packages)
    lacking = [p for p in names if p not in image_versions]
    if lacking:
        raise LoadGenRefused(f"the image has no {', '.join(lacking)} to compare the load "
                             "generator's clients with; rebuild it: isotax image build")
    return {p: image_versions[p] for p in names}


@contextlib.contextmanager
def open_loadgen(plan: Plan, image: ImageArtifacts) -> Iterator[LoadGen]:
    """The run's load generator, up for the block and removed after it, whatever happens.
    LoadGenRefused (one line with the fix) when the plan's cannot serve the run."""
    if not target.current().local and plan.loadgen.node is None:
        raise LoadGenRefused(f"the pods run on {target.current().words()}, where a load "
                             "generator on this host may reach none of them: put it in the "
                             "cluster, [loadgen] node = \"NODE\"")
    if plan.loadgen.node is not None:
        # Its image comes from where the plan's pods' does: their pull secrets too.
        secrets = [str(e.options["pull_secret"]) for e in plan.run_environments
                   if e.options.get("pull_secret")]
        pod = PodLoadGen(plan.loadgen.node, image, secrets)
        try:
            pod.up()
            yield pod
        finally:
            pod.close()
        return
    image_versions = image.package_versions()
    if not plan.loadgen.remote:
        with open_local() as lg:
            yield lg
        return
    ssh = SshLoadGen(plan.loadgen, client_versions(plan, image_versions))
    try:
        ssh.up()
        yield ssh
    finally:
        ssh.close()
