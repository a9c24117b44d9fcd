"""Which Kubernetes cluster a run's pods go to, and how isotax may reach it.

- The local cluster (`isotax cluster up`), when `isotax run` is given no --kubeconfig: isotax
  is on its nodes, so it loads the workload image into each node's containerd, pauses a pod
  through its node's runtime, reads its cgroups and the nodes' iptables.
- A cluster a kubeconfig points at (`isotax run --kubeconfig PATH --pod-image REF`): only the
  Kubernetes API is used, as a user's account gives it. Pods run the image REF, which the
  user pushed where the nodes pull from (`isotax image oci-archive` writes it); each pod's
  packages are compared with the workload image's, so the bits are the same ones. Pods are
  not paused between cells (the node's runtime is out of reach), and their host processes
  and cgroups are not read. Native runs on this host: it is a baseline only where this host
  is the pods' node; elsewhere the plan names a pod as its baseline.

`isotax run` passes its choice down in the environment (ISOTAX_KUBECONFIG,
ISOTAX_POD_IMAGE, ISOTAX_PULL_SECRETS), so every part of the run, and the processes it starts,
see the same one. A foreign cluster's kubectl is isotax's own build unless ISOTAX_KUBECTL
names another (one within a minor version of that cluster's API server: kubectl's supported
skew, which isotax checks).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from isotax.host import command
from isotax.host.kubernetes import layout as L
from isotax.protocols import Completed

KUBECONFIG_VAR = "ISOTAX_KUBECONFIG"
POD_IMAGE_VAR = "ISOTAX_POD_IMAGE"
PULL_SECRETS_VAR = "ISOTAX_PULL_SECRETS"  # --pull-secret's, newline-separated
KUBECTL_VAR = "ISOTAX_KUBECTL"


@dataclass(frozen=True)
class Target:
    kubeconfig: Path
    pod_image: str = ""  # a foreign cluster's: the workload image's reference there
    local: bool = True  # the cluster `isotax cluster up` started on this host
    # --pull-secret's: a secret's name (NAME, NAMESPACE/NAME) or a docker config.json file,
    # copied into each of isotax's namespaces for its pods' image pulls
    pull_secrets: tuple[str, ...] = ()

    @property
    def kubectl_path(self) -> str:
        given = os.environ.get(KUBECTL_VAR, "") if not self.local else ""
        return given or str(L.binary("kubectl"))

    def kubectl(self, *args: str, timeout: float = 60, input_text: str | None = None
                ) -> Completed:
        return command.run([self.kubectl_path, f"--kubeconfig={self.kubeconfig}", *args],
                           timeout, input=input_text)

    def words(self) -> str:
        return ("the local cluster (`isotax cluster up`)" if self.local
                else f"the cluster of {self.kubeconfig}")


def current() -> Target:
    """The run's cluster: the kubeconfig isotax run was given, else the local one."""
    given = os.environ.get(KUBECONFIG_VAR, "")
    if not given:
        return Target(L.KUBECONFIG)
    secrets = tuple(s for s in os.environ.get(PULL_SECRETS_VAR, "").split("\n") if s)
    return Target(Path(given), os.environ.get(POD_IMAGE_VAR, ""), local=False,
                  pull_secrets=secrets)


def choose(kubeconfig: str | None, pod_image: str | None,
           pull_secrets: tuple[str, ...] = ()) -> None:
    """Set the run's cluster (isotax run's --kubeconfig, --pod-image and --pull-secret) for
    this process and those it starts. ValueError, one line with the fix, for a kubeconfig
    that is not there."""
    if kubeconfig is None:
        for var in (KUBECONFIG_VAR, POD_IMAGE_VAR, PULL_SECRETS_VAR):
            os.environ.pop(var, None)
        return
    path = Path(kubeconfig).expanduser().resolve()
    if not path.is_file():
        raise ValueError(f"--kubeconfig {kubeconfig}: no such file; give the kubeconfig of the "
                         "cluster to run the pods on")
    os.environ[KUBECONFIG_VAR] = str(path)
    os.environ[POD_IMAGE_VAR] = pod_image or ""
    # A file's path absolute, so a resumed run in another directory finds it again.
    os.environ[PULL_SECRETS_VAR] = "\n".join(
        str(Path(s).expanduser().resolve()) if Path(s).expanduser().is_file() else s
        for s in pull_secrets)
