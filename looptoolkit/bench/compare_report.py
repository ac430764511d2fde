"""What ``looptoolkit compare`` reports: headline, tables, legend, chart; screen and Markdown.

Reads the JSON-ready payload that [`looptoolkit.bench.compare`][looptoolkit.bench.compare] builds,
so that saved results can be re-rendered without re-running anything. Every
ratio is to the best manual loop (``numpy-take``); every Loader row also shows
its distance to its own floor. Tables go through
[`Table`][looptoolkit.bench.tables.Table] (80 columns on screen), the chart
through [`bar_chart`][looptoolkit.bench.charts.bar_chart], the targets through
[`evaluate`][looptoolkit.bench.targets.evaluate].
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from looptoolkit.bench.charts import BACKEND_COLORS, FLOOR_COLOR, Bar, Line, Panel, bar_chart
from looptoolkit.bench.tables import Table, wrap
from looptoolkit.bench.targets import BASELINE, NOT_JUDGED
from looptoolkit.bench.timing import load_text

__all__ = [
    "add_ratios",
    "headline",
    "legend_text",
    "markdown",
    "plot",
    "step_table",
    "step_workloads",
    "targets_table",
    "transfer_table",
    "variant_table",
]

CHECK_LEGEND = (
    "check: exact = the Loader's batches for the same seed, compared batch for batch "
    "(values and dtypes); cover = its own order, checked for every row once, rows aligned "
    "with their ids. Lower ms is better; 'vs best' is the ratio to the best manual loop "
    f"({BASELINE}) in this run, 'vs floor' a Loader row's ratio to its floor."
)


def fmt_ms(ms: float) -> str:
    """Milliseconds with three significant figures (thousands separated)."""
    if ms >= 100:
        return f"{ms:,.0f}"
    if ms >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


def fmt_duration(seconds: float) -> str:
    """``"7.6 s"``, ``"2.2 min"``, ``"3.1 h"``."""
    if seconds < 100:
        return f"{seconds:.1f} s"
    if seconds < 6000:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def add_ratios(result: dict[str, Any]) -> None:
    """Add ms/epoch, batches/s, the ratio to the baseline and to the floor to each row."""
    rows = result["variants"]
    timed = {r["name"]: r for r in rows if "median_s" in r}
    base = timed.get(BASELINE)
    for row in timed.values():
        row["ms_per_epoch"] = row["median_s"] * 1e3
        row["batches_per_s"] = result["batches_per_epoch"] / row["median_s"]
        row["vs_baseline"] = row["median_s"] / base["median_s"] if base else None
        floor = timed.get(row.get("floor") or "")
        row["vs_floor"] = row["median_s"] / floor["median_s"] if floor else None


def _timed(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in result["variants"] if "median_s" in r}


def headline(name: str, result: dict[str, Any], epochs: int | None = None) -> str:
    """One paragraph: the fastest loop, by how much, against the best manual loop and floors."""
    timed = _timed(result)
    base = timed.get(BASELINE)
    loops = [r for r in timed.values() if not r["name"].startswith("floor-")]
    if base is None or not loops:
        return f"{name}: the baseline {BASELINE} did not run; no ratios."
    best = min(loops, key=lambda r: r["median_s"])

    def when(row: dict[str, Any]) -> str:
        if epochs:
            return f"{fmt_duration(row['median_s'] * epochs)} for {epochs} epochs"
        return f"{fmt_ms(row['ms_per_epoch'])} ms/epoch"

    parts = [
        f"{name}: fastest loop {best['name']}, {when(best)}, "
        f"{best['vs_baseline']:.2f}x the best manual loop ({BASELINE}, {when(base)})."
    ]
    floors = [
        f"{r['name'].removeprefix('floor-')} {r['vs_baseline']:.2f}x"
        for r in timed.values()
        if r["name"].startswith("floor-")
    ]
    if floors:
        parts.append("Floors: " + ", ".join(floors) + ".")
    loaders = [
        f"{r['name']} {r['vs_baseline']:.2f}x ({r['vs_floor']:.2f}x its floor)"
        for r in loops
        if r["name"].startswith("loader-") and r.get("vs_floor")
    ]
    if loaders:
        parts.append("Loader: " + ", ".join(loaders) + ".")
    if epochs:
        slow = sorted(loops, key=lambda r: r["median_s"])[-3:]
        parts.append("Slowest: " + ", ".join(f"{r['name']} {when(r)}" for r in slow) + ".")
    return " ".join(parts)


def targets_line(rows: list[dict[str, Any]]) -> str:
    """One sentence: which measured targets were met, which not, by how much."""
    if any(t["status"] == NOT_JUDGED for t in rows):
        return "Targets: not judged at --quick (toy sizes); run without it to judge them."
    measured = [t for t in rows if t["status"] in ("met", "not met")]
    if not measured:
        return ""
    met = [t["key"] for t in measured if t["status"] == "met"]
    missed = [
        f"{t['key']} {t['shown']} ({t['goal']})" for t in measured if t["status"] == "not met"
    ]
    text = f"Targets: {len(met)} of {len(measured)} measured met"
    text += f" ({', '.join(met)})" if met else ""
    return text + (f"; not met: {', '.join(missed)}." if missed else ".")


def summary(payload: dict[str, Any]) -> list[str]:
    """The run in a few lines: each workload's winner and Loader ratios, then the targets."""
    lines = [f"Summary (ratios to the best manual loop, {BASELINE}; lower is better):"]
    for name, result in payload["workloads"].items():
        timed = _timed(result)
        loops = [r for r in timed.values() if not r["name"].startswith("floor-")]
        if BASELINE not in timed or not loops:
            continue
        best = min(loops, key=lambda r: r["median_s"])
        loaders = ", ".join(
            f"{r['name'].removeprefix('loader-')} {r['vs_baseline']:.2f}x"
            for r in loops
            if r["name"].startswith("loader-")
        )
        text = f"{name}: fastest {best['name']} {best['vs_baseline']:.2f}x"
        lines.append(text + (f"; Loader {loaders}." if loaders else "."))
    line = targets_line(payload.get("targets", []))
    return lines + ([line] if line else [])


def _check_word(row: dict[str, Any]) -> str:
    return "exact" if row.get("check", {}).get("how", "").startswith("exact") else "cover"


def variant_table(
    name: str, result: dict[str, Any], device: str, epochs: int | None = None, *, full: bool = False
) -> Table:
    """One workload's table, a row per variant: 80 columns on screen; ``full`` for Markdown.

    ``full`` adds the backend, batches/s and each Loader row's floor, and says why a row was not
    timed in the row itself rather than in a note.
    """
    ratio = lambda x: "" if x is None else f"{x:.2f}"  # noqa: E731
    header = ["variant", *["backend"] * full, "ms/epoch", "min-max", *["batches/s"] * full]
    header += [
        "vs best",
        *["floor"] * full,
        "vs floor",
        *[f"{epochs} epochs"] * bool(epochs),
        "check",
    ]
    rows: list[list[str]] = []
    notes: list[str] = []
    bounded = set()
    for row in result["variants"]:
        v = f"`{row['name']}`" if full else row["name"]
        check = row.get("check", {})
        why, word, note = "", "", ""
        if "skipped" in row:
            why, word, note = row["skipped"], "skip", f"skipped, {row['skipped']}"
        elif not check.get("ok", False):
            why, word = check.get("detail", ""), "FAIL"
            note = f"FAILED the check, not timed: {why}"
        elif "error" in row or "median_s" not in row:
            why, word = row.get("error", ""), "error"
            note = f"error while timing: {why}"
        if word:
            blank = [""] * (len(header) - 2 - full)
            rows.append(
                [v, *[row["backend"]] * full, *blank, f"not timed: {why}" if full else word]
            )
            notes += [] if full else [f"{row['name']}: {note}"]
            continue
        bounded.add(row.get("bounded_batches") or 0)
        scaled = row.get("bounded_batches") and (
            f" (scaled from {row['bounded_batches']} batches)" if full else "*"
        )
        span = (fmt_ms(row["min_s"] * 1e3), fmt_ms(row["max_s"] * 1e3))
        cells = [v, *[row["backend"]] * full, fmt_ms(row["ms_per_epoch"]) + (scaled or "")]
        cells += [f"[{span[0]}, {span[1]}]" if full else "-".join(span)]
        cells += [f"{row['batches_per_s']:,.0f}"] * full + [ratio(row.get("vs_baseline"))]
        cells += [f"`{row['floor']}`" if row.get("floor") else ""] * full + [
            ratio(row.get("vs_floor"))
        ]
        cells += [fmt_duration(row["median_s"] * epochs)] if epochs else []
        rows.append([*cells, _check_word(row)])
    if max(bounded, default=0) and not full:
        notes.insert(
            0,
            f"* timed on the first batches of each epoch (at most {max(bounded)}) and scaled to a "
            "whole epoch.",
        )
    if epochs and not full:
        notes.insert(0, f"{epochs} epochs: the median epoch times {epochs}, not a timed run.")
    title = (
        f"{name} ({device}): {result['description']}; {result['batches_per_epoch']} batches/epoch"
    )
    align = "l" + "l" * full + "rr" + "r" * full + "r" + "l" * full + "r" + "r" * bool(epochs) + "l"
    return Table("" if full else title, header, rows, align=align, notes=notes)


def legend_text(variants: list[dict[str, Any]], width: int = 80) -> str:
    """One line per variant: its name, what it is, and its floor."""
    lines = ["Variants (the floors bound what any loop can reach on the same data):"]
    for row in variants:
        text = row["label"] + (f" [floor: {row['floor']}]" if row.get("floor") else "")
        lines.append(wrap(f"  {row['name']:<18} {text}", width, " " * 21))
    lines.append(wrap(CHECK_LEGEND, width))
    return "\n".join(lines)


def step_workloads(payload: dict[str, Any]) -> list[str]:
    """The workloads of the step section, in the order they ran."""
    default = (payload["settings"].get("step_workload") or "").split(",")[0]
    names: list[str] = []
    for row in payload.get("step", []):
        name = row.get("workload", default)
        if name not in names:
            names.append(name)
    return names


def step_table(payload: dict[str, Any], workload: str | None = None) -> Table:
    """The step section on ``workload`` (default: the first): per batch, the step, the wait.

    And what the loop adds (everything but the step).
    """
    s = payload["settings"]
    names = step_workloads(payload)
    workload = workload or (names[0] if names else s.get("step_workload") or "")
    header = ["variant", "ms/batch", "step", "wait", "wait/step", "added"]
    rows = []
    for row in payload.get("step", []):
        if row.get("workload", workload) != workload:
            continue
        if "error" in row:
            rows.append([row["name"], "error", "", "", "", ""])
            continue
        of_step = row["wait_of_step"]
        rows.append(
            [
                row["name"],
                f"{row['total_ms_per_batch']:.3f}",
                f"{row['step_ms_per_batch']:.3f}",
                f"{row['wait_ms_per_batch']:.3f}",
                f"{of_step * 100:.1f}%" if of_step is not None else "",
                f"{row['added_ms_per_batch']:.3f}",
            ]
        )
    title = (
        f"{workload} with a model step of {s['step_ms']:g} ms after every batch "
        f"({s['step_batches']} batches per round)"
    )
    notes = [
        "ms per batch, medians over the rounds. wait: time in next() until the batch is "
        "ready; added: everything but the step. A prefetching loop works during the "
        "step, so its wait falls below its cost without a step."
    ]
    if workload == "images":
        notes.append(
            "On images the step section times the images variant set (img-*: where "
            "the uint8 -> float32 normalisation runs) and the baseline."
        )
    return Table(title, header, rows, notes=notes)


def transfer_table(transfer: dict[str, Any]) -> Table:
    """Transfer of an images batch by batch size, the two dtype paths."""
    names = list(transfer["ms_per_batch"])
    header = ["batch", "MB uint8", *[f"{chr(65 + i)} ms" for i in range(len(names))]]
    rows = []
    per_image = transfer["bytes_per_image_uint8"]
    for i, size in enumerate(transfer["batch_sizes"]):
        cells = [str(size), f"{size * per_image / 1e6:.2f}"]
        cells += [f"{transfer['ms_per_batch'][n][i]:.3f}" for n in names]
        rows.append(cells)
    notes = [f"{chr(65 + i)}: {n}" for i, n in enumerate(names)]
    return Table(
        f"images batch to float16 by batch size ({transfer['note']})", header, rows, notes=notes
    )


def targets_table(payload: dict[str, Any], *, short: bool = True) -> Table:
    """The targets of this run: goal, measured ratio, the floor's ratio, status."""
    header = ["target" if short else "what", "goal", "measured", "its floor", "status"]
    rows, notes = [], []
    for t in payload.get("targets", []):
        value = t["shown"] if t.get("value") is not None else "-"
        floor = f"{t['floor']:.2f}x" if t.get("floor") is not None else ""
        rows.append([t["key"] if short else t["text"], t["goal"], value, floor, t["status"]])
        if short:
            notes.append(
                f"{t['key']}: {t['text']}"
                + (f" (floor: {t['floor_name']})" if t.get("floor_name") else "")
            )
    return Table("Targets (ratios from this run)", header, rows, align="lrrrl", notes=notes)


def _settings_text(payload: dict[str, Any]) -> str:
    s = payload["settings"]
    text = (
        f"{s['rounds']} interleaved rounds of {s['epochs_per_round']} epoch(s) per variant "
        f"after {s['warmup']} warm-up round(s); medians with [min, max]. Loops whose epoch "
        f"took longer than {s['max_epoch_s']:g} s when checked, and the 2-worker DataLoader "
        "always, are timed on a bounded number of batches per round and scaled to an epoch "
        "(time to the first batch + the steady per-batch time)."
    )
    if s.get("project_epochs"):
        text += (
            f" The {s['project_epochs']}-epoch column multiplies the median epoch; it "
            "was not timed."
        )
    if s["quick"]:
        text += " **--quick: tiny sizes, not a measurement.**"
    return text


def markdown(payload: dict[str, Any]) -> str:
    """The Markdown report of a run: headline first, then tables, legend, machine, charts."""
    m = payload["machine"]
    epochs = payload["settings"].get("project_epochs")
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
    gpu = f"; GPU {m['gpu']} (CUDA {m.get('cuda')})" if m.get("gpu") else ""
    out = [f"# looptoolkit compare — {payload['device']}\n"]
    out += [f"- {headline(n, r, epochs)}" for n, r in payload["workloads"].items()]
    if targets_line(payload.get("targets", [])):
        out.append(f"- {targets_line(payload['targets'])}")
    out += [
        "",
        f"Command: `{m['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores{gpu}; Python {m['python']}; {versions}  ",
        f"Date: {m['date']}; wall time {payload['wall_s']:.0f} s{load_text(m)}\n",
        _settings_text(payload) + "\n",
        CHECK_LEGEND + "\n",
    ]
    skipped = payload.get("skipped_backends") or {}
    notes = [f"- backend {name} skipped: {why}" for name, why in skipped.items()]
    if payload.get("accelerator_only"):
        names = ", ".join(f"`{n}`" for n in payload["accelerator_only"])
        notes.append(f"- not run on {payload['device']} (they need an accelerator): {names}")
    if notes:
        out += [*notes, ""]
    for name, result in payload["workloads"].items():
        out.append(f"## {name}: {result['description']}\n")
        out.append(
            f"{result['batches_per_epoch']} batches of {result['batch_size']} per epoch, "
            f"{result['bytes'] / 1e6:.0f} MB.\n"
        )
        out.append(variant_table(name, result, payload["device"], epochs, full=True).markdown())
    for workload in step_workloads(payload):
        t = step_table(payload, workload)
        out.append(f"## {t.title}\n")
        out.append(t.markdown())
    if payload.get("transfer"):
        t = transfer_table(payload["transfer"])
        out.append(f"## {t.title}\n")
        out.append(t.markdown())
    if payload.get("memory"):
        from looptoolkit.bench.memory import table

        t = table(payload["memory"])
        out += [f"## {t.title}\n", t.markdown()]
    if payload.get("targets"):
        out.append("## Targets, ratios from this run\n")
        out.append(targets_table(payload, short=False).markdown())
    out.append("## Variants\n")
    seen: dict[str, dict[str, Any]] = {}
    for result in payload["workloads"].values():
        for row in result["variants"]:
            seen.setdefault(row["name"], row)
    legend = [
        [f"`{r['name']}`", r["backend"], r["label"], f"`{r['floor']}`" if r.get("floor") else ""]
        for r in seen.values()
    ]
    out.append(
        Table("", ["variant", "backend", "what it is", "floor"], legend, align="llll").markdown()
    )
    for chart in payload.get("charts", []):
        out.append(f"![{chart}]({chart})\n")
    return "\n".join(out)


def plot(payload: dict[str, Any], out: str | Path, stem: str) -> list[Path]:
    """Write ``<stem>.png``: ms/epoch per variant, one panel per workload.

    Linear axis, cut at 4x the best manual loop (longer bars are hatched and
    labelled with their real figure); every bar labelled with its ms/epoch and
    its ratio; the best manual loop and the memcpy and sequential-take floors
    drawn as lines; floors grey.

    Raises:
        ImportError: matplotlib is not installed.
    """
    epochs = payload["settings"].get("project_epochs")
    panels = []
    for name, result in payload["workloads"].items():
        timed = _timed(result)
        base = timed.get(BASELINE)
        if base is None:
            continue
        bars, previous = [], None
        for row in timed.values():
            floor = row["name"].startswith("floor-")
            note = f"{fmt_ms(row['ms_per_epoch']):>6} ms {row['vs_baseline']:5.2f}x"
            if row.get("vs_floor") is not None:
                note += f" ({row['vs_floor']:.2f}x floor)"
            if epochs:
                note += f"  {fmt_duration(row['median_s'] * epochs)}/{epochs} ep"
            bars.append(
                Bar(
                    row["name"] + (" *" if row.get("bounded_batches") else ""),
                    row["ms_per_epoch"],
                    note,
                    color=FLOOR_COLOR if floor else BACKEND_COLORS.get(row["backend"], "gray"),
                    hatch=".." if floor else None,
                    gap_before=previous is not None and row["backend"] != previous,
                    bold=row["name"].startswith("loader-"),
                )
            )
            previous = row["backend"]
        lines = [Line(base["ms_per_epoch"], f"best manual loop ({BASELINE})", "-")]
        styles = {"floor-memcpy": ":", "floor-seq-take": "-."}
        lines += [
            Line(timed[f]["ms_per_epoch"], f"{f} (floor)", style, "dimgray")
            for f, style in styles.items()
            if f in timed
        ]
        panels.append(
            Panel(
                f"{name} ({payload['device']}): {result['description']}",
                bars,
                "ms per epoch (lower is better); ratios to the best manual loop",
                lines,
                clip=4 * base["ms_per_epoch"],
            )
        )
    if not panels:
        return []
    path = Path(out) / f"{stem}.png"
    legend = [(b, c) for b, c in BACKEND_COLORS.items()] + [("floor", FLOOR_COLOR)]
    footer = (
        "Bars past 4x the best manual loop are cut (hatched, '>'); * timed on the first "
        "batches of each epoch and scaled."
    )
    bar_chart(
        panels,
        path,
        title=f"looptoolkit compare, {payload['device']}",
        legend=legend,
        footer=footer,
    )
    return [path]
