#!/bin/bash
# scripts/setup.sh's stand-in for the tests' namespace hosts, which reach no package registry
# (no apt, no PyPI): the venv is the controller's, hard-linked file by file (cp -al: seconds,
# no space), with its scripts and isotax's editable install pointed at this copy of the
# checkout, so the host runs the isotax the fleet installed. sed -i writes new files, so the
# controller's venv is never changed. Run in the install dir; $1: the controller's venv.
set -euo pipefail
src=$(cd "$1" && pwd -P)
here=$(pwd -P)
rm -rf .venv
cp -al "$src" .venv 2>/dev/null || { rm -rf .venv; cp -a "$src" .venv; }
grep -rlIZ -F -- "$src" .venv/bin | xargs -0 -r sed -i "s|$src|$here/.venv|g"
sed -i "s|^.*/src\$|$here/src|" .venv/lib/python3*/site-packages/__editable__.isotax-*.pth
