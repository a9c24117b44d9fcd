#!/usr/bin/env bash
# Installs everything isotax needs on a Debian 12 host, as root: the runtimes, QEMU, the
# workload tools (the same Debian packages the image gets, so native runs use the same
# versions), and a virtual environment with isotax in .venv. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then echo "setup.sh: run as root (sudo bash scripts/setup.sh)" >&2; exit 2; fi

# A private archive cache and a lock timeout: another apt run on the machine can neither
# delete our downloads nor make us fail on its lock.
APT_CACHE=/var/cache/isotax-apt
mkdir -p "$APT_CACHE/partial"
APT=(apt-get -y -q -o DPkg::Lock::Timeout=600 -o Dir::Cache::archives="$APT_CACHE")
PACKAGES=(
  # environments
  runc crun qemu-system-x86 qemu-utils iproute2 iptables kmod
  # the image: debootstrap, ext4 export, static guest helpers
  debootstrap e2fsprogs gcc libc6-dev
  # workload tools, natively (same packages as in the image)
  xz-utils hpcc libopenblas0-pthread openmpi-bin
  fio iperf3 nuttcp netperf sockperf
  redis-server redis-tools
  mariadb-server mariadb-client sysbench
  # Python for the virtual environment
  python3 python3-venv
  # host-wide CPU cycles where the machine has a PMU (telemetry.py)
  linux-perf
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
# redis-server's and mariadb-server's postinsts start (and enable) a system Redis on 6379 and
# MariaDB on 3306 through invoke-rc.d: isotax starts its own servers, on its own ports, and a
# stray service would load the host.
# A policy-rc.d that exits 101 tells invoke-rc.d "no": created only if none is there (a
# container host may have its own), and removed right after. If a service still got started
# (a host whose init ignores policy-rc.d), it is the system's, not isotax's: stop it with
# `systemctl disable --now redis-server mariadb` if you want them gone; this script kills nothing.
POLICY=/usr/sbin/policy-rc.d
OWN_POLICY=
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\n# isotax setup.sh: no services started by package installs\nexit 101\n' > "$POLICY"
  chmod 755 "$POLICY"
  OWN_POLICY=1
  trap '[ -n "$OWN_POLICY" ] && rm -f "$POLICY"' EXIT
fi
DEBIAN_FRONTEND=noninteractive "${APT[@]}" install --no-install-recommends "${PACKAGES[@]}"
if [ -n "$OWN_POLICY" ]; then
  rm -f "$POLICY"
  OWN_POLICY=
fi

# Debian's python3 (3.11 on bookworm) for the venv: the same interpreter on every such host.
if [ ! -x .venv/bin/isotax ]; then
  /usr/bin/python3 -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[dev]'
echo "setup.sh: ready; .venv/bin/isotax --help"
