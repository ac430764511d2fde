"""The one chart helper of every report: horizontal bars, each labelled with its figure.

A chart is a stack of [`Panel`][looptoolkit.bench.charts.Panel]s: bars (their figures in a column
of their own), reference lines (the baseline, the floors), a linear axis, and where a few bars
are many times longer than the rest, a cut at ``clip`` (those bars hatched, their labels true).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["BACKEND_COLORS", "Bar", "Line", "Panel", "bar_chart"]

BACKEND_COLORS = {"numpy": "#4c72b0", "torch": "#dd8452", "jax": "#55a868", "tf": "#c44e52"}
FLOOR_COLOR = "#b0b0b0"


@dataclass
class Bar:
    """One bar: its label on the left, its length, and the text written beside it."""

    label: str
    value: float
    note: str
    color: str = BACKEND_COLORS["numpy"]
    hatch: str | None = None
    gap_before: bool = False
    bold: bool = False


@dataclass
class Line:
    """A vertical reference line across a panel (the baseline, a floor)."""

    value: float
    label: str
    style: str = "--"
    color: str = "black"


@dataclass
class Panel:
    """One panel: a title, bars top to bottom, reference lines, an axis label."""

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
    """Draw ``panels`` one above the other into the PNG ``path`` (matplotlib, Agg); return it.

    ``legend``: ``(label, colour)`` patches under the last panel, with the first panel's
    reference lines; ``footer``: a line of small text at the bottom.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    heights = [1.0 + 0.26 * (len(p.bars) + 0.6 * sum(b.gap_before for b in p.bars)) for p in panels]
    handles: list[Any] = [Patch(color=c, label=label) for label, c in legend or []]
    handles += [Line2D([0], [0], color=x.color, ls=x.style, label=x.label) for x in panels[0].lines]
    footer_in, title_in = (0.3 if footer else 0.05), (0.3 if title else 0.1)
    legend_in = 0.25 * -(-len(handles) // 4) + 0.15 if handles else 0.0
    height = sum(heights) + 0.55 * len(panels) + footer_in + legend_in + title_in
    grid = {"height_ratios": heights}
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, height), squeeze=False, gridspec_kw=grid)
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        positions, y = [], 0.0
        for bar in panel.bars:
            y += 0.6 if bar.gap_before else 0.0
            positions.append(y)
            y += 1.0
        limit = panel.clip
        longest = max((b.value for b in panel.bars), default=1.0)
        if limit is None or longest <= limit:
            limit = longest * 1.02
        notes = blended_transform_factory(ax.transAxes, ax.transData)
        for pos, bar in zip(positions, panel.bars, strict=True):
            cut = bar.value > limit
            edge = "white" if (cut or bar.hatch) else bar.color
            hatch, width = ("//" if cut else bar.hatch), min(bar.value, limit)
            ax.barh(pos, width, color=bar.color, hatch=hatch, edgecolor=edge, height=0.8)
            text = ("> " if cut else "") + bar.note
            ax.text(1.01, pos, text, transform=notes, va="center", fontsize=7.5, family="monospace")
        ax.set_yticks(positions, [b.label for b in panel.bars], fontsize=8)
        for tick, bar in zip(ax.get_yticklabels(), panel.bars, strict=True):
            if bar.bold:
                tick.set_fontweight("bold")
        ax.set_ylim(y - 0.4, -0.6)
        ax.set_xlim(0, limit)
        for line in panel.lines:
            ax.axvline(line.value, color=line.color, ls=line.style, lw=1.0, zorder=3)
        ax.set_title(panel.title, fontsize=10, loc="left")
        ax.set_xlabel(panel.xlabel, fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=11, x=0.01, y=1 - 0.12 / height, ha="left", va="top")
    if handles:
        at = (0.45, footer_in / height)
        fig.legend(
            handles=handles,
            loc="lower center",
            bbox_to_anchor=at,
            ncol=4,
            fontsize=8,
            frameon=False,
        )
    if footer:
        fig.text(0.01, 0.08 / height, footer, fontsize=7)
    bottom = (footer_in + legend_in + 0.05) / height
    fig.tight_layout(rect=(0, bottom, 0.79, 1 - title_in / height))
    fig.savefig(out := Path(path), dpi=110)
    plt.close(fig)
    return out
