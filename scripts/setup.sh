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
  # Python for the virtual environment
  python3 python3-venv
)
# `install` also upgrades an installed package to the candidate version: the image gets the
# candidate from debootstrap, and native runs must use the same version of each tool.
"${APT[@]}" update
DEBIAN_FRONTEND=noninteractive "${APT[@]}" install --no-install-recommends "${PACKAGES[@]}"

# Debian's python3 (3.11 on bookworm) for the venv: the same interpreter on every such host.
if [ ! -x .venv/bin/isotax ]; then
  /usr/bin/python3 -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -e '.[dev]'
echo "setup.sh: ready; .venv/bin/isotax --help"
