#!/usr/bin/env bash
# Regenerates requirements.lock: every Python package that isotax, its `dev` and `data` extras
# and its build backend ([build-system] requires, plus pip) need, pinned to one version with the
# sha256 of every file PyPI has for it, for CPython 3.11 on Linux x86_64 (Debian 12's python3,
# which scripts/setup.sh makes the venv with). Run it after changing a dependency in
# pyproject.toml (tests/unit/test_lock.py fails until the lock covers it), or to move every pin
# to the newest versions the ranges allow. Needs python3 and PyPI; no root.
#
# uv resolves for a named target (--python-version, --python-platform) whatever machine runs
# this, so the lock is the same from a laptop on another Python; pip-compile resolves for the
# interpreter it runs in. uv itself is pinned here and installed into a throwaway venv: it only
# writes the lock, nothing installs with it (setup.sh installs with pip --require-hashes).
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.8
work=$(mktemp -d /tmp/itx-lock-XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION"
# setup.sh installs isotax with --no-build-isolation, so its build backend comes from the lock
# (hashed) like everything else; pip too, which setup.sh upgrades to the locked version. On
# stdin ("-"), so the lock's "# via" lines name no temporary file.
python3 -c 'import tomllib; print("\n".join(
    tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"] + ["pip"]))' |
  "$work/venv/bin/uv" pip compile --quiet --no-progress pyproject.toml - \
    --extra dev --extra data --generate-hashes \
    --python-version 3.11 --python-platform x86_64-unknown-linux-gnu \
    --custom-compile-command "bash scripts/lock.sh" \
    --no-config -o "$work/requirements.lock"
mv "$work/requirements.lock" requirements.lock
echo "lock.sh: requirements.lock: $(grep -c '^[a-z0-9]' requirements.lock) packages"
