#!/usr/bin/env bash
# Builds a single-node Kubernetes from source, once, cached by version outside the checkout:
#   /opt/isotax/kubernetes/<k8s-version>/bin/   kubelet kube-apiserver kube-controller-manager
#       kube-scheduler kube-proxy kubectl etcd containerd containerd-shim-runc-v2 ctr
#       containerd-shim-runsc-v1 crictl, and for `isotax cluster up --managed` registry
#       (distribution's), crane and itx-htpasswd
#   /opt/isotax/kubernetes/<k8s-version>/cni/   bridge host-local loopback portmap
#   /opt/isotax/kubernetes/<k8s-version>/images/pause.tar   OCI archive of Kubernetes' pause
# Everything comes from the Go proxy (registry.k8s.io and GitHub releases are not reachable on
# the machines isotax was developed on). Each binary is skipped when it is already there at the
# right version (read back from the binary's Go build info), so running this again is cheap.
# Build times measured on a noisy 2-core host (2026-11-27), Go build cache cold for Kubernetes
# (warm only from building runsc): the six Kubernetes binaries in one `go build` ~375 s, etcd
# 21 s, containerd 58 s (+ shim 2 s, ctr 4 s), CNI plugins 9 s, crictl 30 s, gVisor shim 41 s,
# pause < 1 s: ~9.5 min in all. A second run with everything in place: < 1 s.
# Go: the host's go (>= 1.21) with GOTOOLCHAIN=auto fetches the toolchain a module asks for.
# GOCACHE/GOMODCACHE: Go's defaults (~/.cache/go-build, ~/go/pkg/mod), which persist.
# Usage: bash scripts/kubernetes-build.sh [--force]
set -euo pipefail
cd "$(dirname "$0")/.."

K8S_VERSION=v1.37.2          # k8s.io/kubernetes; staging modules k8s.io/* at v0.37.2
ETCD_VERSION=v3.7.3          # go.etcd.io/etcd/server/v3
CONTAINERD_VERSION=v2.4.2    # github.com/containerd/containerd/v2
CNI_VERSION=v1.10.0          # github.com/containernetworking/plugins
CRICTL_VERSION=v1.37.0       # sigs.k8s.io/cri-tools
PAUSE_VERSION=3.10.2         # build/pause/Makefile TAG in k8s.io/kubernetes v1.37.2
# `isotax cluster up --managed`: a registry that asks for credentials, a pusher, bcrypt lines
REGISTRY_VERSION=v3.1.2      # github.com/distribution/distribution/v3 cmd/registry
CRANE_VERSION=v0.22.1        # github.com/google/go-containerregistry cmd/crane
XCRYPTO_VERSION=v0.57.0      # golang.org/x/crypto (bcrypt), the one registry v3.1.2 uses
PAUSE_IMAGE=localhost/itx/pause:$PAUSE_VERSION
# gVisor's containerd shim comes from the same gvisor.dev/gvisor version as runsc, which
# scripts/setup.sh pins (and only it).
GVISOR_VERSION=$(sed -n 's/^RUNSC_VERSION=\([^ ]*\).*/\1/p' scripts/setup.sh)
[ -n "$GVISOR_VERSION" ] || { echo "kubernetes-build.sh: no RUNSC_VERSION in scripts/setup.sh" >&2; exit 2; }

PREFIX=${ISOTAX_K8S_PREFIX:-/opt/isotax/kubernetes}/$K8S_VERSION
BIN=$PREFIX/bin
CNI=$PREFIX/cni
IMAGES=$PREFIX/images
FORCE=
[ "${1:-}" = "--force" ] && FORCE=1

# Go: the host's, else the toolchain scripts/setup.sh fetched for runsc (/opt/isotax/go*).
GO=$(command -v go || true)
[ -n "$GO" ] || GO=/usr/local/go/bin/go
[ -x "$GO" ] || GO=$(ls -d /opt/isotax/go1.*/bin/go 2>/dev/null | tail -1)
[ -n "$GO" ] || GO=go
minor=$({ "$GO" version 2>/dev/null || true; } | sed -n 's/^go version go1\.\([0-9]*\).*/\1/p')
if [ "${minor:-0}" -lt 21 ]; then
  echo "kubernetes-build.sh: needs Go >= 1.21 (GOTOOLCHAIN=auto); run scripts/setup.sh or install Go" >&2
  exit 2
fi
export GOTOOLCHAIN=auto CGO_ENABLED=0 GOFLAGS=-buildvcs=false
mkdir -p "$BIN" "$CNI" "$IMAGES"
WORK=$(mktemp -d /var/tmp/itx-k8s-build.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

T_ALL=$SECONDS
step_start() { T_STEP=$SECONDS; echo "kubernetes-build.sh: $1 ..."; }
step_end() { echo "kubernetes-build.sh: $1 done in $((SECONDS - T_STEP)) s"; }

# have FILE MODULE VERSION: FILE is a Go binary built from (or depending on) MODULE@VERSION.
have() {
  [ -z "$FORCE" ] && [ -x "$1" ] &&
    "$GO" version -m "$1" 2>/dev/null | awk -v m="$2" -v v="$3" \
      '($1 == "mod" || $1 == "dep") && $2 == m && $3 == v { ok = 1 } END { exit !ok }'
}
# go_install DEST_NAME PKG@VERSION [ldflags]: go install into a scratch GOBIN, then install.
go_install() {
  local name=$1 pkgver=$2 ldflags=${3:-} gobin
  gobin=$(mktemp -d "$WORK/gobin.XXXXXX")
  GOBIN=$gobin "$GO" install -trimpath -ldflags "-s -w $ldflags" "$pkgver"
  install -m 755 "$gobin/$(basename "${pkgver%@*}")" "$BIN/$name"
}

# --- Kubernetes ------------------------------------------------------------------------------
# k8s.io/kubernetes's go.mod replaces its staging modules (k8s.io/api, ...) with ./staging
# paths, so `go install k8s.io/kubernetes/cmd/kubelet@v1.37.2` is refused; a wrapper module
# requires k8s.io/kubernetes and replaces each staging module with its v0.37.2 release.
K8S_CMDS=(kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl)
k8s_todo=()
for c in "${K8S_CMDS[@]}"; do
  have "$BIN/$c" k8s.io/kubernetes "$K8S_VERSION" || k8s_todo+=("$c")
done
if [ "${#k8s_todo[@]}" -gt 0 ]; then
  step_start "Kubernetes $K8S_VERSION: ${k8s_todo[*]}"
  K8S_DIR=$("$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  staging_version=v0.${K8S_VERSION#v1.}
  W=$WORK/k8s
  mkdir -p "$W"
  {
    echo "module isotax.local/kubernetes-build"
    echo
    sed -n 's/^go \(.*\)/go \1/p' "$K8S_DIR/go.mod"
    sed -n '/^godebug /p' "$K8S_DIR/go.mod"   # Kubernetes's GODEBUG defaults
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's#^\t\(k8s\.io/[^ ]*\) => \./staging/.*#\t\1 => \1 '"$staging_version"'#p' "$K8S_DIR/go.mod"
    echo ")"
  } > "$W/go.mod"
  n=$(grep -c " => k8s.io/" "$W/go.mod")
  [ "$n" -ge 30 ] || { echo "kubernetes-build.sh: only $n staging replaces found" >&2; exit 1; }
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    echo "import ("
    for c in "${K8S_CMDS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
    echo ")"
  } > "$W/tools.go"
  (cd "$W" && "$GO" mod tidy)
  # The version, as Kubernetes' hack/lib/version.sh stamps it.
  major=${K8S_VERSION#v}; major=${major%%.*}
  minor_k=${K8S_VERSION#v*.}; minor_k=${minor_k%%.*}
  ld=""
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor_k"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  done
  pkgs=()
  for c in "${k8s_todo[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  mkdir -p "$W/out"
  (cd "$W" && "$GO" build -trimpath -ldflags "-s -w$ld" -o "$W/out/" "${pkgs[@]}")
  for c in "${k8s_todo[@]}"; do install -m 755 "$W/out/$c" "$BIN/$c"; done
  v=$("$BIN/kubectl" version --client 2>/dev/null || true)   # (not piped into grep -q: pipefail)
  [[ $v == *"Client Version: $K8S_VERSION"* ]] ||
    { echo "kubernetes-build.sh: kubectl says '$v', not $K8S_VERSION" >&2; exit 1; }
  step_end "Kubernetes $K8S_VERSION"
fi

# --- etcd ------------------------------------------------------------------------------------
# etcd's root module go.etcd.io/etcd/v3 (its main) is not on the Go proxy: a two-line main
# calling etcdmain.Main of go.etcd.io/etcd/server/v3.
if ! have "$BIN/etcd" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"; then
  step_start "etcd $ETCD_VERSION"
  W=$WORK/etcd
  mkdir -p "$W"
  cat > "$W/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
  printf 'module isotax.local/etcd\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > "$W/go.mod"
  (cd "$W" && "$GO" mod tidy && "$GO" build -trimpath -ldflags "-s -w" -o "$W/etcd" .)
  install -m 755 "$W/etcd" "$BIN/etcd"
  step_end "etcd $ETCD_VERSION"
fi

# --- containerd --------------------------------------------------------------------------------
CTRD=github.com/containerd/containerd/v2
CTRD_LD="-X $CTRD/version.Version=$CONTAINERD_VERSION -X $CTRD/version.Package=$CTRD"
for c in containerd containerd-shim-runc-v2 ctr; do
  if ! have "$BIN/$c" "$CTRD" "$CONTAINERD_VERSION"; then
    step_start "$c $CONTAINERD_VERSION"
    go_install "$c" "$CTRD/cmd/$c@$CONTAINERD_VERSION" "$CTRD_LD"
    step_end "$c $CONTAINERD_VERSION"
  fi
done

# --- CNI plugins ---------------------------------------------------------------------------------
CNIM=github.com/containernetworking/plugins
declare -A CNI_PKG=([bridge]=main/bridge [host-local]=ipam/host-local [loopback]=main/loopback
                    [portmap]=meta/portmap)
for p in bridge host-local loopback portmap; do
  if ! have "$CNI/$p" "$CNIM" "$CNI_VERSION"; then
    step_start "CNI $p $CNI_VERSION"
    gobin=$(mktemp -d "$WORK/gobin.XXXXXX")
    GOBIN=$gobin "$GO" install -trimpath \
      -ldflags "-s -w -X $CNIM/pkg/utils/buildversion.BuildVersion=$CNI_VERSION" \
      "$CNIM/plugins/${CNI_PKG[$p]}@$CNI_VERSION"
    install -m 755 "$gobin/$p" "$CNI/$p"
    step_end "CNI $p $CNI_VERSION"
  fi
done

# --- crictl ----------------------------------------------------------------------------------
if ! have "$BIN/crictl" sigs.k8s.io/cri-tools "$CRICTL_VERSION"; then
  step_start "crictl $CRICTL_VERSION"
  go_install crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" \
    "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION"
  step_end "crictl $CRICTL_VERSION"
fi

# --- a managed-style cluster's registry, pusher and htpasswd ----------------------------------
if ! have "$BIN/registry" github.com/distribution/distribution/v3 "$REGISTRY_VERSION"; then
  step_start "registry $REGISTRY_VERSION"
  go_install registry "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION"
  step_end "registry $REGISTRY_VERSION"
fi
if ! have "$BIN/crane" github.com/google/go-containerregistry "$CRANE_VERSION"; then
  step_start "crane $CRANE_VERSION"
  go_install crane "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION"
  step_end "crane $CRANE_VERSION"
fi
# distribution's htpasswd takes bcrypt lines only, and nothing on the host writes them
# (apache2-utils is not installed): `itx-htpasswd USER` reads the password on stdin and prints
# USER:<bcrypt>.
if ! have "$BIN/itx-htpasswd" golang.org/x/crypto "$XCRYPTO_VERSION"; then
  step_start "itx-htpasswd (golang.org/x/crypto $XCRYPTO_VERSION)"
  W=$WORK/htpasswd
  mkdir -p "$W"
  cat > "$W/main.go" <<'EOF'
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: itx-htpasswd USER < password")
		os.Exit(2)
	}
	pw, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && pw == "" {
		fmt.Fprintln(os.Stderr, "itx-htpasswd: no password on stdin")
		os.Exit(2)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(strings.TrimRight(pw, "\r\n")), bcrypt.DefaultCost)
	if err != nil {
		fmt.Fprintln(os.Stderr, "itx-htpasswd:", err)
		os.Exit(1)
	}
	fmt.Printf("%s:%s\n", os.Args[1], hash)
}
EOF
  printf 'module isotax.local/htpasswd\n\ngo 1.24\n\nrequire golang.org/x/crypto %s\n' "$XCRYPTO_VERSION" > "$W/go.mod"
  (cd "$W" && "$GO" mod tidy && "$GO" build -trimpath -ldflags "-s -w" -o "$W/itx-htpasswd" .)
  install -m 755 "$W/itx-htpasswd" "$BIN/itx-htpasswd"
  step_end "itx-htpasswd"
fi

# --- gVisor's containerd shim (runtime_type io.containerd.runsc.v1) ---------------------------
# Built from a wrapper module that replaces gvisor.dev/gvisor with a copy of the same version and
# one patch: the shim's start lowers the shim daemon's oom_score_adj to -999 and fails on EACCES.
# Lowering oom_score_adj needs CAP_SYS_RESOURCE, which root lacks in containers and some VMs
# (the isotax dev machines' bounding set has no CAP_SYS_RESOURCE): "failed to start shim: start
# failed: io.containerd.runsc.v1: failed to set OOM Score on shim: write
# /proc/N/oom_score_adj: permission denied". The patch ignores that EACCES, as containerd's own
# sys.SetOOMScore does for non-root; everything else is gVisor $GVISOR_VERSION as released.
SHIM_PATCH="oom-eacces-1"
if ! have "$BIN/containerd-shim-runsc-v1" gvisor.dev/gvisor "$GVISOR_VERSION" ||
   [ "$(cat "$BIN/.containerd-shim-runsc-v1.patch" 2>/dev/null)" != "$SHIM_PATCH" ]; then
  step_start "containerd-shim-runsc-v1 $GVISOR_VERSION (+ patch $SHIM_PATCH)"
  GV_DIR=$("$GO" mod download -json "gvisor.dev/gvisor@$GVISOR_VERSION" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  W=$WORK/gvisor-shim
  mkdir -p "$W"
  cp -r "$GV_DIR" "$W/gvisor"
  chmod -R u+w "$W/gvisor"
  f=$W/gvisor/pkg/shim/v1/manager.go
  old='if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {'
  grep -qF "$old" "$f" || { echo "kubernetes-build.sh: gVisor shim patch does not apply to $f" >&2; exit 1; }
  sed -i "s|if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {|if err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil \&\& !os.IsPermission(err) {|" "$f"
  grep -qF '!os.IsPermission(err) {' "$f" || { echo "kubernetes-build.sh: gVisor shim patch failed" >&2; exit 1; }
  go_line=$(sed -n 's/^go \(.*\)/go \1/p' "$W/gvisor/go.mod")
  printf 'module isotax.local/gvisor-shim\n\n%s\n\nrequire gvisor.dev/gvisor %s\n\nreplace gvisor.dev/gvisor => ./gvisor\n' \
    "$go_line" "$GVISOR_VERSION" > "$W/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "gvisor.dev/gvisor/shim"\n' > "$W/tools.go"
  (cd "$W" && "$GO" mod tidy && "$GO" build -trimpath -ldflags "-s -w" -o "$W/shim" gvisor.dev/gvisor/shim)
  install -m 755 "$W/shim" "$BIN/containerd-shim-runsc-v1"
  echo "$SHIM_PATCH" > "$BIN/.containerd-shim-runsc-v1.patch"
  step_end "containerd-shim-runsc-v1 $GVISOR_VERSION"
fi

# --- pause image -----------------------------------------------------------------------------
# registry.k8s.io is not reachable: compile Kubernetes' own build/pause/linux/pause.c statically
# (as its Makefile does) and write an OCI image archive by hand (no image store touched), named
# $PAUSE_IMAGE through both the OCI ref-name and containerd's image-name annotations, so that
# `ctr -n k8s.io images import pause.tar` registers it under that name.
STAMP="$K8S_VERSION $PAUSE_IMAGE"
if [ -n "$FORCE" ] || [ ! -s "$IMAGES/pause.tar" ] || [ "$(cat "$IMAGES/pause.tar.ref" 2>/dev/null)" != "$STAMP" ]; then
  step_start "pause image $PAUSE_IMAGE"
  K8S_DIR=$("$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  W=$WORK/pause
  mkdir -p "$W/rootfs"
  if command -v gcc >/dev/null && gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-isotax" \
       -o "$W/rootfs/pause" "$K8S_DIR/build/pause/linux/pause.c" 2>"$W/gcc.err"; then
    strip "$W/rootfs/pause" 2>/dev/null || true
  else
    # No static C toolchain: a Go equivalent (reaps children, exits on SIGINT/SIGTERM).
    cat "$W/gcc.err" >&2 2>/dev/null || true
    echo "kubernetes-build.sh: gcc -static failed; building a Go pause instead" >&2
    mkdir -p "$W/gopause"
    cat > "$W/gopause/main.go" <<'EOF'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if os.Getpid() != 1 {
		os.Stderr.WriteString("Warning: pause should be the first process\n")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s == syscall.SIGCHLD {
			for {
				var ws syscall.WaitStatus
				if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
EOF
    printf 'module isotax.local/pause\n\ngo 1.21\n' > "$W/gopause/go.mod"
    (cd "$W/gopause" && "$GO" build -trimpath -ldflags "-s -w" -o "$W/rootfs/pause" .)
  fi
  /usr/bin/python3 - "$W/rootfs" "$IMAGES/pause.tar" "$PAUSE_IMAGE" <<'PY'
import hashlib, io, json, os, sys, tarfile

rootfs, out, name = sys.argv[1:]
def blob(tf, data, mediatype):
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mtime, info.mode = len(data), 0, 0o444
    tf.addfile(info, io.BytesIO(data))
    return {"mediaType": mediatype, "digest": f"sha256:{digest}", "size": len(data)}
# The layer: one file, /pause, root-owned, mtime 0 (reproducible), uncompressed.
lbuf = io.BytesIO()
with tarfile.open(fileobj=lbuf, mode="w", format=tarfile.PAX_FORMAT) as lt:
    path = os.path.join(rootfs, "pause")
    info = lt.gettarinfo(path, arcname="pause")
    info.uid = info.gid = 0; info.uname = info.gname = ""; info.mtime = 0; info.mode = 0o755
    with open(path, "rb") as f:
        lt.addfile(info, f)
layer = lbuf.getvalue()
diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
config = {
    "architecture": "amd64", "os": "linux",
    "config": {"Entrypoint": ["/pause"], "User": "65535:65535", "WorkingDir": "/"},
    "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    "history": [{"created_by": "isotax scripts/kubernetes-build.sh: pause.c, static"}],
}
with open(out + ".tmp", "wb") as f, tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tf:
    ldesc = blob(tf, layer, "application/vnd.oci.image.layer.v1.tar")
    cdesc = blob(tf, json.dumps(config, sort_keys=True).encode(), "application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": cdesc, "layers": [ldesc]}
    mdesc = blob(tf, json.dumps(manifest, sort_keys=True).encode(),
                 "application/vnd.oci.image.manifest.v1+json")
    mdesc["annotations"] = {"io.containerd.image.name": name,
                            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}
    mdesc["platform"] = {"architecture": "amd64", "os": "linux"}
    for fname, data in (("oci-layout", json.dumps({"imageLayoutVersion": "1.0.0"}).encode()),
                        ("index.json", json.dumps({"schemaVersion": 2, "manifests": [mdesc]}).encode())):
        info = tarfile.TarInfo(fname); info.size, info.mtime, info.mode = len(data), 0, 0o444
        tf.addfile(info, io.BytesIO(data))
os.replace(out + ".tmp", out)
PY
  echo "$STAMP" > "$IMAGES/pause.tar.ref"
  step_end "pause image $PAUSE_IMAGE"
fi

echo "kubernetes-build.sh: Kubernetes $K8S_VERSION in $PREFIX ($((SECONDS - T_ALL)) s)"
echo "kubernetes-build.sh: pause image $PAUSE_IMAGE: $IMAGES/pause.tar (ctr -n k8s.io images import)"
