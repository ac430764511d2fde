"""``looptoolkit transfer``: what ``to_device`` costs on top of the copies it has to make.

Every section's rows are checked, then timed interleaved (CUDA rows with CUDA events). The report
is printed and written as ``transfer-<device>.{json,md,png}`` and ``transfer-<device>-sweep.png``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from looptoolkit.bench import render
from looptoolkit.bench import transfer_sections as sec
from looptoolkit.bench.charts import FLOOR_COLOR, Bar, Panel, bar_chart
from looptoolkit.bench.progress import Progress, quiet_import
from looptoolkit.bench.results import REFERENCE_HELP, Group, Row, Run, results_dir
from looptoolkit.bench.tables import Table, wrap
from looptoolkit.bench.targets import evaluate
from looptoolkit.bench.timing import machine_info

__all__ = ["headline", "run", "sweep_table", "tables"]

TITLES = {
    ("nested", "torch_to_cpu"): "nested: 1000 torch leaves to torch.device('cpu') (t.to(dev) is t)",
    ("nested", "numpy_to_torch_cpu"): "nested: 1000 NumPy leaves to torch (torch.from_numpy)",
    ("packing_cpu", "rows"): "nested, CPU only: packing (one cat per dtype) vs 1000 leaf copies",
    ("images_cpu", "rows"): "images, CPU only: the host cast, and the bytes each order copies",
    ("cuda", "images"): "images to CUDA, timed with CUDA events",
    ("cuda", "nested"): "nested to CUDA, timed with CUDA events",
}
"""Where each section's rows are in a measured section, and its title; in report order."""
TO_DEVICE = "#dd8452"
_ROW_KEYS, _CHECK = (
    ("name", "label", "rounds_s", "median_s", "min_s", "max_s"),
    "same as the reference",
)


def _row(r: dict[str, Any]) -> Row:
    """A measured row as a typed row; its other figures in ``extra``."""
    extra = {k: v for k, v in r.items() if k not in _ROW_KEYS}
    return Row(r["name"], r["label"], rounds_s=r["rounds_s"], check=_CHECK, extra=extra)


def _groups(key: str, section: dict[str, Any]) -> list[Group]:
    """The groups of one measured section, per call."""
    return [
        Group(f"{key}/{part}", title, [_row(r) for r in section[part]], unit="call")
        for (where, part), title in TITLES.items()
        if where == key and section.get(part)
    ]


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


def tables(run: Run) -> list[Table]:
    """The sections after the groups: the batch-size sweep, the other ratios."""
    out = [sweep_table(run.extras["sweep"])] if run.extras.get("sweep") else []
    ratios = [[name, f"{value:.2f}"] for name, value in run.extras.get("ratios", {}).items()]
    return [*out, Table("Other ratios", ["ratio", "value"], ratios)]


def headline(run: Run) -> str:
    """The run in a sentence: to_device against the bare traversals, and the CUDA ratios."""
    v, parts = run.extras.get("values", {}), []
    for kind, what in (("torch", "torch leaves"), ("numpy", "NumPy leaves to torch")):
        if (ours := v.get(f"{kind}:to_device")) is not None:
            parts.append(f"{what}: {ours / v[f'{kind}:optree']:.2f}x optree.tree_map and ")
            parts[-1] += f"{ours / v[f'{kind}:move_to']:.2f}x a hand-written move_to"
    text = "to_device on 1000 small leaves, " + "; ".join(parts) + "." if parts else ""
    if not (cuda := run.extras.get("cuda")):
        return (text + " No CUDA device: the GPU rows were not measured.").strip()
    r = cuda["ratios"]
    return (
        f"{text} On {cuda['device']}: the pinned batch at "
        f"{r['to_device(pinned batch) bandwidth / reference']:.0%} of one large pinned copy's "
        f"bandwidth; cast-then-copy {r['cast-then-copy / copy-then-cast (to_device)']:.2f}x "
        f"copy-then-cast; per-leaf {r['per-leaf / packed (nested)']:.1f}x packed."
    ).strip()


def markdown(run: Run) -> str:
    """The Markdown report: headline, machine, sections, sweep, targets, ratios, charts."""
    a = run.settings
    intro = f"Medians over {a['rounds']} interleaved rounds after {sec.WARMUP} warm-up rounds; "
    intro += f"host rows average {a['repeat']} calls per round (packing and images: "
    intro += f"{sec.light_repeat(a['repeat'])}). Lower is better."
    return render.markdown(run, [headline(run)], [intro], tables(run))


def plot_sweep(sweep: dict[str, Any], path: Path) -> Path:
    """Bars of ms per batch by batch size, one panel per dtype, each bar with its MB/s."""
    panels = []
    for dtype in sec.DTYPES:
        bars = []
        for r in (r for r in sweep["rows"] if r["dtype"] == dtype):
            note = f"{r['ms_per_batch']:.3f} ms, {r['mb_per_s']:,.0f} MB/s"
            bars.append(Bar(str(r["batch_size"]), r["ms_per_batch"], note, TO_DEVICE))
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
    sweep = "time to_device of a uint8, float16 and float32 images batch by batch size (32 to 1024)"
    for flag, default, text in (
        ("--nested", True, "time the nested traversal"),
        ("--images", True, "time the images workload"),
        ("--sweep", True, f"{sweep}, at most 15 rounds"),
        ("--cuda", None, "time real transfers on CUDA (default: when torch sees CUDA)"),
        ("--write", True, "write the results files"),
        ("--plot", True, "write the PNG chart (needs matplotlib)"),
    ):
        add(flag, action=argparse.BooleanOptionalAction, default=default, help=text)
    add("--ref-mib", type=int, default=64, help="size of the pinned reference copy, MiB (64)")
    out = "directory for transfer-<device>.{json,md,png} (default: ./looptoolkit-results)"
    add("--out", type=Path, help=out)
    add("--reference", action="store_true", help=REFERENCE_HELP)
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
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    result = Run("transfer", device, " ".join(["looptoolkit transfer", *argv]), {}, settings, [])
    values, ratios = result.extras.setdefault("values", {}), result.extras.setdefault("ratios", {})
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
            section = measure()
            values.update(section.get("values", {}))
            ratios.update({prefix + k: v for k, v in section["ratios"].items()})
            if key == "cuda":
                result.extras["cuda"] = {"device": section["device"], "ratios": section["ratios"]}
            result.groups += (groups := _groups(key, section))
            for group in groups:
                progress.emit("\n" + render.group_table(group).text())
    if args.sweep:
        try:
            result.extras["sweep"] = sec.sweep(min(rounds, 15), cuda=cuda, progress=progress)
        except ImportError as e:  # on the CPU the sweep moves batches to JAX's CPU device
            progress.emit(wrap(f"no batch-size sweep: {e}"))
        else:
            progress.emit("\n" + sweep_table(result.extras["sweep"]).text())
    result.machine = machine_info()
    result.verdicts = evaluate("transfer", values, gpu=cuda)
    progress.emit("\n" + wrap(headline(result)))
    progress.emit("\n" + render.targets_table(result.verdicts).text())
    if out is None:
        return 0
    stem, paths = f"transfer-{device}", []
    if args.plot:
        progress.stage("drawing the chart")
        try:
            color = lambda row: TO_DEVICE if "to_device" in row.name else FLOOR_COLOR  # noqa: E731
            legend = [("to_device", TO_DEVICE), ("others", FLOOR_COLOR)]
            paths = [render.plot(result, out / f"{stem}.png", color=color, legend=legend)]
            if result.extras.get("sweep"):
                paths.append(plot_sweep(result.extras["sweep"], out / f"{stem}-sweep.png"))
        except ImportError:
            progress.emit("matplotlib is not installed: no PNG written.")
    charts = [path for path in paths if path is not None]
    result.charts, result.wall_s = [path.name for path in charts], progress.elapsed()
    files = [*result.save(out, stem, markdown(result)), *charts]
    progress.emit("\n" + wrap(f"Wrote {', '.join(map(str, files))} ({progress.elapsed():.0f} s)."))
    return 0
