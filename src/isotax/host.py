"""The host fingerprint stored with every run: what a reader needs to trust or redo a result."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any

from isotax import __version__
from isotax.numa import nodes

_RUNTIME_VERSION_ARGV = {
    "runc": ["runc", "--version"],
    "crun": ["crun", "--version"],
    "qemu": ["qemu-system-x86_64", "--version"],
}


def _first_line(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return "not installed"
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""


def _field(path: str, prefix: str, sep: str) -> str | None:
    """The value of the first line of a /proc-style file that starts with prefix."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(sep, 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    return _field("/proc/cpuinfo", "model name", ":") or platform.processor() or "unknown"


def _mem_total_mib() -> int:
    v = _field("/proc/meminfo", "MemTotal:", ":")
    return int(v.split()[0]) // 1024 if v else 0


def _distro() -> str:
    v = _field("/etc/os-release", "PRETTY_NAME=", "=")
    return v.strip('"') if v else "unknown"


def _cgroup_version() -> str:
    return "v2" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "v1"


def fingerprint() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "distro": _distro(),
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count() or 0,
        "memory_mib": _mem_total_mib(),
        "cgroup": _cgroup_version(),
        "numa_nodes": len(nodes()) or 1,
        "python": sys.version.split()[0],
        "isotax": __version__,
        "runtimes": {k: _first_line(v) for k, v in _RUNTIME_VERSION_ARGV.items()},
    }
