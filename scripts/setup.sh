#!/usr/bin/env bash
# Installs everything isotax needs on a Debian 12 (bookworm) or Debian 13 (trixie) host, as
# root: the runtimes, QEMU, the workload tools (the same Debian packages the image gets, so
# native runs use the same versions), and a virtual environment with isotax in .venv. Safe to
# run again. The package names below exist in both releases; where the releases differ (Python
# 3.11 and 3.13, Podman 4 and 5, Docker 20.10 and 26, QEMU 7.2 and 10.0, Open MPI 4 and 5),
# isotax reads the installed versions at run time.
# `--kubernetes` also builds the local Kubernetes (scripts/kubernetes-build.sh: about 10 min
# the first time, cached by version) that `isotax cluster up` starts.
set -euo pipefail
cd "$(dirname "$0")/.."
KUBERNETES=
for arg in "$@"; do
  case $arg in
    --kubernetes) KUBERNETES=1 ;;
    *) echo "setup.sh: unknown argument $arg (the one option: --kubernetes)" >&2; exit 2 ;;
  esac
done
if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (as a user with sudo: sudo bash scripts/setup.sh)" >&2; exit 2
fi
# The releases this script is tried on; another Debian-like system gets a warning, not a
# refusal (its package names may differ: apt says which).
OS_ID=$(. /etc/os-release 2>/dev/null && echo "${ID:-?} ${VERSION_ID:-?}")
case $OS_ID in
  "debian 12"|"debian 13") ;;
  *) echo "setup.sh: this is $OS_ID; tried on Debian 12 and 13 only: going on" >&2 ;;
esac

# A private archive cache and a lock timeout: another apt run on the machine can neither
# delete our downloads nor make us fail on its lock.
APT_CACHE=/var/cache/isotax-apt
mkdir -p "$APT_CACHE/partial"
APT=(apt-get -y -q -o DPkg::Lock::Timeout=600 -o Dir::Cache::archives="$APT_CACHE")
PACKAGES=(
  # environments
  runc crun qemu-system-x86 qemu-utils iproute2 iptables kmod
  # container engines (docker: isotax starts a private dockerd when none runs; podman: netavark,
  # the network backend isotax names on podman's command line, as Podman 5 has no CNI, and
  # aardvark-dns, its DNS); policy-rc.d below keeps their services from starting
  docker.io podman netavark aardvark-dns
  # netavark's firewall: Debian 13's (1.14) drives nftables through the nft program, which
  # podman only recommends (without it every bridged `podman run` fails: "unable to execute
  # nft"); Debian 12's (1.4) drives iptables
  nftables
  # the system container (nspawn); NIC offloads for parity; NUMA placement
  systemd-container ethtool numactl
  # the image: debootstrap, ext4 export, static guest helpers
  debootstrap e2fsprogs gcc libc6-dev
  # (the workload tools come after the virtual environment: each workload declares them)
  # Python for the virtual environment
  python3 python3-venv
  # host-wide CPU cycles where the machine has a PMU (telemetry.py)
  linux-perf
  # the HTML report's test opens it headless and takes a screenshot
  chromium
  # the tests read the VM's initramfs back with busybox's cpio (an independent reader)
  busybox
  # the PostgreSQL store (--store postgresql://...); its tests start a private server of their
  # own (initdb, pg_ctl) on a Unix socket in /tmp/itx-pg-*, never the system cluster
  postgresql
  # beyond one machine: sshd for the tests' namespace hosts, the ssh client for the remote load
  # generator and Ansible, ping for the link's round-trip floor
  openssh-server openssh-client iputils-ping
  # the local Kubernetes (isotax cluster): its certificates
  openssl
)
# netperf is in Debian's non-free component, which the image's recipe includes and a stock
# host's sources do not: add non-free from the same mirror and suites as the host's main
# sources (deb822 debian.sources), so native runs get the image's netperf version.
NONFREE=/etc/apt/sources.list.d/isotax-non-free.sources
if [ ! -e "$NONFREE" ] && [ -r /etc/apt/sources.list.d/debian.sources ]; then
  awk -v RS= '/(^|\n)URIs:[^\n]*\/debian\/?(\n|$)/ && !/debian-security/ {
      for (i = 1; i <= split($0, l, "\n"); i++)
        if (l[i] ~ /^(Types|URIs|Suites|Signed-By):/) print l[i]
      print "Components: non-free"; print ""; exit }' \
    /etc/apt/sources.list.d/debian.sources > "$NONFREE.tmp"
  if grep -q '^Suites:' "$NONFREE.tmp"; then
    mv "$NONFREE.tmp" "$NONFREE"
  else
    rm -f "$NONFREE.tmp"
    echo "setup.sh: no Debian main stanza in debian.sources; add non-free by hand for netperf" >&2
  fi
fi
# `install` also upgrades an installed package to the candidate version: the image gets the
# candidate from debootstrap, and native runs must use the same version of each tool.
"${APT[@]}" update
# Debian 13 moved Docker's command line out of docker.io into docker-cli, which docker.io only
# recommends (and this script installs without recommends); Debian 12's docker.io has it.
if apt-cache show docker-cli >/dev/null 2>&1; then
  PACKAGES+=(docker-cli)
fi
# redis-server's, mariadb-server's and postgresql's postinsts start (and enable) a system Redis
# on 6379, MariaDB on 3306 and PostgreSQL's cluster 'main' on 5432 through invoke-rc.d: isotax
# starts its own servers, on its own ports or sockets, and a stray service would load the host.
# A policy-rc.d that exits 101 tells invoke-rc.d "no": created only if none is there (a
# container host may have its own), and removed right after. If a service still got started
# (a host whose init ignores policy-rc.d), it is the system's, not isotax's: stop it with
# `systemctl disable --now redis-server mariadb postgresql` if you want them gone; this script
# kills nothing.
POLICY=/usr/sbin/policy-rc.d
OWN_POLICY=
trap '[ -n "$OWN_POLICY" ] && rm -f "$POLICY"' EXIT
apt_install() {
  if [ ! -e "$POLICY" ]; then
    printf '#!/bin/sh\n# isotax setup.sh: no services started by package installs\nexit 101\n' > "$POLICY"
    chmod 755 "$POLICY"
    OWN_POLICY=1
  fi
  DEBIAN_FRONTEND=noninteractive "${APT[@]}" install --no-install-recommends "$@"
  if [ -n "$OWN_POLICY" ]; then
    rm -f "$POLICY"
    OWN_POLICY=
  fi
}
apt_install "${PACKAGES[@]}"

# gVisor: Debian bookworm's runsc (20221219) has no systrap platform and its netstack fails
# here, so build the current one the way gVisor's docs say, with `go install` (the "go" branch
# of gvisor.dev/gvisor, pinned here and nowhere else), into /opt/isotax/runsc/runsc; skipped
# when that version is there. The version is stamped into `runsc --version` as Bazel does.
# Go: the host's go if it is >= 1.21 (it fetches the toolchain gVisor's go.mod asks for through
# the Go proxy by itself), else Go's own toolchain zip from the Go proxy, checked by sha256
# (bookworm's golang 1.19 is too old for gVisor and cannot switch toolchains).
RUNSC_VERSION=v0.0.0-20260905035102-160fafc42237  # go branch, 2026-09-05
GO_BOOTSTRAP=go1.26.8
GO_BOOTSTRAP_SHA256=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7
RUNSC=/opt/isotax/runsc/runsc
# ensure_go: GO set to a Go >= 1.21 (the host's, else the pinned bootstrap toolchain, fetched
# once into /opt/isotax). runsc's build needs it, and so does kubernetes-build.sh even when
# everything is built (it reads the binaries' build info with `go version -m`).
ensure_go() {
  GO=$(command -v go || echo /usr/local/go/bin/go)
  minor=$({ "$GO" version 2>/dev/null || true; } | sed -n 's/^go version go1\.\([0-9]*\).*/\1/p')
  if [ "${minor:-0}" -lt 21 ]; then
    GOROOT_BOOT=/opt/isotax/$GO_BOOTSTRAP
    if [ ! -x "$GOROOT_BOOT/bin/go" ]; then
      mkdir -p /opt/isotax
      /usr/bin/python3 - "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-$GO_BOOTSTRAP.linux-amd64.zip" \
          "$GO_BOOTSTRAP_SHA256" "$GOROOT_BOOT" <<'PY'
import hashlib, io, os, shutil, sys, tempfile, urllib.request, zipfile
url, want, dest = sys.argv[1:]
data = urllib.request.urlopen(url, timeout=600).read()
if hashlib.sha256(data).hexdigest() != want:
    sys.exit(f"setup.sh: {url} does not have the pinned sha256 {want}")
tmp = tempfile.mkdtemp(dir=os.path.dirname(dest))
with zipfile.ZipFile(io.BytesIO(data)) as z:
    for info in z.infolist():
        path = z.extract(info, tmp)
        os.chmod(path, (info.external_attr >> 16) & 0o777 or 0o644)
top = os.path.join(tmp, "golang.org", os.listdir(os.path.join(tmp, "golang.org"))[0])
os.rename(top, dest)
shutil.rmtree(tmp)
PY
    fi
    GO=$GOROOT_BOOT/bin/go
  fi
}
if [ "$("$RUNSC" --version 2>/dev/null | head -1)" != "runsc version $RUNSC_VERSION" ]; then
  t0=$SECONDS
  ensure_go
  GOBIN_TMP=$(mktemp -d)
  GOTOOLCHAIN=auto GOBIN="$GOBIN_TMP" CGO_ENABLED=0 "$GO" install \
    -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$RUNSC_VERSION" \
    "gvisor.dev/gvisor/runsc@$RUNSC_VERSION"
  install -D -m 755 "$GOBIN_TMP/runsc" "$RUNSC"
  rm -rf "$GOBIN_TMP"
  echo "setup.sh: runsc $RUNSC_VERSION installed in $RUNSC ($((SECONDS - t0)) s)"
fi

# The virtual environment in .venv from requirements.lock (pinned, hash-checked; Debian's
# python3), with the dev and data extras the tests need, then isotax itself (scripts/venv.sh).
bash scripts/venv.sh .venv

# The workload tools, natively: the Debian packages every registered workload declares (the
# image's and its load generator's client packages; `isotax workloads --packages`), so native
# runs use the image's versions, and a new workload needs no line here.
mapfile -t WORKLOAD_PACKAGES < <(.venv/bin/isotax workloads --packages)
apt_install "${WORKLOAD_PACKAGES[@]}"
if [ -n "$KUBERNETES" ]; then
  ensure_go
  PATH=$(dirname "$GO"):$PATH bash scripts/kubernetes-build.sh
fi
echo "setup.sh: ready; .venv/bin/isotax --help"
