"""Import every environment and workload module once, so their @register decorators run."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from isotax import environments as env_pkg
from isotax import workloads as wl_pkg
from isotax.environments import base as env_base
from isotax.workloads import base as wl_base


@cache
def _load() -> None:
    # Every module of the two packages (families included) registers what it defines; a new
    # environment or workload is one new file, with no list to keep in step.
    for pkg in (env_pkg, wl_pkg):
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{pkg.__name__}."):
            importlib.import_module(info.name)


def environment_kinds() -> list[str]:
    _load()
    return sorted(env_base.REGISTRY)


def environments() -> dict[str, type[env_base.Environment]]:
    _load()
    return dict(env_base.REGISTRY)


def workloads() -> dict[str, type[wl_base.AnyWorkload]]:
    _load()
    return dict(wl_base.REGISTRY)
