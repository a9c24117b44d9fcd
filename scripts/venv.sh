#!/usr/bin/env bash
# The virtual environment isotax runs from (default .venv; another directory as the argument),
# exactly as requirements.lock pins it: every Python package at its locked version, each file
# checked against its sha256, then isotax itself, editable, with no dependency resolution of
# its own. scripts/setup.sh runs it last; it needs no root. Safe to run again: a second run
# changes nothing, and a venv made otherwise (an older setup.sh's `pip install -e '.[dev]'`)
# is moved to the locked versions.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv}
# Debian's python3 for the venv (3.11 on bookworm, 3.13 on trixie): the same interpreter on
# every such host. The lock is resolved for 3.11, and each of its pins has a wheel for 3.13
# too (the guest room installs it on Debian 13; `pip check` below proves the set complete).
PYTHON=${ISOTAX_PYTHON:-/usr/bin/python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
pyver=$("$VENV/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$pyver" != 3.11 ] && [ "$pyver" != 3.13 ]; then
  echo "venv.sh: $VENV has Python $pyver; requirements.lock is for 3.11 and 3.13 (Debian 12's" \
    "and 13's python3): some pins may not install; regenerate the lock with scripts/lock.sh" >&2
fi
pip=("$VENV/bin/pip" --disable-pip-version-check)
# --require-hashes: a file whose digest is not in the lock, or a package the lock does not
# name (a dependency added without re-locking), stops the install. --only-binary: wheels only,
# so nothing is built from source with build dependencies that no hash covers.
"${pip[@]}" install -q --require-hashes --only-binary :all: -r requirements.lock
# isotax itself: its dependencies are all installed above, and its build backend (setuptools,
# locked) is in the venv, so neither resolution nor an isolated build fetches anything.
"${pip[@]}" install -q --no-deps --no-build-isolation -e .
# The lock satisfies every requirement of every installed package (else the lock is stale).
"${pip[@]}" check
