"""What only ``looptoolkit compare`` says: headlines, the step and transfer sections, the page.

The rest (a workload's table, the targets, the chart) is the shared `looptoolkit.bench.render`.
Every ratio is to the best manual loop (``numpy-take``); a Loader row's also to its floor.
"""

from __future__ import annotations

from pathlib import Path

from looptoolkit.bench import render
from looptoolkit.bench.charts import BACKEND_COLORS, FLOOR_COLOR
from looptoolkit.bench.render import fmt_duration, fmt_ms
from looptoolkit.bench.results import Group, Run
from looptoolkit.bench.tables import Table
from looptoolkit.bench.targets import BASELINE, NOT_JUDGED

__all__ = ["headline", "markdown", "plot", "step_table", "summary", "tables"]

CHECK_LEGEND = (
    "check: exact = the Loader's batches for the same seed, compared batch for batch "
    "(values and dtypes); cover = its own order, checked for every row once, rows aligned "
    "with their ids. Lower ms is better; 'vs best' is the ratio to the best manual loop "
    f"({BASELINE}) in this run, 'vs floor' a Loader row's ratio to its floor."
)


def headline(group: Group, epochs: int | None = None) -> str:
    """One paragraph: the fastest loop, by how much, against the best manual loop and floors."""
    timed = group.timed()
    base = timed.get(BASELINE)
    loops = [r for r in timed.values() if not r.name.startswith("floor-")]
    if base is None or not loops:
        return f"{group.name}: the baseline {BASELINE} did not run; no ratios."
    best = min(loops, key=lambda r: r.median_s)
    ratio = group.ratio

    def when(seconds: float) -> str:
        if epochs:
            return f"{fmt_duration(seconds * epochs)} for {epochs} epochs"
        return f"{fmt_ms(seconds * 1e3)} ms/epoch"

    text = f"{group.name}: fastest loop {best.name}, {when(best.median_s)}, "
    text += f"{ratio(best):.2f}x the best manual loop ({BASELINE}, {when(base.median_s)})."
    floors = [r for r in timed.values() if r.name.startswith("floor-")]
    named = ", ".join(f"{r.name.removeprefix('floor-')} {ratio(r):.2f}x" for r in floors)
    text += f" Floors: {named}." if floors else ""
    loaders = [
        f"{r.name} {ratio(r):.2f}x ({ratio(r, r.floor):.2f}x its floor)"
        for r in loops
        if r.name.startswith("loader-") and r.floor and ratio(r, r.floor)
    ]
    text += f" Loader: {', '.join(loaders)}." if loaders else ""
    slow = sorted(loops, key=lambda r: r.median_s)[-3:]
    slowest = ", ".join(f"{r.name} {when(r.median_s)}" for r in slow)
    return text + (f" Slowest: {slowest}." if epochs else "")


def targets_line(run: Run) -> str:
    """One sentence: which measured targets were met, which not, by how much."""
    if any(v.status == NOT_JUDGED for v in run.verdicts):
        return "Targets: not judged at --quick (toy sizes); run without it to judge them."
    measured = [v for v in run.verdicts if v.status in ("met", "not met")]
    met = [v.key for v in measured if v.status == "met"]
    missed = [f"{v.key} {v.shown} ({v.goal})" for v in measured if v.status == "not met"]
    text = f"Targets: {len(met)} of {len(measured)} measured met"
    text += f" ({', '.join(met)})" if met else ""
    return (text + (f"; not met: {', '.join(missed)}." if missed else ".")) if measured else ""


def summary(run: Run) -> list[str]:
    """The run in a few lines: each workload's winner and Loader ratios, then the targets."""
    lines = [f"Summary (ratios to the best manual loop, {BASELINE}; lower is better):"]
    for g in run.groups:
        loops = [r for r in g.timed().values() if not r.name.startswith("floor-")]
        if BASELINE in g.timed() and loops:
            best = min(loops, key=lambda r: r.median_s)
            loaders = [r for r in loops if r.name.startswith("loader-")]
            named = ", ".join(
                f"{r.name.removeprefix('loader-')} {g.ratio(r):.2f}x" for r in loaders
            )
            text = f"{g.name}: fastest {best.name} {g.ratio(best):.2f}x"
            lines.append(text + (f"; Loader {named}." if loaders else "."))
    return lines + [line for line in [targets_line(run)] if line]


def step_table(run: Run, workload: str) -> Table:
    """The step section on ``workload``: per batch, the step, the wait, what the loop adds."""
    s = run.settings
    header = ["variant", "ms/batch", "step", "wait", "wait/step", "added"]
    rows = []
    for r in (r for r in run.extras.get("step", []) if r["workload"] == workload):
        if "error" in r:
            rows.append([r["name"], "error", "", "", "", ""])
            continue
        of_step = f"{r['wait_of_step'] * 100:.1f}%" if r["wait_of_step"] is not None else ""
        times = [f"{r[k + '_ms_per_batch']:.3f}" for k in ("total", "step", "wait")]
        rows.append([r["name"], *times, of_step, f"{r['added_ms_per_batch']:.3f}"])
    title = f"{workload} with a model step of {s['step_ms']:g} ms after every batch "
    title += f"({s['step_batches']} batches per round)"
    notes = [
        "ms per batch, medians over the rounds. wait: time in next() until the batch is ready; "
        "added: everything but the step. A prefetching loop works during the step, so its "
        "wait falls below its cost without a step."
    ]
    if workload == "images":
        notes.append(
            "On images the step section times the images variant set (img-*: where the uint8 -> "
            "float32 normalisation runs) and the baseline."
        )
    return Table(title, header, rows, notes=notes)


def tables(run: Run) -> list[Table]:
    """The sections after the workloads: the step section, the transfer, the memory."""
    steps = dict.fromkeys(r["workload"] for r in run.extras.get("step", []))
    out = [step_table(run, w) for w in steps]
    if run.extras.get("transfer"):
        from looptoolkit.bench.transfer_sections import sweep_table

        out.append(sweep_table(run.extras["transfer"]))
    if run.extras.get("memory"):
        from looptoolkit.bench.memory import table

        out.append(table(run.extras["memory"]))
    return out


def _settings_text(run: Run) -> str:
    s = run.settings
    text = (
        f"{s['rounds']} interleaved rounds of {s['epochs_per_round']} epoch(s) per variant after "
        f"{s['warmup']} warm-up round(s); medians with [min, max]. Loops whose epoch took longer "
        f"than {s['max_epoch_s']:g} s when checked, and the 2-worker DataLoader always, are timed "
        "on a bounded number of batches per round and scaled to an epoch (time to the first "
        "batch + the steady per-batch time)."
    )
    if s.get("project_epochs"):
        text += f" The {s['project_epochs']}-epoch column multiplies the median epoch (not timed)."
    return text + (" **--quick: tiny sizes, not a measurement.**" if s["quick"] else "")


def markdown(run: Run) -> str:
    """The Markdown report of a compare run: headline first, then the tables, legend, charts."""
    epochs = run.settings.get("project_epochs")
    heads = [headline(g, epochs) for g in run.groups] + [x for x in [targets_line(run)] if x]
    skipped = run.extras.get("skipped_backends", {})
    notes = [f"- backend {name} skipped: {why}" for name, why in skipped.items()]
    if run.extras.get("accelerator_only"):
        names = ", ".join(f"`{n}`" for n in run.extras["accelerator_only"])
        notes.append(f"- not run on {run.device} (they need an accelerator): {names}")
    intro = [_settings_text(run), CHECK_LEGEND, *(["\n".join(notes)] if notes else [])]
    return render.markdown(run, heads, intro, tables(run))


def plot(run: Run, out: str | Path, stem: str) -> list[Path]:
    """Write ``<stem>.png``: ms/epoch per variant, one panel per workload (needs matplotlib)."""
    legend = [*BACKEND_COLORS.items(), ("floor", FLOOR_COLOR)]
    footer = "Bars past 4x the best manual loop are cut (hatched, '>'); * timed on the first "
    footer += "batches of each epoch and scaled."
    lines = {"floor-memcpy": ":", "floor-seq-take": "-."}
    path = render.plot(run, Path(out) / f"{stem}.png", lines=lines, legend=legend, footer=footer)
    return [path] if path else []
