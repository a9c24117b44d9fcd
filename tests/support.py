"""Shared by the end-to-end tests: a skip that names exactly what the machine lacks."""

from __future__ import annotations

import os
import shutil

import pytest


def requires_root_and(*tools: str) -> pytest.MarkDecorator:
    reason = None
    if os.geteuid() != 0:
        reason = "needs root for containers, network namespaces and the VM's tap"
    else:
        missing = [t for t in tools if shutil.which(t) is None]
        if missing:
            reason = f"{', '.join(missing)} not installed (scripts/setup.sh installs them)"
    return pytest.mark.skipif(reason is not None, reason=reason or "")
