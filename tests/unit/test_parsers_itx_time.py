"""parse_itx_time on real output of the image's itx-time (tests/data/itx-time)."""

from __future__ import annotations

import pytest
from support import DATA

from isotax.model import SanityError
from isotax.parsers.itx_time import parse_itx_time


def test_successful_xz() -> None:
    t = parse_itx_time((DATA / "itx-time" / "xz-ok.json").read_text())
    assert t.exit == 0 and t.signal == 0
    assert t.wall_s == pytest.approx(0.522823584)
    assert t.cpu_s == pytest.approx(0.499392 + 0.011987)
    assert t.maxrss_kib == 23484


def test_failed_and_killed_commands_are_visible() -> None:
    assert parse_itx_time((DATA / "itx-time" / "xz-missing-file.json").read_text()).exit == 1
    stderr = (DATA / "itx-time" / "killed.stderr").read_text()
    killed = parse_itx_time("xz: some message\n" + stderr)
    assert killed.signal == 9 and killed.exit == 137


@pytest.mark.parametrize("text", ["", "no json here", '{"wall_ns": 1}'])
def test_malformed_is_a_sanity_error(text: str) -> None:
    with pytest.raises(SanityError):
        parse_itx_time(text)
