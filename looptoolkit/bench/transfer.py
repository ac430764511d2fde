"""``looptoolkit transfer``: what ``to_device`` costs on top of the copies it has to make.

Every section's rows are checked, then timed interleaved in one process (medians
of ``--rounds`` rounds; CUDA rows with CUDA events). The report (headline, tables,
targets) is printed and written as ``transfer-<device>.{json,md,png}`` and the
sweep's chart ``transfer-<device>-sweep.png``, to ``./looptoolkit-results/`` or ``--out``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from looptoolkit.bench import transfer_sections as sec
from looptoolkit.bench.charts import FLOOR_COLOR, Bar, Panel, bar_chart
from looptoolkit.bench.progress import Progress, quiet_import
from looptoolkit.bench.results import REFERENCE_HELP, results_dir, write_results
from looptoolkit.bench.tables import Table, wrap
from looptoolkit.bench.targets import evaluate
from looptoolkit.bench.timing import load_text, machine_info

__all__ = ["headline", "markdown", "run", "section_table", "sections", "sweep_table"]

TITLES = {
    (
        "nested",
        "torch_to_cpu",
    ): "nested: 1000 torch leaves to torch.device('cpu') (t.to(dev) returns t)",
    (
        "nested",
        "numpy_to_torch_cpu",
    ): "nested: 1000 NumPy leaves to torch (torch.from_numpy per leaf)",
    (
        "packing_cpu",
        "rows",
    ): "nested, CPU only: packing (one cat per dtype) vs 1000 per-leaf copies",
    ("images_cpu", "rows"): "images, CPU only: the host cast, and the bytes each order copies",
    ("cuda", "images"): "images to CUDA, timed with CUDA events",
    ("cuda", "nested"): "nested to CUDA, timed with CUDA events",
}
"""Where each section's rows are in the payload, and its title; in report order."""
TO_DEVICE = "#dd8452"


def sections(payload: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """``(title, rows)`` of every section the payload holds, in report order."""
    held = [(title, (payload.get(a) or {}).get(b)) for (a, b), title in TITLES.items()]
    return [(title, rows) for title, rows in held if rows]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def section_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """One section: median and [min, max] in microseconds per call, ratio to the first row."""
    first, gb = rows[0]["median_s"], "gb_per_s" in rows[0]
    cells = []
    for r in rows:
        cells.append([r["name"], _us(r["median_s"]), f"{_us(r['min_s'])}-{_us(r['max_s'])}"])
        cells[-1].append(f"{r['median_s'] / first:.2f}")
        cells[-1] += [f"{r['gb_per_s']:.1f} ({r['of_reference']:.0%})"] if gb else []
    header = ["variant", "median us", "min-max us", "vs first", *(["GB/s"] if gb else [])]
    notes = [f"{r['name']}: {r['label']}" for r in rows if r["label"] != r["name"]]
    return Table(title, header, cells, notes=notes)


def sweep_table(sweep: dict[str, Any]) -> Table:
    """Milliseconds per batch and MB/s by batch size, one column per dtype."""
    by = {(r["dtype"], r["batch_size"]): r for r in sweep["rows"]}
    header = ["batch", *[f"{d} ms" for d in sec.DTYPES], *[f"{d} MB/s" for d in sec.DTYPES]]
    cells = [
        [str(s), *[f"{by[d, s]['ms_per_batch']:.3f}" for d in sec.DTYPES]]
        + [f"{by[d, s]['mb_per_s']:,.0f}" for d in sec.DTYPES]
        for s in sorted({size for _, size in by})
    ]
    title = f"images batch (3x64x64) moved with to_device by dtype ({sweep['measures']})"
    note = f"median ms per batch over {sweep['rounds']} interleaved rounds; MB/s: the batch's "
    note += f"bytes over that time; device {sweep['device']}."
    return Table(title, header, cells, notes=[note])


def targets_table(rows: list[dict[str, Any]], *, short: bool = True) -> Table:
    """The transfer targets: goal, measured, status."""
    cells = []
    for t in rows:
        shown = t["shown"] if t["value"] is not None else "-"
        cells.append([t["key"] if short else t["text"], t["goal"], shown, t["status"]])
    notes = [f"{t['key']}: {t['text']}" for t in rows] if short else []
    header = ["target", "goal", "measured", "status"]
    return Table("Targets (ratios from this run)", header, cells, align="lrrl", notes=notes)


def headline(payload: dict[str, Any]) -> str:
    """The run in a sentence: to_device against the bare traversals, and the CUDA ratios."""
    v, parts = payload.get("values", {}), []
    for kind, what in (("torch", "torch leaves"), ("numpy", "NumPy leaves to torch")):
        if (ours := v.get(f"{kind}:to_device")) is not None:
            parts.append(f"{what}: {ours / v[f'{kind}:optree']:.2f}x optree.tree_map and ")
            parts[-1] += f"{ours / v[f'{kind}:move_to']:.2f}x a hand-written move_to"
    text = "to_device on 1000 small leaves, " + "; ".join(parts) + "." if parts else ""
    if not (cuda := payload.get("cuda")):
        return (text + " No CUDA device: the GPU rows were not measured.").strip()
    r = cuda["ratios"]
    return (
        f"{text} On {cuda['device']}: the pinned batch at "
        f"{r['to_device(pinned batch) bandwidth / reference']:.0%} of one large pinned copy's "
        f"bandwidth; cast-then-copy {r['cast-then-copy / copy-then-cast (to_device)']:.2f}x "
        f"copy-then-cast; per-leaf {r['per-leaf / packed (nested)']:.1f}x packed."
    ).strip()


def markdown(payload: dict[str, Any]) -> str:
    """The results as Markdown: headline, sections, sweep, targets, ratios, machine, charts."""
    m, a = payload["machine"], payload["args"]
    gpu = f", {m['gpu']}" if "gpu" in m else ""
    versions = ", ".join(f"{k} {val}" for k, val in m["versions"].items())
    lines = [f"# looptoolkit transfer — {payload['device']}\n", headline(payload) + "\n"]
    lines.append(f"Command: `{payload['command']}`  ")
    lines.append(f"Machine: {m['cpu']}, {m['cores']} cores{gpu} ({m['date']}{load_text(m)}); ")
    lines[-1] += f"{versions}.  "
    lines.append(f"Medians over {a['rounds']} interleaved rounds after {sec.WARMUP} warm-up ")
    lines[-1] += f"rounds; host rows average {a['repeat']} calls per round (packing and images: "
    lines[-1] += f"{sec.light_repeat(a['repeat'])}). Lower is better.\n"
    tables = [section_table(title, rows) for title, rows in sections(payload)]
    tables += [sweep_table(payload["sweep"])] if payload.get("sweep") else []
    for table in tables:
        lines += [f"## {table.title}\n", table.markdown()]
    lines += ["## Targets\n", targets_table(payload["targets"], short=False).markdown()]
    lines += ["## Other ratios\n", "| ratio | value |", "|---|---:|"]
    lines += [f"| {name} | {value:.2f} |" for name, value in payload["ratios"].items()]
    lines += [f"\n![{chart}]({chart})" for chart in payload.get("charts", [])]
    return "\n".join(lines) + "\n"


def plot(payload: dict[str, Any], path: Path) -> Path:
    """Bars of microseconds per call, one panel per section, each bar with its ratio."""
    panels = []
    for title, rows in sections(payload):
        bars = [
            Bar(
                r["name"],
                r["median_s"] * 1e6,
                f"{r['median_s'] * 1e6:8,.1f} us {r['median_s'] / rows[0]['median_s']:5.2f}x",
                color=TO_DEVICE if "to_device" in r["name"] else FLOOR_COLOR,
            )
            for r in rows
        ]
        xlabel = "microseconds per call (lower is better); ratios to the first row"
        panels.append(Panel(title, bars, xlabel))
    legend = [("to_device", TO_DEVICE), ("others", FLOOR_COLOR)]
    return bar_chart(
        panels, path, title=f"looptoolkit transfer, {payload['device']}", legend=legend
    )


def plot_sweep(sweep: dict[str, Any], path: Path) -> Path:
    """Bars of ms per batch by batch size, one panel per dtype, each bar with its MB/s."""
    panels = []
    for dtype in sec.DTYPES:
        rows = [r for r in sweep["rows"] if r["dtype"] == dtype]
        bars = [
            Bar(
                str(r["batch_size"]),
                r["ms_per_batch"],
                f"{r['ms_per_batch']:.3f} ms, {r['mb_per_s']:,.0f} MB/s",
                color=TO_DEVICE,
            )
            for r in rows
        ]
        panels.append(Panel(f"{dtype} batches", bars, "ms per batch (lower is better)"))
    title = f"to_device of an images batch by dtype and batch size; {sweep['measures']}"
    return bar_chart(panels, path, title=title)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Flags of ``looptoolkit transfer``."""
    parser = argparse.ArgumentParser(
        prog="looptoolkit transfer",
        description="Time to_device on a nested tree of 1000 small leaves and on a batch of "
        "images, against bare optree / torch pytree / hand-written traversals, checked first, "
        "interleaved; with CUDA, real transfers against one large pinned copy.",
    )
    add = parser.add_argument
    add("--rounds", type=int, default=50, help="interleaved rounds (50)")
    add("--repeat", type=int, default=20, help="calls per round for the host rows (20)")
    for flag, default, text in (
        ("--nested", True, "time the nested traversal"),
        ("--images", True, "time the images workload"),
        (
            "--sweep",
            True,
            "time to_device of a uint8, float16 and float32 images batch by "
            "batch size (32 to 1024), at most 15 rounds",
        ),
        ("--cuda", None, "time real transfers on CUDA (default: when torch sees CUDA)"),
    ):
        add(flag, action=argparse.BooleanOptionalAction, default=default, help=text)
    add("--ref-mib", type=int, default=64, help="size of the pinned reference copy, MiB (64)")
    add(
        "--out",
        type=Path,
        help="directory for transfer-<device>.{json,md,png} (default: ./looptoolkit-results)",
    )
    add("--reference", action="store_true", help=REFERENCE_HELP)
    for flag, text in (
        ("--write", "write the results files"),
        ("--plot", "write the PNG chart (needs matplotlib)"),
    ):
        add(flag, action=argparse.BooleanOptionalAction, default=True, help=text)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.repeat < 1 or args.ref_mib < 1:
        parser.error("`--rounds`, `--repeat` and `--ref-mib` must be >= 1.")
    if args.reference and args.out is not None:
        parser.error("--reference and --out: give one")
    return args


def device_slug(name: str) -> str:
    """``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def run(argv: Sequence[str] | None = None) -> int:
    """Run the transfer benchmark; print and write the results. Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args, progress = parse_args(argv), Progress()

    def fail(message: str, status: int = 1) -> int:
        progress.clear()
        print(message, file=sys.stderr)
        return status

    try:
        out = results_dir(args.out, reference=args.reference) if args.write else None
        progress.stage("importing torch")
        torch = quiet_import("torch")
    except FileNotFoundError as e:
        return fail(f"looptoolkit transfer: error: {e}", 2)
    except ImportError:
        return fail("torch is not installed; install it with `pip install 'looptoolkit[torch]'`.")
    cuda = torch.cuda.is_available() if args.cuda is None else args.cuda
    if cuda and not torch.cuda.is_available():
        return fail("`--cuda` given, but torch sees no CUDA device.")
    device = device_slug(torch.cuda.get_device_name()) if cuda else "cpu"
    where = f"; results go to {out}/" if out is not None else ""
    text = f"{args.rounds} interleaved rounds of {args.repeat} calls per variant{where}."
    progress.emit(wrap(f"looptoolkit transfer on {device}: {text}"))
    payload: dict[str, Any] = {
        "device": device,
        "command": " ".join(["looptoolkit transfer", *argv]),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "ratios": {},
        "values": {},
    }
    from looptoolkit.bench.transfer_cuda import cuda_sections

    rounds, light, p = args.rounds, sec.light_repeat(args.repeat), progress
    steps = [
        ("nested", "", args.nested, lambda: sec.nested_traversal(rounds, args.repeat, p)),
        ("packing_cpu", "cpu-only: ", args.nested, lambda: sec.packing_cpu(rounds, light, p)),
        ("images_cpu", "cpu-only: ", args.images, lambda: sec.images_cpu(rounds, light, p)),
        ("cuda", "cuda: ", cuda, lambda: cuda_sections(rounds, args.ref_mib, p)),
    ]
    for key, prefix, wanted, measure in steps:
        if wanted:
            shown = len(sections(payload))
            payload[key] = measure()
            payload["values"].update(payload[key].get("values", {}))
            payload["ratios"].update({prefix + k: v for k, v in payload[key]["ratios"].items()})
            for title, rows in sections(payload)[shown:]:
                progress.emit("\n" + section_table(title, rows).text())
    if args.sweep:
        try:
            payload["sweep"] = sec.sweep(min(rounds, 15), cuda=cuda, progress=progress)
        except ImportError as e:  # on the CPU the sweep moves batches to JAX's CPU device
            progress.emit(wrap(f"no batch-size sweep: {e}"))
        else:
            progress.emit("\n" + sweep_table(payload["sweep"]).text())
    payload["machine"] = machine_info()
    payload["targets"] = evaluate("transfer", payload["values"], gpu=cuda)
    progress.emit("\n" + wrap(headline(payload)))
    progress.emit("\n" + targets_table(payload["targets"]).text())
    if out is None:
        return 0
    stem, paths = f"transfer-{device}", []
    charts: list[tuple[Callable[[dict[str, Any], Path], Path], dict[str, Any], str]] = []
    charts += [(plot, payload, "")] if sections(payload) else []
    charts += [(plot_sweep, payload["sweep"], "-sweep")] if payload.get("sweep") else []
    if args.plot and charts:
        progress.stage("drawing the chart")
        try:
            paths = [draw(data, out / f"{stem}{suffix}.png") for draw, data, suffix in charts]
        except ImportError:
            progress.emit("matplotlib is not installed: no PNG written.")
    payload["charts"] = [p.name for p in paths]
    paths = write_results(out, stem, payload, markdown(payload)) + paths
    progress.emit("\n" + wrap(f"Wrote {', '.join(map(str, paths))} ({progress.elapsed():.0f} s)."))
    return 0
