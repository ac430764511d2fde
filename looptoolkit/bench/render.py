"""Every suite's results rendered one way: a group's table, the targets, the Markdown, the chart.

The renderers read a typed `Run` only, so a saved run renders again as it printed
(``looptoolkit report``). Ratios are to the group's baseline (``compare``: the best manual loop)
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
_WHY = {"skipped": "skipped, ", "failed": "FAILED the check, not timed: "}


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
        name, backend = f"`{r.name}`" if full else r.name, [r.backend] * wide
        if not r.timed:
            last = f"not timed: {r.detail}" if full else _NOT_TIMED.get(r.status, "error")
            rows.append([name, *backend, *[""] * (len(header) - 2 - wide), last])
            why = _WHY.get(r.status, "error while timing: ")
            notes += [] if full else [f"{r.name}: {why}{r.detail}"]
            continue
        bounded = max(bounded, r.bounded or 0)
        time = fmt_ms(r.median_s * scale)
        if r.bounded:
            time += f" (scaled from {r.bounded} batches)" if full else "*"
        lo, hi = fmt_ms(r.min_s * scale), fmt_ms(r.max_s * scale)
        cells = [name, *backend, time, f"[{lo}, {hi}]" if full else f"{lo}-{hi}"]
        cells += [f"{group.batches / r.median_s:,.0f}"] * rate + [_ratio(group.ratio(r))]
        cells += [f"`{r.floor}`" if r.floor else ""] * (full and floors)
        cells += [_ratio(group.ratio(r, r.floor) if r.floor else None)] * floors
        cells += [fmt_duration(r.median_s * epochs)] if epochs else []
        share = r.extra.get("of_reference")
        cells += [f"{r.extra['gb_per_s']:.1f} ({share:.0%})" if "gb_per_s" in r.extra else ""] * gb
        rows.append(cells + ["exact" if r.check.startswith("exact") else "cover"] * checks)
    if not full and bounded:
        notes.insert(
            0, f"* timed on the first batches of each epoch (at most {bounded}), scaled to one."
        )
    if not full and epochs:
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


def markdown(run: Run, heads: Sequence[str], intro: Sequence[str], tables: list[Table]) -> str:
    """The Markdown report of ``run``.

    Title, ``heads`` bullets, the machine, ``intro`` paragraphs, each group's full table, the
    suite's other ``tables``, the targets, the variants and the charts.
    """
    m, epochs = run.machine, run.settings.get("project_epochs")
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
    gpu = f"; GPU {m['gpu']} (CUDA {m.get('cuda')})" if m.get("gpu") else ""
    out = [f"# looptoolkit {run.suite} — {run.device}\n", *[f"- {line}" for line in heads], ""]
    out += [f"Command: `{run.command}`  "]
    out += [f"Machine: {m['cpu']}, {m['cores']} cores{gpu}; Python {m['python']}; {versions}  "]
    out += [f"Date: {m['date']}; wall time {run.wall_s:.0f} s{load_text(m)}\n"]
    out += [f"{text}\n" for text in intro]
    for g in run.groups:
        out.append(f"## {g.title}\n\n" + group_table(g, full=True, epochs=epochs).markdown())
    out += [f"## {t.title}\n\n{t.markdown()}" for t in tables]
    if run.verdicts:
        targets = targets_table(run.verdicts, short=False).markdown()
        out.append(f"## Targets, ratios from this run\n\n{targets}")
    seen = {r.name: r for g in reversed(run.groups) for r in g.rows}.values()
    if any(r.backend for r in seen):
        cells = [[f"`{r.name}`", r.backend, r.label, f"`{r.floor}`" * bool(r.floor)] for r in seen]
        variants = Table("", ["variant", "backend", "what it is", "floor"], cells, align="llll")
        out.append(f"## Variants\n\n{variants.markdown()}")
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
            floor = g.ratio(r, r.floor) if r.floor else None
            note = f"{fmt_ms(r.median_s * scale):>6} {unit} {g.ratio(r) or 0:5.2f}x"
            note += f" ({floor:.2f}x floor)" if floor else ""
            note += f"  {fmt_duration(r.median_s * epochs)}/{epochs} ep" if epochs else ""
            label, hatch = r.name + " *" * bool(r.bounded), ".." * r.name.startswith("floor-")
            gap, bold = previous is not None and r.backend != previous, r.name.startswith("loader-")
            bars.append(Bar(label, r.median_s * scale, note, color(r), hatch or None, gap, bold))
            previous = r.backend
        base = timed.get(g.baseline or "")
        marks = [Line(base.median_s * scale, f"baseline ({base.name})", "-")] if base else []
        for name, style in (lines or {}).items():
            if row := timed.get(name):
                marks.append(Line(row.median_s * scale, f"{name} (floor)", style, "dimgray"))
        to = "baseline" if base else "first row"
        xlabel = f"{unit} per {g.unit} (lower is better); ratios to the {to}"
        if bars:
            clip = 4 * base.median_s * scale if base else None
            panels.append(Panel(g.title, bars, xlabel, marks, clip))
    title = f"looptoolkit {run.suite}, {run.device}"
    return bar_chart(panels, path, title=title, legend=legend, footer=footer) if panels else None


def side_by_side(
    runs: Sequence[Run], labels: Sequence[str]
) -> tuple[list[Table], list[tuple[str, float]]]:
    """One table per group of the first run: each run's median, each later run's ratio to it.

    Also returns every ``(group/variant, ratio)`` of a later run to the first.
    """
    medians = [r.medians() for r in runs]
    header = ["variant", *(f"{x} ms" for x in labels), *(f"{x}/{labels[0]}" for x in labels[1:])]
    tables, ratios = [], []
    for g in runs[0].groups:
        tables.append(table := Table(g.title, header, []))
        for r in g.rows:
            got = [m.get((g.name, r.name)) for m in medians]
            cells = [r.name, *("-" if s is None else fmt_ms(s * 1e3) for s in got)]
            for s in got[1:]:
                ratio = None if s is None or got[0] is None else s / got[0]
                cells.append("-" if ratio is None else f"{ratio:.2f}")
                ratios += [] if ratio is None else [(f"{g.name}/{r.name}", ratio)]
            table.rows.append(cells)
    return tables, ratios
