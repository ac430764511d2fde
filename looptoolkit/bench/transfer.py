"""``looptoolkit transfer``: what ``to_device`` costs on top of the copies it has to make.

Each section is checked, then timed interleaved; the report goes to ``transfer-<device>.*``.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from looptoolkit.bench import render
from looptoolkit.bench import transfer_sections as sec
from looptoolkit.bench.charts import FLOOR_COLOR
from looptoolkit.bench.progress import Progress, quiet_import
from looptoolkit.bench.results import REFERENCE_HELP, Run, results_dir
from looptoolkit.bench.tables import Table, wrap
from looptoolkit.bench.targets import evaluate
from looptoolkit.bench.timing import machine_info
from looptoolkit.bench.transfer_cuda import cuda_sections

__all__ = ["headline", "run", "tables"]


def _info(run: Run, key: str) -> dict[str, float]:
    """The groups' ``ratios`` or target ``values``, in report order."""
    return {k: v for g in run.groups for k, v in g.info.get(key, {}).items()}


def tables(run: Run) -> list[Table]:
    """The sections after the groups: the batch-size sweep, the other ratios."""
    out = [sec.sweep_table(run.extras["sweep"])] if run.extras.get("sweep") else []
    ratios = [[name, f"{value:.2f}"] for name, value in _info(run, "ratios").items()]
    return [*out, Table("Other ratios", ["ratio", "value"], ratios)]


def headline(run: Run) -> str:
    """The run in a sentence: to_device against the bare traversals, and the CUDA ratios."""
    v, parts = _info(run, "values"), []
    for kind, what in (("torch", "torch leaves"), ("numpy", "NumPy leaves to torch")):
        if (ours := v.get(f"{kind}:to_device")) is not None:
            parts.append(f"{what}: {ours / v[f'{kind}:optree']:.2f}x optree.tree_map and ")
            parts[-1] += f"{ours / v[f'{kind}:move_to']:.2f}x a hand-written move_to"
    text = "to_device on 1000 small leaves, " + "; ".join(parts) + "." if parts else ""
    if "cuda:packed" not in v:
        return (text + " No CUDA device: the GPU rows were not measured.").strip()
    return (
        f"{text} On {run.machine.get('gpu', run.device)}: the pinned batch at "
        f"{v['cuda:bandwidth-share']:.0%} of one large pinned copy's bandwidth; cast-then-copy "
        f"{v['cuda:cast-then-copy'] / v['cuda:copy-then-cast']:.2f}x copy-then-cast; per-leaf "
        f"{v['cuda:per-leaf'] / v['cuda:packed']:.1f}x packed."
    ).strip()


def markdown(run: Run) -> str:
    """The Markdown report: headline, machine, sections, sweep, targets, ratios, charts."""
    a = run.settings
    intro = f"Medians over {a['rounds']} interleaved rounds after {sec.WARMUP} warm-up rounds; "
    intro += f"host rows average {a['repeat']} calls per round (packing and images: "
    intro += f"{max(1, a['repeat'] // 4)}). Lower is better."
    return render.markdown(run, [headline(run)], [intro], tables(run))


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
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
    settings = {**vars(args), "out": args.out and str(args.out)}
    result = Run("transfer", device, " ".join(["looptoolkit transfer", *argv]), {}, settings, [])
    rounds, p = args.rounds, progress
    host = sec.host_sections(rounds, args.repeat, p, trees=args.nested, images=args.images)
    for group in itertools.chain(host, cuda_sections(rounds, args.ref_mib, p) if cuda else ()):
        result.groups.append(group)
        progress.emit("\n" + render.group_table(group).text())
    if args.sweep:
        try:
            result.extras["sweep"] = sec.dtype_sweep(min(rounds, 15), cuda=cuda, progress=p)
        except ImportError as e:  # on the CPU the sweep moves batches to JAX's CPU device
            progress.emit(wrap(f"no batch-size sweep: {e}"))
        else:
            progress.emit("\n" + sec.sweep_table(result.extras["sweep"]).text())
    result.machine = machine_info()
    result.verdicts = evaluate("transfer", _info(result, "values"), gpu=cuda)
    progress.emit("\n" + wrap(headline(result)))
    progress.emit("\n" + render.targets_table(result.verdicts).text())
    if out is None:
        return 0
    stem, charts = f"transfer-{device}", []
    if args.plot:
        progress.stage("drawing the charts")
        color = lambda row: sec.TO_DEVICE if "to_device" in row.name else FLOOR_COLOR  # noqa: E731
        legend = [("to_device", sec.TO_DEVICE), ("others", FLOOR_COLOR)]
        try:
            charts = [render.plot(result, out / f"{stem}.png", color=color, legend=legend)]
            if result.extras.get("sweep"):
                charts.append(sec.plot_sweep(result.extras["sweep"], out / f"{stem}-sweep.png"))
        except ImportError:
            progress.emit("matplotlib is not installed: no PNG written.")
    paths = [path for path in charts if path is not None]
    result.charts, result.wall_s = [path.name for path in paths], progress.elapsed()
    files = [*result.save(out, stem, markdown(result)), *paths]
    progress.emit("\n" + wrap(f"Wrote {', '.join(map(str, files))} ({progress.elapsed():.0f} s)."))
    return 0
