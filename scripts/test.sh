#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs the linters and the whole test suite, integration tests
# in real environments included. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests
.venv/bin/mypy src
exec .venv/bin/python -m pytest -v -p no:cacheprovider "$@"
