"""The versions a run was made with, beyond the host fingerprint: isotax's Python dependencies
(the closure, as installed) and the host tools isotax drives that are not environment runtimes
(those are in the fingerprint's "runtimes"). The runner stores them as the run meta "versions"
when a run starts; a bundle's manifest names them; `isotax report` compares them with the
versions it regenerates the report with, because the report's bytes depend on some of them
(matplotlib writes the figures' SVG, numpy and scipy compute the intervals).

Every reader is plain data in, data out except `collect`, which asks the live system.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from isotax.host.facts.fingerprint import first_line

META_KEY = "versions"

# The packages whose version can change the report's bytes, and what may change with them: the
# warning names the consequence, so a reader knows whether a difference matters to them.
REPORT_PACKAGES: dict[str, str] = {
    "isotax": "sections, rules and wording may differ",
    "matplotlib": "figures may differ in bytes",
    "numpy": "statistics may differ in the last digits",
    "scipy": "intervals may differ in the last digits",
    "pydantic": "results.json may differ in form",
}

# Host tools isotax runs outside the environments (the runtimes are the fingerprint's), by
# name: the command that prints the version on its first line (stdout or stderr). numactl has
# no version option and is left out rather than recorded as an error.
HOST_TOOLS: dict[str, tuple[str, ...]] = {
    "perf": ("perf", "--version"),  # host-wide CPU cycles (telemetry)
    "gcc": ("gcc", "--version"),  # the image's static guest helpers
    "debootstrap": ("debootstrap", "--version"),  # the image
    "mke2fs": ("mkfs.ext4", "-V"),  # the image's ext4 export
    "busybox": ("busybox", "--help"),  # the VM's initramfs
    "ip": ("ip", "-V"),  # namespaces, veths, bridges
    "iptables": ("iptables", "--version"),  # NAT for bridged environments
    "ethtool": ("ethtool", "--version"),  # offload parity
    "ssh": ("ssh", "-V"),  # the remote load generator, the fleet
    "zstd": ("zstd", "--version"),
    "xz": ("xz", "--version"),
}


def dependency_closure(root: str = "isotax") -> dict[str, str]:
    """{canonical name: version} of root and every distribution its requirements reach, as
    installed; root's extras count where all their requirements are installed (a venv with
    the `data` extra records pandas and pyarrow). A requirement not installed is left out:
    it is what ran, not what was asked for."""
    try:
        dist = metadata.distribution(root)
    except metadata.PackageNotFoundError:
        return {}
    extras = [e for e in dist.metadata.get_all("Provides-Extra") or []
              if all(_installed(r.name) for r in _extra_requirements(dist, e))]
    seen: dict[str, str] = {}
    visited: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = [(root, frozenset(extras))]
    while todo:
        name, want = todo.pop()
        key = canonicalize_name(name)
        if (key, want) in visited:
            continue
        visited.add((key, want))
        try:
            d = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[key] = d.version
        todo += [(r.name, frozenset(r.extras)) for r in _requirements(d, set(want))]
    return dict(sorted(seen.items()))


def _installed(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def _requirements(dist: metadata.Distribution, extras: set[str]) -> list[Requirement]:
    """dist's requirements that apply here with `extras` asked for (markers evaluated for this
    interpreter and platform)."""
    out = []
    for text in dist.requires or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue  # a malformed line in someone's metadata says nothing about versions
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
            out.append(req)
    return out


def _extra_requirements(dist: metadata.Distribution, extra: str) -> list[Requirement]:
    """The requirements that only `extra` brings."""
    base = {str(r) for r in _requirements(dist, set())}
    return [r for r in _requirements(dist, {extra}) if str(r) not in base]


def host_tools(tools: Mapping[str, tuple[str, ...]] = HOST_TOOLS) -> dict[str, str]:
    """{tool: first line of its version output}, "not installed" where it is not."""
    # The fingerprint's reading of a host command; a leading "* " (some tools' banners) dropped.
    return {name: first_line(argv).strip("* ") for name, argv in tools.items()}


def python_version() -> str:
    """The interpreter: version, implementation and where it is (Debian's python3 or another)."""
    return f"{platform.python_version()} ({platform.python_implementation()}, {sys.executable})"


def collect() -> dict[str, Any]:
    """What the runner stores as the run meta "versions"."""
    return {"python": python_version(), "python_packages": dependency_closure(),
            "host_tools": host_tools()}


def installed(names: Iterable[str]) -> dict[str, str]:
    """{name: installed version} of those installed here."""
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return out


def report_packages(packages: Mapping[str, str]) -> dict[str, str]:
    """The recorded versions of the packages that shape the report, in REPORT_PACKAGES' order."""
    return {n: packages[n] for n in REPORT_PACKAGES if n in packages}


def report_differences(recorded: Mapping[str, Any] | None,
                       current: Mapping[str, str]) -> list[str]:
    """One warning line per report-shaping package whose current version differs from the one
    the run recorded (recorded: a run's "versions" meta, None for a run made before isotax
    recorded them, which is one line of its own: nothing vouches that they were equal)."""
    if not recorded or not isinstance(recorded.get("python_packages"), Mapping):
        return ["the run recorded no package versions (made before isotax recorded them): the "
                "regenerated report may differ from the one the run wrote"]
    was: Mapping[str, str] = recorded["python_packages"]
    out = []
    for name, consequence in REPORT_PACKAGES.items():
        a, b = was.get(name), current.get(name)
        if a != b:
            out.append(f"the report is regenerated with {name} {b or '(not installed)'}; the "
                       f"run was reported with {a or '(not recorded)'}: {consequence}")
    return out


def show(packages: Iterable[tuple[str, str]]) -> str:
    """[(name, version)] -> "name version, name version"."""
    return ", ".join(f"{n} {v}" for n, v in packages)
