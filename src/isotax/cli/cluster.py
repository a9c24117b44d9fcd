"""`isotax cluster up | down | status`: the real Kubernetes isotax starts on this host
(isotax.host.kubernetes), built by `bash scripts/setup.sh --kubernetes`: one node, or two, the
second in a network namespace with its own containerd and kubelet."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from isotax.cli.common import fail


@click.group()
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
@click.option("--managed", "managed_style", is_flag=True,
              help="Set it up the way managed clusters are, to try `isotax run --kubeconfig` "
                   "on: no runc RuntimeClass (gvisor, handler gvisor), an account with only "
                   "isotax's ClusterRole (user.kubeconfig), Pod Security baseline enforced "
                   "and privileged namespaces refused, the image in a registry that asks "
                   "for credentials (pull-secret.json).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=60), default=300,
              show_default=True, metavar="SECONDS",
              help="How long the cluster may take to start; every wait inside it grows to "
                   "match (a slow or emulated host: 3000 and more).")
def cluster_up(cpu_manager: str, nodes: int, managed_style: bool, timeout_s: float) -> None:
    """Start the cluster: etcd, the API server, the controller manager, the scheduler, the
    kubelet on containerd, the CNI bridge and kube-proxy, with RuntimeClasses runc and
    gvisor. It runs until `isotax cluster down`."""
    from isotax.host.kubernetes import cluster as k
    from isotax.host.kubernetes import layout, managed

    try:
        seconds = k.up(cpu_manager, timeout=timeout_s, nodes=nodes,
                       managed_style=managed_style)
    except k.ClusterError as e:
        fail(str(e))
    from isotax.host.kubernetes import nodecgroups

    names = ", ".join(n.name for n in layout.NODES[:nodes])
    classes = managed.RUNTIME_CLASSES if managed_style else layout.RUNTIME_CLASSES
    click.echo(f"cluster up in {seconds:.1f} s: Kubernetes {layout.K8S_VERSION}, "
               f"node{'s' if nodes > 1 else ''} {names} Ready, RuntimeClasses "
               f"{', '.join(classes)}; kubeconfig {layout.KUBECONFIG}")
    click.echo(f"addresses {layout.cluster_range()}{_range_note()}: node {layout.NODE_IP}, "
               f"pods {', '.join(n.pod_cidr for n in layout.NODES[:nodes])}, Services "
               f"{layout.SERVICE_CIDR}; {nodecgroups.host().words()}")
    if managed_style:
        click.echo(f"managed-style: account kubeconfig {managed.USER_KUBECONFIG} (ClusterRole "
                   f"itx-isotax alone), registry https://{managed.REGISTRY} (credentials "
                   f"{managed.PULL_SECRET}); push the image: isotax cluster push")


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
    from isotax.host.kubernetes import managed

    style = (f"; managed-style: account {managed.USER_KUBECONFIG}, registry "
             f"https://{managed.REGISTRY}") if managed.MARK.exists() else ""
    click.echo(f"supervisor {pid}: {k.state() or '?'}; kubeconfig {layout.KUBECONFIG}; "
               f"addresses {layout.cluster_range()}{style}")
    for args in (("get", "nodes", "-o", "wide"), ("get", "runtimeclass")):
        done = k.kubectl(*args, timeout=20)
        click.echo((done.stdout or done.stderr).rstrip())


@cluster.command("push")
def cluster_push() -> None:
    """Push the workload image to a managed-style cluster's registry (`cluster up
    --managed`), with its credentials: prints the reference for --pod-image."""
    from isotax.cli.common import image_artifacts
    from isotax.host.kubernetes import cluster as k
    from isotax.host.kubernetes import managed, registry

    if k.supervisor_pid() is None or not managed.MARK.exists():
        fail("no managed-style cluster runs here: isotax cluster up --managed")
    try:
        ref, seconds = registry.push(image_artifacts())
    except RuntimeError as e:
        fail(str(e))
    click.echo(f"{ref} pushed in {seconds:.1f} s; isotax run PLAN --kubeconfig "
               f"{managed.USER_KUBECONFIG} --pod-image {ref} --pull-secret "
               f"{managed.PULL_SECRET}")


@cluster.command("role")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, exists=True), metavar="PATH",
              help="Only what this kubeconfig's account lacks, bound to it (else the whole "
                   "ClusterRole isotax needs).")
@click.option("--pull-secret", "pull_secrets", multiple=True, metavar="NAME|FILE",
              help="As for isotax run: reading a Secret given by name is a right too.")
def cluster_role(kubeconfig: str | None, pull_secrets: tuple[str, ...]) -> None:
    """Print the ClusterRole that grants what `isotax run --kubeconfig` needs on a cluster
    (YAML, for `kubectl apply -f -` by its admin): with --kubeconfig, exactly what that
    account lacks, and the ClusterRoleBinding to it."""
    import yaml

    from isotax.environments import kube_api as api
    from isotax.host.kubernetes import rights, target

    if kubeconfig is None:
        docs = [rights.cluster_role(rights.NEEDED)]
    else:
        t = target.Target(Path(kubeconfig).resolve(), local=False,
                          pull_secrets=tuple(pull_secrets))
        try:
            missing = api.missing_rights(t, api.wanted_rights(t))
        except (ValueError, RuntimeError) as e:
            fail(f"{kubeconfig}: {e}")
        if not missing:
            click.echo(f"# the account of {kubeconfig} may do all isotax needs")
            return
        user = rights.whoami(t.kubectl("auth", "whoami", "-o", "json", timeout=30).stdout)
        # Named for the account: applied, it adds to what others were granted, never
        # replaces the whole role another account is bound to.
        name = rights.role_name(user)
        docs = [rights.cluster_role(missing, name)]
        if user:
            docs.append(rights.binding(name, user))
    click.echo(yaml.safe_dump_all(docs, sort_keys=False), nl=False)


@cluster.command("serve", hidden=True)
@click.option("--cpu-manager", type=click.Choice(["none", "static"]), default="none")
@click.option("--nodes", type=click.IntRange(1, 2), default=1)
@click.option("--managed", "managed_style", is_flag=True)
@click.option("--timeout", "timeout_s", type=float, default=300)
def cluster_serve(cpu_manager: str, nodes: int, managed_style: bool, timeout_s: float) -> None:
    """The supervisor `cluster up` starts (detached): runs the cluster until SIGTERM."""
    from isotax.host.kubernetes import cluster as k

    sys.exit(k.serve(cpu_manager, nodes, managed_style, timeout_s))
