"""Warm-ups against the measured runs (analysis.warmups) and their report section."""

from __future__ import annotations

from isotax.analysis.warmups import check
from isotax.model import CellKey, CellStatus, Sample
from isotax.store.base import CellRecord

_ids = iter(range(1, 1 << 30))


def _cell(env: str, rep: int, value: float, warmup: bool = False, point: int = 1
          ) -> CellRecord:
    return CellRecord(next(_ids), CellKey(env, "w", {"p": point}, rep, warmup), "1",
                      CellStatus.OK, "", 0.0, 1.0,
                      (Sample("tput", value, "u"), Sample("other", 1.0, "u")))


def test_a_cold_warmup_differs_a_typical_one_does_not() -> None:
    cells = [_cell("vm", 1, 40.0, warmup=True), _cell("native", 1, 99.0, warmup=True)]
    cells += [_cell(env, r, v) for r in (1, 2, 3) for env, v in
              (("vm", 60.0 + r), ("native", 98.0 + r))]
    got = {c.environment: c for c in check(cells)}
    assert got["vm"].differed and got["vm"].ratio < 0.7 and got["vm"].metric == "tput"
    assert not got["native"].differed and got["native"].n == 3


def test_points_without_a_warmup_or_measured_values_have_no_check() -> None:
    cells = [_cell("vm", 1, 40.0, warmup=True), _cell("vm", 1, 60.0)]  # one measured value
    cells += [_cell("vm", r, 60.0 + r, point=2) for r in (1, 2, 3)]  # no warm-up of point 2
    assert check(cells) == []
