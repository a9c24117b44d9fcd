"""The registry of the plugins: every environment kind and workload, found the way entry
points would be. The first question walks the plugin packages by name and imports every
module, whose @register decorator then records its class. That dynamic import is the one place
this bottom layer reaches the plugins; nothing here imports them statically, so the import
layers stay one-way."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from functools import cache
from typing import Any

from isotax.facts import Isolation
from isotax.image.distribution import host_choice
from isotax.image.recipe import ImageHook, Recipe
from isotax.protocols.environment import Environment
from isotax.protocols.workload import AnyWorkload, FigureHints, Port

# ---------------------------------------------------------------------------- the registry

ENVIRONMENTS: dict[str, type[Environment]] = {}
WORKLOADS: dict[str, type[AnyWorkload]] = {}
PLUGIN_PACKAGES = ("isotax.environments", "isotax.workloads")


@cache
def _discover() -> None:
    # Every module of the plugin packages (families included) registers what it defines; a new
    # environment or workload is one new file, with no list to keep in step.
    for name in PLUGIN_PACKAGES:
        pkg = importlib.import_module(name)
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{name}."):
            importlib.import_module(info.name)


def environment_kinds() -> list[str]:
    _discover()
    return sorted(ENVIRONMENTS)


def environments() -> dict[str, type[Environment]]:
    _discover()
    return dict(ENVIRONMENTS)


def isolation_of(kind: str) -> Isolation | None:
    """The isolation a registered kind declares; None for a kind not registered (a stored run
    of a since-removed kind, or a describe() without one)."""
    cls = environments().get(kind)
    return cls.isolation if cls is not None else None


def kinds_with(isolation: Isolation) -> list[str]:
    """The registered kinds that declare `isolation`, sorted (e.g. the host's: the baseline's)."""
    return sorted(k for k, cls in environments().items() if cls.isolation is isolation)


def workloads() -> dict[str, type[AnyWorkload]]:
    _discover()
    return dict(WORKLOADS)


def workload_packages() -> tuple[str, ...]:
    """The Debian packages every registered workload needs, each once, in registry order:
    what the image's caller passes to its recipe (isotax.image is below the registry)."""
    return tuple(dict.fromkeys(p for cls in workloads().values() for p in cls.packages))


def workload_image_hooks() -> tuple[ImageHook, ...]:
    """Every registered workload's image hooks, each once, in registry order."""
    return tuple(dict.fromkeys(h for cls in workloads().values() for h in cls.image_hooks))


def image_recipe(distribution: str | None = None, **settings: Any) -> Recipe:
    """The recipe of the image every registered workload runs in: their packages and their
    image hooks (isotax.image is below the registry, so it is told them here), on the Debian
    release `distribution` (None: this host's own, else image.distribution.FALLBACK)."""
    codename = distribution or host_choice().codename
    return Recipe.for_workloads(workload_packages(), workload_image_hooks(),
                                distribution=codename, **settings)


def workload_ports() -> list[Port]:
    """Every port a registered workload's server listens on, each once, in registry order."""
    return list(dict.fromkeys(p for cls in workloads().values() for p in cls.ports.values()))


def headline_metric(workload: str, metrics: Sequence[str]) -> str:
    """The headline among `metrics` (a point's metrics in the order its run reports them):
    the workload's declared `headline` where it is one of them, else the first; "" for none.
    A stored run of a since-removed workload gets its first metric."""
    cls = workloads().get(workload)
    declared = cls.headline if cls is not None else ""
    if declared and declared in metrics:
        return declared
    return metrics[0] if metrics else ""


def figure_hints(workload: str) -> FigureHints:
    """How the report draws a workload, by name; the defaults (tables only) for a name no
    registered workload has, as a stored run of a since-removed workload may bring."""
    cls = workloads().get(workload)
    return cls.figures if cls is not None else FigureHints()
