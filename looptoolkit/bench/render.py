"""Every suite's results rendered one way: a group's table, the targets, the Markdown, the chart.

The renderers read a typed [`Run`][looptoolkit.bench.results.Run] only, so a saved run renders
again exactly as it printed (``looptoolkit report``). Tables are
[`Table`][looptoolkit.bench.tables.Table]s: rich lays them out in 80 columns on screen, and the same
objects write the Markdown. Ratios are to the group's baseline (``compare``: the best manual loop)
or its first row (``transfer``); a row with a floor also shows its ratio to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from looptoolkit.bench.charts import BACKEND_COLORS, FLOOR_COLOR, Bar, Line, Panel, bar_chart
from looptoolkit.bench.results import Group, Row, Run, Verdict
from looptoolkit.bench.tables import Table, wrap
from looptoolkit.bench.timing import load_text

__all__ = ["fmt_duration", "fmt_ms", "group_table", "markdown", "plot", "side_by_side"]

_NOT_TIMED = {"skipped": "skip", "failed": "FAIL", "error": "error"}


def fmt_ms(ms: float) -> str:
    """Three significant figures, thousands separated: ``"1,597"``, ``"24.3"``, ``"7.48"``."""
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def fmt_duration(seconds: float) -> str:
    """``"7.6 s"``, ``"2.2 min"``, ``"3.1 h"``."""
    if seconds < 100:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 6000 else f"{seconds / 3600:.1f} h"


def _ratio(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}"


def _why(row: Row) -> str:
    return {"skipped": "skipped, ", "failed": "FAILED the check, not timed: "}.get(
        row.status, "error while timing: "
    ) + row.detail


def group_table(group: Group, *, full: bool = False, epochs: int | None = None) -> Table:
    """A group's table, a row per variant; on screen 80 columns, ``full`` for Markdown.

    ``full`` adds the backend, batches/s and each row's floor, and says in the row why a variant
    was not timed (on screen: in a note). ``epochs`` adds the median epoch times ``epochs``.
    """
    scale, unit = (1e6, "us") if group.unit == "call" else (1e3, "ms")
    floors = any(r.floor for r in group.rows)
    checks = any(r.check.startswith(("exact", "coverage")) for r in group.rows)
    gb = any("gb_per_s" in r.extra for r in group.rows)
    rate, wide = full and group.batches > 0, full and any(r.backend for r in group.rows)
    header = ["variant", *["backend"] * wide, f"{unit}/{group.unit}", "min-max"]
    header += ["batches/s"] * rate + ["vs best" if group.baseline else "vs first"]
    header += ["floor"] * (full and floors) + ["vs floor"] * floors
    header += [f"{epochs} epochs"] * bool(epochs) + ["GB/s"] * gb + ["check"] * checks
    rows, notes, bounded = [], [], 0
    for r in group.rows:
        name = f"`{r.name}`" if full else r.name
        if not r.timed:
            last = f"not timed: {r.detail}" if full else _NOT_TIMED.get(r.status, "error")
            blank = [""] * (len(header) - 2 - wide)
            rows.append([name, *[r.backend] * wide, *blank, last])
            notes += [] if full else [f"{r.name}: {_why(r)}"]
            continue
        bounded = max(bounded, r.bounded or 0)
        time = fmt_ms(r.median_s * scale)
        if r.bounded:
            time += f" (scaled from {r.bounded} batches)" if full else "*"
        span = fmt_ms(r.min_s * scale), fmt_ms(r.max_s * scale)
        cells = [
            name,
            *[r.backend] * wide,
            time,
            f"[{span[0]}, {span[1]}]" if full else "-".join(span),
        ]
        cells += [f"{group.batches / r.median_s:,.0f}"] * rate + [_ratio(group.ratio(r))]
        cells += [f"`{r.floor}`" if r.floor else ""] * (full and floors)
        cells += [_ratio(group.ratio(r, r.floor) if r.floor else None)] * floors
        cells += [fmt_duration(r.median_s * epochs)] if epochs else []
        if gb:
            share = r.extra.get("of_reference")
            cells.append(
                f"{r.extra['gb_per_s']:.1f} ({share:.0%})" if "gb_per_s" in r.extra else ""
            )
        rows.append(cells + ["exact" if r.check.startswith("exact") else "cover"] * checks)
    if not full:
        if bounded:
            note = f"* timed on the first batches of each epoch (at most {bounded}), scaled to one."
            notes.insert(0, note)
        if epochs:
            notes.insert(0, f"{epochs} epochs: the median epoch times {epochs}, not a timed run.")
    if group.unit == "call":
        notes += [f"{r.name}: {r.label}" for r in group.rows if r.label and r.label != r.name]
    align = "".join("l" if h in ("variant", "backend", "floor", "check") else "r" for h in header)
    return Table("" if full else group.title, header, rows, align=align, notes=notes)


def targets_table(verdicts: Sequence[Verdict], *, short: bool = True) -> Table:
    """The targets of a run: goal, measured ratio, the floor's ratio, status."""
    floors = any(v.floor_name for v in verdicts)
    header = ["target" if short else "what", "goal", "measured", *["its floor"] * floors, "status"]
    rows, notes = [], []
    for v in verdicts:
        floor = [f"{v.floor:.2f}x" if v.floor is not None else ""] * floors
        rows.append([v.key if short else v.text, v.goal, v.shown or "-", *floor, v.status])
        notes += [f"{v.key}: {v.text}" + (f" (floor: {v.floor_name})" if v.floor_name else "")]
    align = "lrr" + "r" * floors + "l"
    return Table("Targets (ratios from this run)", header, rows, align=align, notes=notes * short)


def legend(groups: Sequence[Group], width: int = 80) -> str:
    """One line per variant of ``groups`` (first seen): its name, what it is, its floor."""
    seen = {r.name: r for g in groups for r in reversed(g.rows)}
    lines = ["Variants (the floors bound what any loop can reach on the same data):"]
    for r in reversed(seen.values()):
        text = r.label + (f" [floor: {r.floor}]" if r.floor else "")
        lines.append(wrap(f"  {r.name:<18} {text}", width, " " * 21))
    return "\n".join(lines)


def markdown(
    run: Run, headline: Sequence[str], intro: Sequence[str], tables: Sequence[Table]
) -> str:
    """The Markdown report of ``run``.

    Title, ``headline`` bullets, the machine, ``intro`` paragraphs, each group's full table, the
    suite's other ``tables``, the targets, the variants and the charts.
    """
    m = run.machine
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
    gpu = f"; GPU {m['gpu']} (CUDA {m.get('cuda')})" if m.get("gpu") else ""
    out = [f"# looptoolkit {run.suite} — {run.device}\n", *[f"- {line}" for line in headline], ""]
    out += [f"Command: `{run.command}`  "]
    out += [f"Machine: {m['cpu']}, {m['cores']} cores{gpu}; Python {m['python']}; {versions}  "]
    out += [f"Date: {m['date']}; wall time {run.wall_s:.0f} s{load_text(m)}\n"]
    out += [f"{text}\n" for text in intro]
    for g in run.groups:
        out += [
            f"## {g.title}\n",
            group_table(g, full=True, epochs=run.settings.get("project_epochs")).markdown(),
        ]
    out += [f"## {t.title}\n\n{t.markdown()}" for t in tables]
    if run.verdicts:
        out += [
            "## Targets, ratios from this run\n",
            targets_table(run.verdicts, short=False).markdown(),
        ]
    seen = {r.name: r for g in reversed(run.groups) for r in g.rows}
    cells = [
        [f"`{r.name}`", r.backend, r.label, f"`{r.floor}`" if r.floor else ""]
        for r in seen.values()
    ]
    if any(r.backend for r in seen.values()):
        out += [
            "## Variants\n",
            Table(
                "", ["variant", "backend", "what it is", "floor"], cells, align="llll"
            ).markdown(),
        ]
    out += [f"![{chart}]({chart})\n" for chart in run.charts]
    return "\n".join(out)


def _color(row: Row) -> str:
    floor = row.name.startswith("floor-") or not row.backend
    return FLOOR_COLOR if floor else BACKEND_COLORS.get(row.backend, "#8172b3")


def plot(
    run: Run,
    path: Path,
    *,
    color: Callable[[Row], str] = _color,
    lines: dict[str, str] | None = None,
    legend: list[tuple[str, str]] | None = None,
    footer: str = "",
) -> Path | None:
    """Bars of each group's medians, one panel per group, each bar with its figure and ratio.

    Where a group has a baseline, it is a line, and so are the rows named in ``lines`` (name ->
    line style); bars past 4x the baseline are cut. None when nothing was timed.

    Raises:
        ImportError: matplotlib is not installed.
    """
    epochs, panels = run.settings.get("project_epochs"), []
    for g in run.groups:
        timed = g.timed()
        scale, unit = (1e6, "us") if g.unit == "call" else (1e3, "ms")
        bars, previous = [], None
        for r in timed.values():
            note = f"{fmt_ms(r.median_s * scale):>6} {unit} {g.ratio(r) or 0:5.2f}x"
            note += (
                f" ({g.ratio(r, r.floor):.2f}x floor)" if r.floor and g.ratio(r, r.floor) else ""
            )
            note += f"  {fmt_duration(r.median_s * epochs)}/{epochs} ep" if epochs else ""
            gap = previous is not None and r.backend != previous
            bars.append(
                Bar(
                    r.name + " *" * bool(r.bounded),
                    r.median_s * scale,
                    note,
                    color(r),
                    ".." if r.name.startswith("floor-") else None,
                    gap,
                    r.name.startswith("loader-"),
                )
            )
            previous = r.backend
        base = timed.get(g.baseline or "")
        marks = [Line(base.median_s * scale, f"baseline ({base.name})", "-")] if base else []
        marks += [
            Line(timed[n].median_s * scale, f"{n} (floor)", s, "dimgray")
            for n, s in (lines or {}).items()
            if n in timed
        ]
        xlabel = f"{unit} per {g.unit} (lower is better); ratios to the " + (
            "baseline" if base else "first row"
        )
        if bars:
            panels.append(
                Panel(g.title, bars, xlabel, marks, 4 * base.median_s * scale if base else None)
            )
    if not panels:
        return None
    return bar_chart(
        panels, path, title=f"looptoolkit {run.suite}, {run.device}", legend=legend, footer=footer
    )


def side_by_side(
    runs: Sequence[Run], labels: Sequence[str]
) -> tuple[list[Table], list[tuple[str, float]]]:
    """One table per group of the first run: each run's median, each later run's ratio to it.

    Also returns every ``(group/variant, ratio)`` of a later run to the first.
    """
    medians = [r.medians() for r in runs]
    header = [
        "variant",
        *(f"{label} ms" for label in labels),
        *(f"{label}/{labels[0]}" for label in labels[1:]),
    ]
    tables, ratios = [], []
    for g in runs[0].groups:
        table = Table(g.title, header, [])
        for r in g.rows:
            got = [m.get((g.name, r.name)) for m in medians]
            cells = [r.name, *("-" if s is None else fmt_ms(s * 1e3) for s in got)]
            for s in got[1:]:
                cells.append("-" if s is None or got[0] is None else f"{s / got[0]:.2f}")
                ratios += (
                    [] if s is None or got[0] is None else [(f"{g.name}/{r.name}", s / got[0])]
                )
            table.rows.append(cells)
        tables.append(table)
    return tables, ratios
