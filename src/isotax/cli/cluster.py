"""`isotax cluster up | down | status`: the real Kubernetes isotax starts on this host
(isotax.host.kubernetes), built by `bash scripts/setup.sh --kubernetes`: one node, or two, the
second in a network namespace with its own containerd and kubelet."""

from __future__ import annotations

import sys

import click

from isotax.cli import fail, main


@main.group()
def cluster() -> None:
    """Start, stop and show the local Kubernetes cluster (pods' environments run on it)."""


@cluster.command("up")
@click.option("--cpu-manager", type=click.Choice(["none", "static"]), default="none",
              show_default=True,
              help="The kubelet's CPU manager policy: static gives Guaranteed pods with whole "
                   "CPUs cores of their own (CPU 0 kept for the system).")
@click.option("--nodes", type=click.IntRange(1, 2), default=1, show_default=True,
              help="2: a second node, itx-node2, in a network namespace of this host with its "
                   "own containerd, kubelet and kube-proxy (where a plan's [loadgen] node = "
                   "\"itx-node2\" puts the load generator).")
def cluster_up(cpu_manager: str, nodes: int) -> None:
    """Start the cluster: etcd, the API server, the controller manager, the scheduler, the
    kubelet on containerd, the CNI bridge and kube-proxy, with RuntimeClasses runc and
    gvisor. It runs until `isotax cluster down`."""
    from isotax.host.kubernetes import cluster as k
    from isotax.host.kubernetes import layout

    try:
        seconds = k.up(cpu_manager, nodes=nodes)
    except k.ClusterError as e:
        fail(str(e))
    from isotax.host.kubernetes import nodecgroups

    names = ", ".join(n.name for n in layout.NODES[:nodes])
    click.echo(f"cluster up in {seconds:.1f} s: Kubernetes {layout.K8S_VERSION}, "
               f"node{'s' if nodes > 1 else ''} {names} Ready, RuntimeClasses "
               f"{', '.join(layout.RUNTIME_CLASSES)}; kubeconfig {layout.KUBECONFIG}")
    click.echo(f"addresses {layout.cluster_range()}{_range_note()}: node {layout.NODE_IP}, "
               f"pods {', '.join(n.pod_cidr for n in layout.NODES[:nodes])}, Services "
               f"{layout.SERVICE_CIDR}; {nodecgroups.host().words()}")


def _range_note() -> str:
    from isotax.host.kubernetes import layout

    return "" if str(layout.cluster_range()) == layout.DEFAULT_RANGE else \
        f" ({layout.DEFAULT_RANGE} is taken on this host)"


@cluster.command("down")
def cluster_down() -> None:
    """Stop the cluster and remove everything it made (also what a killed one left)."""
    import time

    from isotax.host.kubernetes import cluster as k

    t0 = time.monotonic()
    left = k.down()
    if left:
        fail(f"the cluster is down, but left: {'; '.join(left)}")
    click.echo(f"cluster down in {time.monotonic() - t0:.1f} s; nothing of it is left")


@cluster.command("status")
def cluster_status() -> None:
    """Whether the cluster runs, and its node and RuntimeClasses."""
    from isotax.host.kubernetes import cluster as k
    from isotax.host.kubernetes import layout, teardown

    pid = k.supervisor_pid()
    if pid is None:
        left = teardown.present()
        click.echo("no cluster" if not left else
                   f"no cluster running, but left: {'; '.join(left)} (`isotax cluster down`)")
        return
    click.echo(f"supervisor {pid}: {k.state() or '?'}; kubeconfig {layout.KUBECONFIG}; "
               f"addresses {layout.cluster_range()}")
    for args in (("get", "nodes", "-o", "wide"), ("get", "runtimeclass")):
        done = k.kubectl(*args, timeout=20)
        click.echo((done.stdout or done.stderr).rstrip())


@cluster.command("serve", hidden=True)
@click.option("--cpu-manager", type=click.Choice(["none", "static"]), default="none")
@click.option("--nodes", type=click.IntRange(1, 2), default=1)
def cluster_serve(cpu_manager: str, nodes: int) -> None:
    """The supervisor `cluster up` starts (detached): runs the cluster until SIGTERM."""
    from isotax.host.kubernetes import cluster as k

    sys.exit(k.serve(cpu_manager, nodes))
