"""``looptoolkit transfer``: what ``to_device`` costs on top of the copies it has to make.

The same harness as ``looptoolkit compare``: every variant's output is
checked, then the variants are timed interleaved in one process (medians of
``--rounds`` rounds of ``--repeat`` calls; CUDA rows with CUDA events), and
the report (headline first, 80-column tables, Markdown, a chart, the targets)
is written to ``./looptoolkit-results/`` or ``--out``. The sections are in
[`looptoolkit.bench.transfer_sections`][looptoolkit.bench.transfer_sections] (host) and
[`looptoolkit.bench.transfer_cuda`][looptoolkit.bench.transfer_cuda] (GPU); results are
``transfer-<device>.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from looptoolkit.bench import transfer_sections as sec
from looptoolkit.bench.charts import FLOOR_COLOR, Bar, Panel, bar_chart
from looptoolkit.bench.progress import Progress, quiet_import
from looptoolkit.bench.results import REFERENCE_HELP, results_dir, write_results
from looptoolkit.bench.tables import Table, wrap
from looptoolkit.bench.targets import evaluate
from looptoolkit.bench.timing import load_text, machine_info

__all__ = ["device_slug", "headline", "markdown", "parse_args", "plot", "run", "sections"]

# payload key -> (title, rows key or None for a list)
SECTIONS = {
    "torch_to_cpu": "nested: 1000 torch leaves to torch.device('cpu') (t.to(dev) returns t)",
    "numpy_to_torch_cpu": "nested: 1000 NumPy leaves to torch (torch.from_numpy per leaf)",
    "packing_cpu": "nested, CPU only: packing (one cat per dtype) vs 1000 per-leaf copies",
    "images_cpu": "images, CPU only: the host cast, and the bytes each order copies",
    "cuda_images": "images to CUDA, timed with CUDA events",
    "cuda_nested": "nested to CUDA, timed with CUDA events",
}


def sections(payload: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """``(title, rows)`` of every section the payload holds, in report order."""
    found: dict[str, list[dict[str, Any]]] = {}
    nested = payload.get("nested") or {}
    for key in ("torch_to_cpu", "numpy_to_torch_cpu"):
        if key in nested:
            found[key] = nested[key]
    for key in ("packing_cpu", "images_cpu"):
        if payload.get(key):
            found[key] = payload[key]["rows"]
    cuda = payload.get("cuda") or {}
    if cuda:
        found["cuda_images"], found["cuda_nested"] = cuda["images"], cuda["nested"]
    return [(SECTIONS[key], rows) for key, rows in found.items()]


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def section_table(title: str, rows: list[dict[str, Any]]) -> Table:
    """One section: median and [min, max] in microseconds per call, ratio to the first row."""
    first = rows[0]["median_s"]
    header = ["variant", "median us", "min-max us", "vs first"]
    cells = [
        [
            r["name"],
            _us(r["median_s"]),
            f"{_us(r['min_s'])}-{_us(r['max_s'])}",
            f"{r['median_s'] / first:.2f}",
        ]
        for r in rows
    ]
    if "gb_per_s" in rows[0]:
        header.append("GB/s")
        for c, r in zip(cells, rows, strict=True):
            c.append(f"{r['gb_per_s']:.1f} ({r['of_reference']:.0%})")
    notes = [f"{r['name']}: {r['label']}" for r in rows if r["label"] != r["name"]]
    return Table(title, header, cells, notes=notes)


def targets_table(rows: list[dict[str, Any]], *, short: bool = True) -> Table:
    """The transfer targets: goal, measured, status."""
    cells = [
        [
            t["key"] if short else t["text"],
            t["goal"],
            t["shown"] if t["value"] is not None else "-",
            t["status"],
        ]
        for t in rows
    ]
    notes = [f"{t['key']}: {t['text']}" for t in rows] if short else []
    header = ["target", "goal", "measured", "status"]
    return Table("Targets (ratios from this run)", header, cells, align="lrrl", notes=notes)


def headline(payload: dict[str, Any]) -> str:
    """The run in a sentence: to_device against the bare traversals."""
    values = payload.get("values", {})
    parts = []
    for kind, what in (("torch", "torch leaves"), ("numpy", "NumPy leaves to torch")):
        ours = values.get(f"{kind}:to_device")
        if ours is None:
            continue
        parts.append(
            f"{what}: {ours / values[f'{kind}:optree']:.2f}x optree.tree_map and "
            f"{ours / values[f'{kind}:move_to']:.2f}x a hand-written move_to"
        )
    text = "to_device on 1000 small leaves, " + "; ".join(parts) + "." if parts else ""
    cuda = payload.get("cuda")
    if cuda:
        r = cuda["ratios"]
        text += (
            f" On {cuda['device']}: the pinned batch at "
            f"{r['to_device(pinned batch) bandwidth / reference']:.0%} of one large pinned "
            f"copy's bandwidth; cast-then-copy "
            f"{r['cast-then-copy / copy-then-cast (to_device)']:.2f}x copy-then-cast; "
            f"per-leaf {r['per-leaf / packed (nested)']:.1f}x packed."
        )
    else:
        text += " No CUDA device: the GPU rows were not measured."
    return text.strip()


def markdown(payload: dict[str, Any]) -> str:
    """The results as Markdown: headline, sections, targets, machine."""
    m = payload["machine"]
    v = ", ".join(f"{k} {val}" for k, val in m["versions"].items())
    a = payload["args"]
    lines = [
        f"# looptoolkit transfer — {payload['device']}\n",
        headline(payload) + "\n",
        f"Command: `{payload['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores"
        + (f", {m['gpu']}" if "gpu" in m else "")
        + f" ({m['date']}{load_text(m)}); {v}.  ",
        f"Medians over {a['rounds']} interleaved rounds after {sec.WARMUP} warm-up rounds; host "
        f"rows average {a['repeat']} calls per round (packing and images: "
        f"{sec.light_repeat(a['repeat'])}). Lower is better.\n",
    ]
    for title, rows in sections(payload):
        table = section_table(title, rows)
        lines += [f"## {title}\n", table.markdown()]
    if payload.get("sweep"):
        from looptoolkit.bench.transfer_sweep import sweep_table

        table = sweep_table(payload["sweep"])
        lines += [f"## {table.title}\n", table.markdown()]
    lines += ["## Targets\n", targets_table(payload["targets"], short=False).markdown()]
    lines += ["## Other ratios\n", "| ratio | value |", "|---|---:|"]
    lines += [f"| {name} | {value:.2f} |" for name, value in payload["ratios"].items()]
    for chart in payload.get("charts", []):
        lines.append(f"\n![{chart}]({chart})")
    return "\n".join(lines) + "\n"


def plot(payload: dict[str, Any], path: Path) -> Path:
    """Bars of microseconds per call, one panel per section, each bar with its ratio."""
    panels = []
    for title, rows in sections(payload):
        first = rows[0]["median_s"]
        bars = [
            Bar(
                r["name"],
                r["median_s"] * 1e6,
                f"{r['median_s'] * 1e6:8,.1f} us {r['median_s'] / first:5.2f}x",
                color="#dd8452" if "to_device" in r["name"] else FLOOR_COLOR,
            )
            for r in rows
        ]
        panels.append(
            Panel(title, bars, "microseconds per call (lower is better); ratios to the first row")
        )
    return bar_chart(
        panels,
        path,
        title=f"looptoolkit transfer, {payload['device']}",
        legend=[("to_device", "#dd8452"), ("others", FLOOR_COLOR)],
    )


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
    add(
        "--nested",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the nested traversal",
    )
    add(
        "--images",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the images workload",
    )
    add(
        "--sweep",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time to_device of a uint8, float16 and float32 images batch by batch size "
        "(32 to 1024), at most 15 rounds",
    )
    add(
        "--cuda",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="time real transfers on CUDA (default: when torch sees CUDA)",
    )
    add("--ref-mib", type=int, default=64, help="size of the pinned reference copy, MiB (64)")
    add(
        "--out",
        type=Path,
        default=None,
        help="directory for transfer-<device>.{json,md,png} (default: ./looptoolkit-results)",
    )
    add("--reference", action="store_true", help=REFERENCE_HELP)
    add(
        "--write",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write the results files",
    )
    add(
        "--plot",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write the PNG chart (needs matplotlib)",
    )
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
    args = parse_args(argv)
    progress = Progress()

    try:
        out = results_dir(args.out, reference=args.reference) if args.write else None
        progress.stage("importing torch")
        torch = quiet_import("torch")
    except FileNotFoundError as e:
        print(f"looptoolkit transfer: error: {e}", file=sys.stderr)
        return 2
    except ImportError:
        progress.clear()
        print(
            "torch is not installed; install it with `pip install 'looptoolkit[torch]'`.",
            file=sys.stderr,
        )
        return 1
    use_cuda = torch.cuda.is_available() if args.cuda is None else args.cuda
    if use_cuda and not torch.cuda.is_available():
        progress.clear()
        print("`--cuda` given, but torch sees no CUDA device.", file=sys.stderr)
        return 1
    device = device_slug(torch.cuda.get_device_name()) if use_cuda else "cpu"
    where = f"; results go to {out}/" if out is not None else ""
    progress.emit(
        wrap(
            f"looptoolkit transfer on {device}: {args.rounds} interleaved rounds of "
            f"{args.repeat} calls per variant{where}."
        )
    )
    payload: dict[str, Any] = {
        "device": device,
        "command": " ".join(["looptoolkit transfer", *argv]),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "ratios": {},
        "values": {},
    }
    shown = 0

    def show_new() -> None:
        nonlocal shown
        for title, rows in sections(payload)[shown:]:
            progress.emit("\n" + section_table(title, rows).text())
            shown += 1

    if args.nested:
        payload["nested"] = sec.nested_traversal(args.rounds, args.repeat, progress)
        payload["values"].update(payload["nested"]["values"])
        for part, ratios in payload["nested"]["ratios"].items():
            payload["ratios"].update({f"{part}: {k}": v for k, v in ratios.items()})
        show_new()
        payload["packing_cpu"] = sec.packing_cpu(
            args.rounds, sec.light_repeat(args.repeat), progress
        )
        payload["ratios"].update(
            {f"cpu-only: {k}": v for k, v in payload["packing_cpu"]["ratios"].items()}
        )
        show_new()
    if args.images:
        payload["images_cpu"] = sec.images_cpu(args.rounds, sec.light_repeat(args.repeat), progress)
        payload["ratios"].update(
            {f"cpu-only: {k}": v for k, v in payload["images_cpu"]["ratios"].items()}
        )
        show_new()
    if use_cuda:
        from looptoolkit.bench.transfer_cuda import cuda_sections

        payload["cuda"] = cuda_sections(args.rounds, args.ref_mib, progress)
        payload["values"].update(payload["cuda"]["values"])
        payload["ratios"].update({f"cuda: {k}": v for k, v in payload["cuda"]["ratios"].items()})
        show_new()
    if args.sweep:
        from looptoolkit.bench.transfer_sweep import sweep, sweep_table

        try:
            payload["sweep"] = sweep(min(args.rounds, 15), cuda=use_cuda, progress=progress)
        except ImportError as e:  # on the CPU the sweep moves batches to JAX's CPU device
            progress.emit(wrap(f"no batch-size sweep: {e}"))
        else:
            progress.emit("\n" + sweep_table(payload["sweep"]).text())
    payload["machine"] = machine_info()
    payload["targets"] = evaluate("transfer", payload["values"], gpu=use_cuda)
    progress.emit("\n" + wrap(headline(payload)))
    progress.emit("\n" + targets_table(payload["targets"]).text())
    if out is None:
        return 0
    stem = f"transfer-{device}"
    paths = []
    if args.plot and (sections(payload) or payload.get("sweep")):
        progress.stage("drawing the chart")
        try:
            if sections(payload):
                paths.append(plot(payload, out / f"{stem}.png"))
            if payload.get("sweep"):
                from looptoolkit.bench.transfer_sweep import plot_sweep

                paths.append(plot_sweep(payload["sweep"], out / f"{stem}-sweep.png"))
        except ImportError:
            progress.emit("matplotlib is not installed: no PNG written.")
    payload["charts"] = [p.name for p in paths]
    paths = write_results(out, stem, payload, markdown(payload)) + paths
    progress.emit("\n" + wrap(f"Wrote {', '.join(map(str, paths))} ({progress.elapsed():.0f} s)."))
    return 0


def main() -> None:
    """``python -m looptoolkit.bench.transfer``."""
    raise SystemExit(run())


if __name__ == "__main__":
    main()
