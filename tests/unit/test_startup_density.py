"""startup and density: the percentile they report and their parameters' checks."""

from __future__ import annotations

import pytest

from isotax import protocols
from isotax.workloads.density import Density
from isotax.workloads.startup import Startup, percentile


def test_percentile_is_the_interpolated_one() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10, 20], 95) == pytest.approx(19.5)
    assert percentile([7], 95) == 7


def test_params_are_checked() -> None:
    specs = {p.name: p for p in Startup.params}
    assert specs["ready"].problem("ping") is not None
    assert specs["starts"].problem(0) is not None
    dspecs = {p.name: p for p in Density.params}
    assert dspecs["max_instances"].problem(0) is not None
    assert {"startup", "density"} <= protocols.workloads().keys()
