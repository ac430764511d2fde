"""Every suite's results rendered one way from a typed `Run`, so a saved run renders again."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from looptoolkit.bench.charts import BACKEND_COLORS, FLOOR_COLOR, Bar, Line, Panel, bar_chart
from looptoolkit.bench.results import Group, Row, Run, Verdict
from looptoolkit.bench.tables import Table
from looptoolkit.bench.timing import load_text

__all__ = ["fmt_duration", "fmt_ms", "group_table", "legend", "markdown", "plot"]
__all__ += ["side_by_side", "targets_table"]

_NOT_TIMED = {
    "failed": ("FAIL", "FAILED the check, not timed: "),
    "not installed": ("not installed", "not installed here: needs "),
}
_DEVIATION_NOTE = (
    "max dev: the largest |count - weight x rows| of any source in any batch of the checked "
    "epoch (a row's source from its id); below 1 is exact in every batch. The rows that mix "
    "nothing show a plain shuffle's against the first mixture's weights."
)


_FETCH_NOTE = (
    "rows/s: rows over the median epoch; first ms, requests, fetched/used: measured on the "
    "epoch the check read (requests and body bytes as the server's proxy saw them, over the "
    "bytes of the rows handed out; 'local': none fetched); resume: an epoch stopped after a "
    "third of its batches and resumed in a new loop gave exactly the rows of an epoch run "
    "whole, in order (yes), did not (no), or the loop has no resume (not offered); convert s: "
    "writing the format the loop reads from the rows, apart from its epochs (uploads not "
    "counted)."
)


def _fetched(row: Row) -> str:
    """A bucket row's bytes fetched per byte used (``local`` when it fetched nothing)."""
    x = row.extra.get("fetched_per_used")
    return "local" if x is None else f"{x:.2f}"


def _convert(row: Row) -> str:
    """A bucket row's conversion time in seconds, where its format was written."""
    x = row.extra.get("convert_s")
    return "" if x is None else f"{x:.2f}"


def fmt_ms(ms: float) -> str:
    """Three significant figures, thousands separated: ``"1,597"``, ``"24.3"``, ``"7.48"``."""
    return f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def fmt_duration(seconds: float) -> str:
    """``"7.6 s"``, ``"2.2 min"``, ``"3.1 h"``."""
    if seconds < 100:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min" if seconds < 6000 else f"{seconds / 3600:.1f} h"


def _scale(group: Group) -> tuple[float, str]:
    """Seconds to the unit a group is shown in: the factor, the unit."""
    return (1e6, "us") if group.unit == "call" else (1e3, "ms")


def _ratio(x: float | None) -> str:
    """A ratio to two decimals, empty for None."""
    return "" if x is None else f"{x:.2f}"


def _bandwidth(row: Row) -> str:
    """A row's GB/s and its share of the reference copy's, where measured."""
    x = row.extra
    return f"{x['gb_per_s']:.1f} ({x['of_reference']:.0%})" if "gb_per_s" in x else ""


def _check_word(row: Row) -> str:
    """How a row was checked, in a word: exact, cover, docs."""
    return {"exact": "exact", "documents": "docs", "mixture": "mix", "augment": "aug"}.get(
        row.check.split(":")[0], "cover"
    )


def _deviation(row: Row) -> str:
    """A row's largest deviation from its mixture's weights in a batch, where measured."""
    x = row.extra
    return f"{x['max_deviation']:.2f}" if "max_deviation" in x else ""


def group_table(
    group: Group,
    *,
    full: bool = False,
    epochs: int | None = None,
    explain: bool = True,
    only: Collection[str] | None = None,
) -> Table:
    """A group's table (``full``: with batches/s, for Markdown; ``epochs``: the epoch times it).

    ``explain=False`` leaves out the notes that explain the table (the columns, the rows timed on
    their first batches, which keep their ``*``), not those saying why a row was not timed.
    ``only``: the names of the rows shown (ratios still to the whole group's rows).
    """
    (scale, unit), g = _scale(group), group
    rows = group.rows if only is None else [r for r in group.rows if r.name in only]
    floors, tokens = any(r.floor for r in rows), g.info.get("tokens")
    checked = any(
        r.check.startswith(("exact", "coverage", "documents", "mixture", "augment")) for r in rows
    )
    images = g.info.get("images")  # the augment workload: images per epoch
    fetches = any("first_ms" in r.extra for r in rows)  # the bucket workload: what it fetched
    efficiency = any("padding_efficiency" in r.extra for r in rows)
    columns: list[tuple[str, object, Callable[[Row], str]]] = [  # header, shown, a timed cell
        ("variant", True, lambda r: r.name),
        (f"{unit}/{g.unit}", True, lambda r: fmt_ms(r.median_s * scale) + "*" * bool(r.bounded)),
        (
            "min-max",
            full or not fetches,  # the bucket's screen table has more columns
            lambda r: f"{fmt_ms(r.min_s * scale)}-{fmt_ms(r.max_s * scale)}",
        ),
        ("batches/s", full and g.batches, lambda r: f"{g.batches / r.median_s:,.0f}"),
        ("ms/Mtok", tokens, lambda r: fmt_ms(r.median_s * 1e9 / (tokens or 1))),
        ("images/s", images, lambda r: f"{(images or 0) / r.median_s:,.0f}"),
        ("rows/s", fetches, lambda r: f"{g.info.get('rows', 0) / r.median_s:,.0f}"),
        ("first ms", full and fetches, lambda r: fmt_ms(r.extra.get("first_ms", 0.0))),
        ("requests", full and fetches, lambda r: f"{r.extra.get('requests', 0):,}"),
        ("fetched/used", fetches, _fetched),
        ("resume", fetches, lambda r: r.extra.get("resume", "")),
        ("convert s", full and fetches, _convert),
        ("eff", efficiency, lambda r: f"{r.extra.get('padding_efficiency', 0):.2f}"),
        (
            "vs best" if g.baseline else "vs first",
            g.baseline or not all(r.floor for r in rows),  # else every row has its own floor
            lambda r: _ratio(g.ratio(r)),
        ),
        (
            "vs floor",
            floors and (full or not fetches),  # the bucket's screen table: its floor in the name
            lambda r: _ratio(g.ratio(r, r.floor) if r.floor else None),
        ),
        (f"{epochs} epochs", epochs, lambda r: fmt_duration(r.median_s * (epochs or 0))),
        ("GB/s", any("gb_per_s" in r.extra for r in rows), _bandwidth),
        ("max dev", any("max_deviation" in r.extra for r in rows), _deviation),
        ("threads", any("threads" in r.extra for r in rows), lambda r: r.extra.get("threads", "")),
        ("check", checked, _check_word),
    ]
    shown = [(header, cell) for header, on, cell in columns if on]
    notes = [f"{epochs} epochs: the median epoch times {epochs}, not a timed run."] * bool(epochs)
    if tokens and explain:
        notes.append(
            "ms/Mtok: ms per 1M real tokens; eff: padding efficiency (real tokens / tokens in "
            "the batches); vs floor: over the faster hand loop of the same batching."
        )
    if images and explain:
        notes.append(
            f"images/s: {images:,} images over the median epoch; vs best: the epoch's time over "
            f"{g.baseline}'s; threads: the processes a loop works in (1: the loop's own, or the "
            "DataLoader's workers) x the torch threads of each; tf: the loop's process with "
            "tf.data's thread pools."
        )
    if fetches and explain:
        notes.append(_FETCH_NOTE)
    notes += [
        f"{r.name}: resume not exact: {r.extra['resume_detail']}"
        for r in rows
        if r.extra.get("resume") == "no" and r.extra.get("resume_detail")
    ]
    if any("max_deviation" in r.extra for r in rows) and explain:
        notes.append(_DEVIATION_NOTE)
        fewer = [r for r in rows if r.extra.get("deviation_batches", g.batches) < g.batches]
        if fewer:
            counts = ", ".join(f"{r.name} {r.extra['deviation_batches']}" for r in fewer)
            notes.append(f"max dev over the first batches of an epoch only: {counts}.")
    bounded = [f"{r.name} {r.bounded}" for r in rows if r.timed and r.bounded and explain]
    if bounded:
        notes.append("Timed on the first batches of each epoch, scaled (*): " + ", ".join(bounded))
    cells = []
    for r in rows:
        if r.timed:
            cells.append([cell(r) for _, cell in shown])
            continue
        status, why = _NOT_TIMED.get(r.status, ("error", "error while timing: "))
        cells.append([r.name, *[""] * (len(shown) - 2), status])
        notes.append(f"{r.name}: {why}{r.detail}")
    notes += [f"{r.name}: {r.label}" for r in rows if g.unit == "call" and r.label != r.name]
    align = "".join("l" if h in ("variant", "check") else "r" for h, _ in shown)
    return Table(g.title, [h for h, _ in shown], cells, align=align, notes=notes)


def targets_table(verdicts: Sequence[Verdict]) -> Table:
    """The targets of a run: goal, measured ratio, its floor's ratio, status; what each is."""
    floors = any(v.floor_name for v in verdicts)
    header = ["target", "goal", "measured", *["its floor"] * floors, "status"]
    rows, notes = [], []
    for v in verdicts:
        floor = [f"{v.floor:.2f}x" if v.floor is not None else ""] * floors
        rows.append([v.key, v.goal, v.shown or "-", *floor, v.status])
        notes.append(f"{v.key}: {v.text}" + (f" (floor: {v.floor_name})" if v.floor_name else ""))
    align = "lrr" + "r" * floors + "l"
    return Table("Targets (ratios from this run)", header, rows, align=align, notes=notes)


def _floor_text(row: Row) -> str:
    """`` [floor: x]`` or `` [floor: the faster of x, y]`` (none on a floor's own row)."""
    if not row.floor or row.name.startswith("floor-"):
        return ""
    names = row.floor.split("|")
    return (
        f" [floor: {names[0]}]"
        if len(names) == 1
        else f" [floor: the faster of {', '.join(names)}]"
    )


def _variants(groups: Sequence[Group]) -> Table:
    """Each variant of ``groups`` once: its backend, what it is, its floor."""
    seen = {r.name: r for g in groups for r in g.rows}.values()
    rows = [[r.name, r.backend, r.label + _floor_text(r)] for r in seen]
    title = "Variants (the floors bound what any loop can reach on the same data)"
    return Table(title, ["variant", "backend", "what it is"], rows, align="lll")


def legend(groups: Sequence[Group]) -> str:
    """The variants of ``groups``, for the screen."""
    return _variants(groups).text()


def markdown(run: Run, heads: Sequence[str], intro: Sequence[str], tables: list[Table]) -> str:
    """The page: title, ``heads`` bullets, machine, ``intro``, tables, targets, variants, charts."""
    m, epochs = run.machine, run.settings.get("project_epochs")
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
    gpu = f"; GPU {m['gpu']} (CUDA {m.get('cuda')})" if m.get("gpu") else ""
    out = [f"# looptoolkit {run.suite} — {run.device}\n", *[f"- {line}" for line in heads], ""]
    out += [f"Command: `{run.command}`  "]
    out += [f"Machine: {m['cpu']}, {m['cores']} cores{gpu}; Python {m['python']}; {versions}  "]
    out += [f"Date: {m['date']}; wall time {run.wall_s:.0f} s{load_text(m)}\n"]
    out += [f"{text}\n" for text in intro]
    sections = [group_table(g, full=True, epochs=epochs) for g in run.groups] + tables
    sections += [targets_table(run.verdicts)] if run.verdicts else []
    sections += (
        [_variants(run.groups)] if any(r.backend for g in run.groups for r in g.rows) else []
    )
    out += [f"## {t.title}\n\n{t.markdown()}" for t in sections]
    return "\n".join(out + [f"![{chart}]({chart})\n" for chart in run.charts])


def _color(row: Row) -> str:
    """A bar's colour: its backend's, grey for a floor."""
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
    """A panel per group, a bar per timed row; lines: the baseline, ``lines`` (name -> style)."""
    epochs, panels = run.settings.get("project_epochs"), []
    for g in (g for g in run.groups if g.timed()):
        if g.baseline is None and all(r.floor for r in g.rows):
            panels.append(_floor_panel(g, color))
            continue
        (scale, unit), timed, bars = _scale(g), g.timed(), []
        for r, before in zip(timed.values(), [None, *timed.values()], strict=False):
            note = f"{fmt_ms(r.median_s * scale):>6} {unit} {g.ratio(r) or 0:5.2f}x"
            if floor := g.ratio(r, r.floor) if r.floor else None:
                note += f" ({floor:.2f}x floor)"
            note += f"  {fmt_duration(r.median_s * epochs)}/{epochs} ep" if epochs else ""
            bar = Bar(r.name + " *" * bool(r.bounded), r.median_s * scale, note, color(r))
            bar.hatch = ".." if r.name.startswith("floor-") else None
            bar.gap_before = before is not None and r.backend != before.backend
            bar.bold = r.name.startswith("loader-")
            bars.append(bar)
        base = timed.get(g.baseline or "")
        marks = [Line(base.median_s * scale, f"baseline ({base.name})", "-")] if base else []
        for name, style in (lines or {}).items():
            if row := timed.get(name):
                marks.append(Line(row.median_s * scale, f"{name} (floor)", style, "dimgray"))
        xlabel = f"{unit} per {g.unit} (lower is better); ratios to the "
        xlabel += "baseline" if base else "first row"
        # bars past 4x the baseline are cut; on bucket past 120x (a bucket's epoch is 10x local)
        clip = (120 if "latency_s" in g.info else 4) * base.median_s * scale if base else None
        panels.append(Panel(g.title, bars, xlabel, marks, clip))
    title = f"looptoolkit {run.suite}, {run.device}"
    return bar_chart(panels, path, title=title, legend=legend, footer=footer) if panels else None


def _floor_panel(g: Group, color: Callable[[Row], str]) -> Panel:
    """A group whose rows each have their own floor: each bar its ratio to that floor."""
    bars, timed = [], list(g.timed().values())
    tokens = g.info.get("tokens")
    for r, before in zip(timed, [None, *timed], strict=False):
        ratio = g.ratio(r, r.floor) or 0.0
        note = f"{ratio:6.2f}x  {fmt_ms(r.median_s * 1e3):>6} ms"
        note += f"  {fmt_ms(r.median_s * 1e9 / tokens)} ms/Mtok" if tokens else ""
        if "padding_efficiency" in r.extra:
            note += f"  eff {r.extra['padding_efficiency']:.2f}"
        bar = Bar(r.name + " *" * bool(r.bounded), ratio, note, color(r))
        bar.hatch = ".." if r.name.startswith("floor-") else None
        bar.gap_before = before is not None and r.backend != before.backend
        bar.bold = r.name.startswith("loader-")
        bars.append(bar)
    xlabel = "times its floor, the fastest hand loop of the same batches (lower is better)"
    return Panel(g.title, bars, xlabel, [Line(1.0, "floor", "-")], 4.0)


def side_by_side(
    runs: Sequence[Run], labels: Sequence[str]
) -> tuple[list[Table], list[tuple[str, float]]]:
    """Per group, each run's medians and each later run's ratios to the first, also as pairs."""
    medians = [r.medians() for r in runs]
    header = ["variant", *(f"{x} ms" for x in labels), *(f"{x}/{labels[0]}" for x in labels[1:])]
    tables, ratios = [], []
    for g in runs[0].groups:
        tables.append(table := Table(g.title, header, []))
        for r in g.rows:
            first, *later = (m.get((g.name, r.name)) for m in medians)
            cells = [r.name, *("-" if s is None else fmt_ms(s * 1e3) for s in [first, *later])]
            for s in later:
                ratio = s / first if s is not None and first else None
                cells.append("-" if ratio is None else f"{ratio:.2f}")
                ratios += [] if ratio is None else [(f"{g.name}/{r.name}", ratio)]
            table.rows.append(cells)
    return tables, ratios
