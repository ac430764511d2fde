"""The one chart of every report: panels of bars with their figures, lines, and cut bars."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

__all__ = ["BACKEND_COLORS", "FLOOR_COLOR", "Bar", "Line", "Panel", "bar_chart"]

BACKEND_COLORS = {"numpy": "#4c72b0", "torch": "#dd8452", "jax": "#55a868", "tf": "#c44e52"}
FLOOR_COLOR = "#b0b0b0"


@dataclass
class Bar:
    """One bar: its label on the left, its length, the text beside it, its look."""

    label: str
    value: float
    note: str
    color: str = BACKEND_COLORS["numpy"]
    hatch: str | None = None
    gap_before: bool = False
    bold: bool = False


@dataclass
class Line:
    """A vertical reference line across a panel."""

    value: float
    label: str
    style: str = "--"
    color: str = "black"


@dataclass
class Panel:
    """One panel: a title, bars top to bottom, an axis label, reference lines, the cut."""

    title: str
    bars: list[Bar]
    xlabel: str
    lines: list[Line] = field(default_factory=list)
    clip: float | None = None


def bar_chart(
    panels: list[Panel],
    path: str | Path,
    *,
    title: str = "",
    legend: list[tuple[str, str]] | None = None,
    footer: str = "",
) -> Path:
    """Draw ``panels`` into the PNG ``path``; ``legend``: ``(label, colour)`` patches."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    heights = [1 + 0.26 * (len(p.bars) + 0.6 * sum(b.gap_before for b in p.bars)) for p in panels]
    size = (11, sum(heights) + 0.55 * len(panels) + 1)
    fig, axes = plt.subplots(len(panels), figsize=size, height_ratios=heights, layout="constrained")
    for ax, panel in zip(np.atleast_1d(axes), panels, strict=True):
        beside = blended_transform_factory(ax.transAxes, ax.transData)  # notes right of the axes
        gaps = accumulate(0.6 * b.gap_before for b in panel.bars)
        at = [i + gap for i, gap in enumerate(gaps)]
        longest = max((b.value for b in panel.bars), default=1.0)
        limit = panel.clip if panel.clip is not None and longest > panel.clip else longest * 1.02
        for y, bar in zip(at, panel.bars, strict=True):
            cut = bar.value > limit
            hatch = "//" if cut else bar.hatch
            edge = "white" if hatch else bar.color
            ax.barh(y, min(bar.value, limit), color=bar.color, hatch=hatch, edgecolor=edge)
            note = ("> " if cut else "") + bar.note
            ax.text(1.01, y, note, transform=beside, va="center", fontsize=7.5, family="monospace")
        ax.set_yticks(at, [b.label for b in panel.bars], fontsize=8)
        for tick, bar in zip(ax.get_yticklabels(), panel.bars, strict=True):
            tick.set_fontweight("bold" if bar.bold else "normal")
        ax.set(ylim=(max(at, default=-1.0) + 0.6, -0.6), xlim=(0, limit))
        ax.set_xlabel(panel.xlabel, fontsize=8)
        for line in panel.lines:
            ax.axvline(line.value, color=line.color, ls=line.style, lw=1.0, zorder=3)
        ax.set_title(panel.title, fontsize=10, loc="left")
        ax.tick_params(labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    handles: list[Any] = [Patch(color=c, label=label) for label, c in legend or []]
    handles += [Line2D([0], [0], color=x.color, ls=x.style, label=x.label) for x in panels[0].lines]
    if handles:
        fig.legend(handles=handles, loc="outside upper center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11, x=0.01, ha="left")
    fig.supxlabel(footer, fontsize=7, x=0.01, ha="left")
    fig.savefig(out := Path(path), dpi=110)
    plt.close(fig)
    return out
