"""A matplotlib figure as the report's SVG text, and what every figure of the report draws
the same way: the marks of a value the axis range cuts off, and the colours.

Why matplotlib and SVG: see isotax.report.figures. The SVG carries no date and its
coordinates are rounded to a hundredth of a point, so a report made again from the same store
is byte for byte the same, and a CDF figure half the size. Drawing in several processes at
once (isotax.report.drawing) hands each figure to one of them: to_svg asks it which.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from isotax.report import drawing

plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "isotax", "font.size": 9,
                     "axes.spines.top": False, "axes.spines.right": False})


def to_svg(fig: Figure, tight_layout: bool = False) -> str:
    """The figure as SVG text; `tight_layout` lays its axes out first (a draw of its own, so
    it is done only by the process that draws the figure: report.drawing)."""
    n, mine = drawing.claim()
    if not mine:
        plt.close(fig)
        return drawing.placeholder(n)
    if tight_layout:
        fig.tight_layout()
    return drawing.drawn(n, _svg(fig))


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    # No date in the SVG: a report made again from the same store (or from its exported
    # bundle, elsewhere) is byte for byte the same.
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]  # drop the XML prolog and doctype: inlined in HTML
    # matplotlib writes coordinates to 6 decimals; 2 are a hundredth of a point, far below
    # a pixel, and halve a CDF figure. Only geometry attributes are touched, never text.
    return _GEOMETRY.sub(lambda m: m.group(1) + _DECIMALS.sub(r"\1", m.group(2)) + '"', text)


_GEOMETRY = re.compile(r'(\s(?:d|x|y|x1|x2|y1|y2|width|height|transform)=")([^"]*)"')
_DECIMALS = re.compile(r"(\d\.\d{2})\d+")


CLIP_COLOR = "#c0392b"
CLIP_NOTE = "▲ ▼ ▶ ◀ at an axis edge: clipped, beyond the axis; its value is written beside it"
_CLIP_GLYPHS = {("y", True): ("^", "▲"), ("y", False): ("v", "▼"),
                ("x", True): (">", "▶"), ("x", False): ("<", "◀")}


def mark_clipped(ax: Axes, points: Sequence[tuple[float, float, str]], axis: str = "y",
                 first: int = 0) -> int:
    """Marks every value the axis range cuts off, once the limits are final: a triangle at
    the edge it runs past, pointing that way, and the true value written beside it.
    points: (where along the other axis, value, its text); the marks' SVG ids are
    clipped-<n> from `first` on (one figure, one id each). Returns how many it marked."""
    lo, hi = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
    log = (ax.get_yscale() if axis == "y" else ax.get_xscale()) == "log"
    marked = 0
    for pos, value, text in points:
        if lo <= value <= hi or not math.isfinite(value) or (log and value <= 0):
            continue  # in range; or nothing a log axis could ever show (a zero)
        beyond = value > hi
        marker, glyph = _CLIP_GLYPHS[(axis, beyond)]
        edge = hi if beyond else lo
        xy = (pos, edge) if axis == "y" else (edge, pos)
        # The mark sits on the edge, its words just inside the axes.
        off = ((0, -10 if beyond else 10) if axis == "y" else (-10 if beyond else 10, 6))
        ax.plot(*xy, marker=marker, color=CLIP_COLOR, markersize=7, clip_on=False,
                zorder=5, gid=f"clipped-{first + marked}")
        ax.annotate(f"{glyph} clipped: {text}", xy, xytext=off, textcoords="offset points",
                    fontsize=6, color=CLIP_COLOR, annotation_clip=False,
                    ha="center" if axis == "y" else ("right" if beyond else "left"),
                    va=("top" if beyond else "bottom") if axis == "y" else "center")
        marked += 1
    return marked


def clip_note(fig: Figure, marked: int) -> None:
    """Says under the figure what its clipped marks mean, where it has any."""
    if marked:
        fig.text(0.01, 0.0, CLIP_NOTE, fontsize=7, color=CLIP_COLOR, ha="left", va="top")


def colors(n: int) -> list[Any]:
    cmap = plt.get_cmap("tab10")
    return [cmap(i % 10) for i in range(n)]
