#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs the linters and the whole test suite in its two rooms:
# tests/unit first (no root, no runtime: run as the unprivileged user nobody when this shell is
# root, which shows it needs neither), then tests/integration (real environments, as root).
# Run as root. Arguments go to one pytest run instead of the two rooms, for example
# `bash scripts/test.sh tests/unit -x` or `bash scripts/test.sh -k gvisor`.
# `bash scripts/test.sh --guests` runs the slow room instead: tests/guests, isotax installed by
# setup.sh in a Debian 13 and a Debian 12 guest booting systemd on cgroup v2, under QEMU
# (docs/testing.md says how long it takes).
set -euo pipefail
cd "$(dirname "$0")/.."
# --kubernetes: the local cluster's tests need it built (about 10 min the first time).
bash scripts/setup.sh --kubernetes
.venv/bin/ruff check src tests benchmarks
.venv/bin/mypy src benchmarks  # the benchmark scripts use isotax as a library: its public names only
.venv/bin/lint-imports  # the import layers in pyproject.toml: an import that points up fails
pytest=(.venv/bin/python -m pytest -v -p no:cacheprovider)
if [ "${1:-}" = --guests ]; then
  shift
  exec "${pytest[@]}" -s tests/guests "$@"
fi
if [ $# -gt 0 ]; then
  exec "${pytest[@]}" "$@"
fi

nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null \
    && "${nobody[@]}" test -r tests/unit/__init__.py -a -x .venv/bin/python; then
  home=$(mktemp -d /tmp/itx-unit-XXXXXX)
  trap 'rm -rf "$home"' EXIT
  chown 65534:65534 "$home"
  echo "test.sh: the unit room, as nobody"
  "${nobody[@]}" env HOME="$home" TMPDIR="$home" PYTHONDONTWRITEBYTECODE=1 \
    "${pytest[@]}" tests/unit
else
  echo "test.sh: the unit room, as $(id -un) (not root, no setpriv, or nobody cannot read" \
    "this checkout)"
  "${pytest[@]}" tests/unit
fi
echo "test.sh: the integration room"
"${pytest[@]}" tests/integration
