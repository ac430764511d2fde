"""What only ``looptoolkit compare`` says: its headlines, step section, page and chart keys."""

from __future__ import annotations

from pathlib import Path

from looptoolkit.bench import render
from looptoolkit.bench.charts import BACKEND_COLORS, FLOOR_COLOR
from looptoolkit.bench.render import fmt_duration, fmt_ms
from looptoolkit.bench.results import Group, Row, Run
from looptoolkit.bench.tables import Table, wrap
from looptoolkit.bench.targets import BASELINE, NOT_JUDGED

__all__ = ["CHECK_LEGEND", "augment_headline", "bucket_headline", "closing", "documents_headline"]
__all__ += ["headline"]
__all__ += ["loader_table"]
__all__ += ["markdown", "plot", "screen_rows", "step_table", "summary", "tables", "workload_text"]

CHECK_LEGEND = (
    "check: exact = the Loader's batches for the same seed, compared batch for batch "
    "(values and dtypes); cover = its own order, checked for every row once, rows aligned "
    "with their ids; docs = every document's tokens once (matched by content), the batch "
    "layout's fields consistent; mix = real rows aligned with their ids, each source's rows "
    "once per pass over it (a Loader mixture: every batch within one row of the weights); "
    "aug = float32 crops of 224, every row once (the Loader's: each row within one level of "
    "the keyed reference). "
    "Lower ms is better; 'vs best' is the ratio to the best "
    f"manual loop ({BASELINE}) in this run, 'vs floor' a Loader row's ratio to its floor."
)


_STEP_NOTE = (
    "ms per batch, medians over the rounds. wait: time in next() until the batch is ready; "
    "added: everything but the step. A prefetching loop works during the step, so its "
    "wait falls below its cost without a step."
)
_IMAGES_NOTE = (
    "On images the step section times the images variant set (img-*: where the uint8 -> "
    "float32 normalisation runs) and the baseline."
)


def documents_headline(group: Group, *, loaders: bool = True) -> str:
    """The tokens workload in a paragraph: each batching's floor, the other rows over theirs.

    ``loaders=False`` leaves the other rows out (the screen has them in its table).
    """
    timed, ratio, floors = group.timed(), group.ratio, dict[str, Row]()
    for r in group.rows:
        if r.floor and (best := group.fastest(r.floor)) is not None:
            floors.setdefault(r.floor, best)
    tokens = group.info.get("tokens", 1) / 1e6
    named = ", ".join(
        f"{r.name.removeprefix('floor-')} {fmt_ms(r.median_s * 1e3 / tokens)} "
        f"({r.extra.get('padding_efficiency', 0):.2f})"
        for r in floors.values()
    )
    text = f"{group.name}: the faster hand loop of each batching, ms per 1M real tokens "
    text += f"(padding efficiency): {named or 'none timed'}."
    if not loaders:
        return text
    rest = [r for r in timed.values() if r.floor and not r.name.startswith("floor-")]
    over = {r.name: f"{r.name} {ratio(r, r.floor):.2f}x" for r in rest}
    mine = [text for name, text in over.items() if name.startswith("loader-")]
    others = [text for name, text in over.items() if not name.startswith("loader-")]
    text += f" Loader over its floor: {', '.join(mine)}." if mine else ""
    return text + (f" Others over their floor: {', '.join(others)}." if others else "")


def augment_headline(group: Group, *, loaders: bool = True) -> str:
    """The augment workload in a paragraph: the fastest loop and the Loader's, in images/s.

    ``loaders=False`` names only the fastest loop and the Loader in the loop's own process (the
    screen has the other rows in its table); the keyed draw's share of the ops after them.
    """
    images, timed = group.info.get("images", 0), group.timed()
    loops = sorted(timed.values(), key=lambda r: r.median_s)
    if not loops:
        return f"{group.name}: no loop timed."
    shown = loops if loaders else [r for r in loops if r is loops[0] or r.name == group.baseline]
    named = ", ".join(f"{r.name} {images / r.median_s:,.0f}" for r in shown)
    text = f"{group.name}: images/s {named}."
    if draw := group.info.get("draw"):
        text += f" Keyed draw: {draw['share']:.1%} of the ops ({draw['draw_ms']:.2f} ms a batch)."
    absent = [r.name for r in group.rows if r.status == "not installed"]
    return text + (f" Not installed: {', '.join(absent)}." if absent and loaders else "")


def bucket_headline(group: Group, *, loaders: bool = True) -> str:
    """The bucket workload in a paragraph: each timed loop's rows/s, and the time over local disk.

    ``loaders=False`` names only the local grouped epoch, the Loader's from the bucket and the
    fastest peer (the screen has the other rows in its table).
    """
    rows, timed = group.info.get("rows", 0), group.timed()
    loops = sorted(timed.values(), key=lambda r: r.median_s)
    if not loops:
        return f"{group.name}: no loop timed."
    peers = [r for r in loops if not r.name.startswith(("floor-", "loader-"))]
    keep = {group.baseline, "loader-s3-grouped", *(r.name for r in peers[:1])}
    shown = loops if loaders else [r for r in loops if r.name in keep]
    named = ", ".join(
        f"{r.name} {rows / r.median_s:,.0f} ({group.ratio(r) or 0:.2f}x)" for r in shown
    )
    text = f"{group.name}: rows/s (epoch time over {group.baseline}'s): {named}."
    absent = [r.name for r in group.rows if r.status == "not installed"]
    return text + (f" Not installed: {', '.join(absent)}." if absent and loaders else "")


def headline(
    group: Group, epochs: int | None = None, *, loaders: bool = True, floors: bool = True
) -> str:
    """One paragraph: the fastest loop against the best manual loop, the floors, the Loader.

    ``loaders=False`` leaves the Loader rows out (the screen has them in its closing table),
    ``floors=False`` the floors (the screen has them in the table below).
    """
    if group.baseline is None and "tokens" in group.info:
        return documents_headline(group, loaders=loaders)
    if "images" in group.info:
        return augment_headline(group, loaders=loaders)
    if "latency_s" in group.info:
        return bucket_headline(group, loaders=loaders)
    timed, ratio = group.timed(), group.ratio
    if BASELINE not in timed:
        return f"{group.name}: the baseline {BASELINE} did not run; no ratios."
    bounds = [r for r in timed.values() if r.name.startswith("floor-")]
    loops = sorted((r for r in timed.values() if r not in bounds), key=lambda r: r.median_s)

    def when(seconds: float) -> str:
        if epochs:
            return f"{fmt_duration(seconds * epochs)} for {epochs} epochs"
        return f"{fmt_ms(seconds * 1e3)} ms/epoch"

    best, base = loops[0], timed[BASELINE]
    text = f"{group.name}: fastest loop {best.name}, {when(best.median_s)}, "
    text += f"{ratio(best):.2f}x the best manual loop ({BASELINE}, {when(base.median_s)})."
    named = ", ".join(f"{r.name.removeprefix('floor-')} {ratio(r):.2f}x" for r in bounds)
    text += f" Floors: {named}." if bounds and floors else ""
    rows = [
        r for r in timed.values() if r.name.startswith("loader-") and r.floor and ratio(r, r.floor)
    ]
    named = ", ".join(
        f"{r.name} {ratio(r):.2f}x ({ratio(r, r.floor):.2f}x its floor)" for r in rows
    )
    text += f" Loader: {named}." if rows and loaders else ""
    slowest = ", ".join(f"{r.name} {when(r.median_s)}" for r in loops[-3:])
    return text + (f" Slowest: {slowest}." if epochs else "")


def screen_rows(group: Group) -> list[str]:
    """The rows of ``group`` the screen shows; the .md file and ``--verbose`` show all of them.

    The baseline, the Loader rows and their floors, every floor (on ``tokens`` each batching's
    faster one, as its headline), each backend's fastest other loop and every row that was not
    timed (a failed check, an error): what places the Loader. Left out: each backend's slower
    loops.
    """
    timed = group.timed()
    keep = {r.name for r in group.rows if not r.timed or r.name.startswith("loader-")}
    keep |= {group.baseline} if group.baseline else set()
    for r in group.rows:  # tokens (no baseline): each batching's faster floor, as its headline
        named = r.name in keep or group.baseline is None
        if r.floor and named and (floor := group.fastest(r.floor)) is not None:
            keep.add(floor.name)
        if r.name.startswith("floor-") and group.baseline:
            keep.add(r.name)
    others = [r for r in timed.values() if not r.name.startswith(("floor-", "loader-"))]
    for backend in dict.fromkeys(r.backend for r in others):
        keep.add(min((r for r in others if r.backend == backend), key=lambda r: r.median_s).name)
    return [r.name for r in group.rows if r.name in keep]


def workload_text(group: Group, epochs: int | None = None, *, verbose: bool = False) -> str:
    """A workload on the screen: its headline, then its table (``verbose``: in full).

    Not ``verbose``: the headline without the floors and the Loader rows, the table with the
    rows of `screen_rows` and no notes but why a row was not timed, and how many were left out.
    """
    head = headline(group, epochs, loaders=verbose, floors=verbose)
    only = None if verbose else screen_rows(group)
    table = render.group_table(group, epochs=epochs, explain=verbose, only=only)
    if hidden := len(group.rows) - len(table.rows):
        table.notes.append(f"{hidden} slower loops not shown: every row is in the .md file.")
    return f"{wrap(head)}\n\n{table.text()}"


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
    """The run in a few lines: each workload's headline, then the targets."""
    epochs = run.settings.get("project_epochs")
    return [headline(g, epochs) for g in run.groups] + [x for x in [targets_line(run)] if x]


def loader_table(run: Run) -> Table | None:
    """Each Loader row's ratio to the best manual loop, and to its floor, workloads side by side."""
    groups = [g for g in run.groups if BASELINE in g.timed()]
    names = dict.fromkeys(r.name for g in groups for r in g.rows if r.name.startswith("loader-"))
    if not names:
        return None
    rows = []
    for name in names:
        cells = [name]
        for g in groups:
            r = g.timed().get(name)
            floor = g.ratio(r, r.floor) if r is not None and r.floor else None
            cells.append(
                "-" if r is None else f"{g.ratio(r):.2f}x" + (f" ({floor:.2f})" if floor else "")
            )
        rows.append(cells)
    title = f"The Loader over the best manual loop ({BASELINE}), and over its floor"
    return Table(title, ["variant", *(g.name for g in groups)], rows)


_CONTENTS = {
    ".md": "every row of every table, the step section, the targets, the variants",
    ".json": "every round, for `looptoolkit report`",
    ".png": "the chart",
}


def closing(run: Run, files: list[Path], seconds: float) -> str:
    """The end of the screen: where the Loader stands, the targets' verdicts, the files written."""
    parts = [table.text()] if (table := loader_table(run)) is not None else []
    measured = [v for v in run.verdicts if v.status in ("met", "not met")]
    if any(v.status == NOT_JUDGED for v in run.verdicts) or not measured:
        parts += [wrap(line) for line in [targets_line(run)] if line]
    else:  # the verdicts in short; the targets table is in the files
        missed = [f"{v.key} {v.shown} ({v.goal})" for v in measured if v.status == "not met"]
        met = len(measured) - len(missed)
        text = f"Targets: {met} of {len(measured)} met"
        parts.append(wrap(text + (f"; not met: {', '.join(missed)}." if missed else ".")))
    wrote = "; ".join(f"{path} ({_CONTENTS.get(path.suffix, 'results')})" for path in files)
    parts.append(wrap(f"Wrote {wrote} in {seconds:.0f} s. --verbose prints every table here."))
    return "\n\n".join(parts)


def step_table(run: Run, workload: str) -> Table:
    """The step section on ``workload``: per batch, the step, the wait, what the loop adds."""
    rows = []
    for r in (r for r in run.extras.get("step", []) if r["workload"] == workload):
        if "error" in r:
            rows.append([r["name"], "error", "", "", "", ""])
            continue
        times = [f"{r[k + '_ms_per_batch']:.3f}" for k in ("total", "step", "wait")]
        of_step = f"{r['wait_of_step']:.1%}" if r["wait_of_step"] is not None else ""
        rows.append([r["name"], *times, of_step, f"{r['added_ms_per_batch']:.3f}"])
    title = f"{workload} with a model step of {run.settings['step_ms']:g} ms after every batch "
    title += f"({run.settings['step_batches']} batches per round)"
    header = ["variant", "ms/batch", "step", "wait", "wait/step", "added"]
    return Table(title, header, rows, notes=[_STEP_NOTE, *[_IMAGES_NOTE] * (workload == "images")])


def tables(run: Run) -> list[Table]:
    """The sections after the workloads: the step section, the transfer."""
    steps = dict.fromkeys(r["workload"] for r in run.extras.get("step", []))
    out = [step_table(run, w) for w in steps]
    if run.extras.get("transfer"):
        from looptoolkit.bench.transfer_sections import sweep_table

        out.append(sweep_table(run.extras["transfer"]))
    return out


def markdown(run: Run) -> str:
    """The Markdown page of a compare run: the summary first, then the tables and charts."""
    s = run.settings
    settings = (
        f"{s['rounds']} interleaved rounds of {s['epochs_per_round']} epoch(s) per variant after "
        f"{s['warmup']} warm-up round(s); medians with min-max. Loops whose warm epoch (a probe "
        f"after the check) took longer than {s['max_epoch_s']:g} s, and the 2-worker DataLoader "
        "always, are timed on a bounded number of batches per round and scaled to an epoch (time "
        "to the first batch + the steady per-batch time)."
    ) + (" **--quick: tiny sizes, not a measurement.**" if s["quick"] else "")
    if any("latency_s" in g.info for g in run.groups):
        settings += (
            " On bucket every epoch is timed whole (a bounded one would hide how the read-ahead "
            "starts), but those of the loops marked *, timed on their first "
            f"{s['slow_batches']} batches and scaled."
        )
    skipped = run.extras.get("skipped_backends", {})
    notes = [f"- backend {name} skipped: {why}" for name, why in skipped.items()]
    if names := ", ".join(f"`{n}`" for n in run.extras.get("accelerator_only", [])):
        notes.append(f"- not run on {run.device} (they need an accelerator): {names}")
    intro = [settings, CHECK_LEGEND, *(["\n".join(notes)] if notes else [])]
    return render.markdown(run, summary(run), intro, tables(run))


def plot(run: Run, out: str | Path, stem: str) -> list[Path]:
    """Write ``<stem>.png``: a panel per workload, a bar per variant (needs matplotlib)."""
    lines = {"floor-memcpy": ":", "floor-seq-take": "-."}
    legend = [*BACKEND_COLORS.items(), ("floor", FLOOR_COLOR)]
    footer = "Bars past 4x the best manual loop (tokens: 4x its floor; bucket: 120x local "
    footer += "disk) are cut (hatched, '>'); "
    footer += "* timed on the first "
    footer += "batches of each epoch and scaled."
    path = render.plot(run, Path(out) / f"{stem}.png", lines=lines, legend=legend, footer=footer)
    return [path] if path else []
