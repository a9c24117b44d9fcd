"""report.drawing: figures drawn by forked workers give the text a serial render gives."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt

from isotax.report import drawing
from isotax.report.svg_figure import to_svg


def _render(n: int = 5) -> str:
    """A page of n different real figures, some laid out tight, with text between them."""
    parts = []
    for i in range(n):
        fig, ax = plt.subplots(figsize=(3, 2))
        ax.plot(range(10 + i), [x * (i + 1) for x in range(10 + i)], label=f"series {i}")
        ax.legend()
        parts.append(f"<h3>figure {i}</h3>{to_svg(fig, tight_layout=i % 2 == 0)}")
    return "\n".join(parts)


def test_parallel_drawing_is_byte_for_byte_the_serial_text() -> None:
    serial = drawing.drawn_in_parallel(_render, workers=1)
    assert serial.count("<svg") == 5 and "itx-figure" not in serial
    for workers in (2, 3, 7):  # 7: more workers than figures
        assert drawing.drawn_in_parallel(_render, workers=workers) == serial


def test_a_failing_worker_falls_back_to_a_serial_render() -> None:
    parent = os.getpid()

    def render() -> str:
        if os.getpid() != parent:
            raise RuntimeError("a worker dies")
        return _render(3)

    text = drawing.drawn_in_parallel(render, workers=2)
    assert text == drawing.drawn_in_parallel(lambda: _render(3), workers=1)
    assert text.count("<svg") == 3 and "itx-figure" not in text
    assert _children() == []  # every worker was reaped: none left, not even a zombie


def _children() -> list[int]:
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                out.append(int(d))
    return out
