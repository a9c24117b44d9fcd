"""The figure of "The studies on this host": for each claim whose source printed a ratio, the
source's ratio (a hollow diamond) beside this host's ratio and its 95% confidence sequence (a
dot and a line, coloured by the verdict), on one log axis. Where the two sit apart, the finding
moved on this host; the verdict says whether by more than the claim allows."""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt

from isotax.analysis.claim_verdicts import ClaimVerdict, Outcome
from isotax.report.svg_figure import to_svg

COLOURS = {Outcome.HOLDS: "#2e7d32", Outcome.FAILS: "#c62828", Outcome.UNDECIDED: "#9e9e9e",
           Outcome.NOT_HERE: "#bdbdbd"}


def source_beside_host(verdicts: Sequence[ClaimVerdict]) -> str:
    """The SVG; "" where no claim has both a source ratio and a ratio measured here."""
    rows = [v for v in verdicts if v.placed.claim.source_ratio is not None
            and v.value is not None and not v.absolute]
    if not rows:
        return ""
    fig, ax = plt.subplots(figsize=(8, max(2.5, 0.32 * len(rows) + 1)))
    xs: list[float] = []
    for i, v in enumerate(rows):
        src = v.placed.claim.source_ratio
        assert src is not None and v.value is not None
        colour = COLOURS[v.outcome]
        ax.plot([math.log10(src)], [i], marker="D", markerfacecolor="none",
                markeredgecolor="black", linestyle="none",
                label="the source's ratio" if i == 0 else None)
        ax.plot([math.log10(v.value)], [i], marker="o", color=colour, linestyle="none")
        xs += [src, v.value]
        if v.low is not None and v.high is not None:
            ax.plot([math.log10(v.low), math.log10(v.high)], [i, i], color=colour,
                    linewidth=1.2)
            xs += [v.low, v.high]
    for outcome, colour in COLOURS.items():
        if any(v.outcome is outcome for v in rows):
            ax.plot([], [], marker="o", color=colour, linestyle="-",
                    label=f"this host: {outcome.value}")
    ax.axvline(0, color="black", linewidth=0.6)
    ax.set_yticks(range(len(rows)), [f"{v.placed.id} ({v.environment})" for v in rows],
                  fontsize=7)
    ax.invert_yaxis()
    lo, hi = min([*xs, 0.5]), max([*xs, 2.0])
    ticks = [t for t in (0.01, 0.03, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0, 30.0, 100.0)
             if lo / 1.6 <= t <= hi * 1.6]
    ax.set_xticks([math.log10(t) for t in ticks], [f"{t:g}×" for t in ticks])
    ax.set_xlabel("ratio to the claim's baseline (log scale); line: 95% confidence sequence")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    return to_svg(fig)
