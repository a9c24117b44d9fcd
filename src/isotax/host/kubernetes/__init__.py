"""A real single-node Kubernetes that isotax starts on this host from the binaries
scripts/kubernetes-build.sh builds (`isotax cluster up`, `isotax cluster down`): layout.py (its
versions, paths and addresses), pki.py (its certificates and kubeconfigs), configs.py (its
components' configuration files, rendered), cluster.py (start, supervise, stop) and
teardown.py (everything it made, removed)."""
