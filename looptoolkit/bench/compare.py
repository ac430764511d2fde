"""``looptoolkit compare``: every loop variant x backend x workload, checked, then timed.

Per workload: check, time interleaved ([`looptoolkit.bench.rounds`][looptoolkit.bench.rounds]),
print its table; then the step, transfer and memory sections, the targets, and
``compare-<device>.json``, ``.md`` and ``.png`` in ``./looptoolkit-results/`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from looptoolkit.bench import compare_report as report
from looptoolkit.bench import render
from looptoolkit.bench.progress import Progress, quiet_env, quiet_import
from looptoolkit.bench.results import REFERENCE_HELP, Group, Run, results_dir
from looptoolkit.bench.rounds import Settings, Step, run_step, run_workload
from looptoolkit.bench.tables import wrap
from looptoolkit.bench.targets import BASELINE, evaluate
from looptoolkit.bench.timing import machine_info
from looptoolkit.bench.variants import kit, variants
from looptoolkit.bench.workloads import WORKLOADS, make_workload

__all__ = ["PRESETS", "main", "parse_args", "run"]

CLASSIC = (
    *("python", BASELINE, "numpy-index", "numpy-epoch", "floor-memcpy", "floor-seq-take"),
    *("dl-per-sample", "dl-per-sample-w2", "tf-classic", "loader-numpy", "loader-grouped"),
)

PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "classic": (
        "which loop is fastest for 1000 epochs of 300,000 samples at batch 300: pure Python, "
        "NumPy, DataLoader (0 and 2 workers), tf.data, the Loader; times --rounds epochs of "
        "each and multiplies (--epochs 1000 times all of them)",
        {
            "workload": "index",
            "variants": ",".join(CLASSIC),
            "step_ms": 0.0,
            "transfer": False,
            "project_epochs": 1000,
        },
    ),
}
"""Named sets of flags: ``--preset NAME`` -> (what it answers, the flags it sets)."""

STEP_FOCUS: dict[str, list[str]] = {"images": ["img-*"]}
"""Workload -> the variants its step section times when ``--variants`` is not given."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``looptoolkit compare`` flags."""
    parser = argparse.ArgumentParser(
        prog="looptoolkit compare",
        description="Time every loop variant x backend x workload, checked first, interleaved "
        "in one process; ratios to the best hand-written loop (NumPy permutation + take).",
        epilog="Variants, workloads and how to read the tables: docs/compare.md.",
    )
    add = parser.add_argument
    add("--preset", choices=sorted(PRESETS), help="classic: " + PRESETS["classic"][0])
    add("--device", help="cpu, cuda or cuda:N (default: the best one present)")
    add("--workload", help="index, tabular, images, a comma list, or all (default)")
    add("--backends", help="comma list of numpy, torch, jax, tf (default: every installed one)")
    add("--variants", help=f"comma list of variant names or globs ({BASELINE} always runs)")
    add("--skip", help="variant names or globs to leave out (e.g. '*-w2')")
    add("--rounds", type=int, default=5, help="timed rounds per variant, interleaved (5)")
    epochs = "timed epochs per variant, spread over the rounds (default: one per round)"
    add("--epochs", type=int, help=epochs)
    add("--warmup", type=int, default=1, help="warm-up rounds (1)")
    bounded = (
        "a loop whose epoch takes longer is timed on a bounded number of batches per round and "
        "scaled; 0 times whole epochs (0.25)"
    )
    add("--max-epoch-s", type=float, default=0.25, help=bounded)
    slow = "batches per round for the always-bounded loops (50)"
    add("--slow-batches", type=int, default=50, help=slow)
    step_ms = "synthetic model step after every batch in the step section; 0 skips it (0.5)"
    add("--step-ms", type=float, help=step_ms)
    step_workload = (
        "workloads of the step section, a comma list (tabular,images); on images it times the "
        "images variant set (img-*) and the baseline unless --variants is given"
    )
    add("--step-workload", default="tabular,images", help=step_workload)
    add("--step-batches", type=int, default=100, help="batches per round, step section (100)")
    transfer = (
        "time uint8 vs float16 transfer by batch size (default: on a GPU only; on the CPU both "
        "paths are the same host cast)"
    )
    add("--transfer", action=argparse.BooleanOptionalAction, help=transfer)
    memmap = (
        "also measure the memory one Loader epoch allocates over a memory-mapped dataset of "
        "this size, written to a temporary file (default: 0, off)"
    )
    add("--memmap-gb", type=float, default=0.0, help=memmap)
    add("--seed", type=int, default=0, help="seed of every order (0)")
    out = "directory for the JSON, Markdown and PNG (default: ./looptoolkit-results)"
    add("--out", type=Path, help=out)
    add("--reference", action="store_true", help=REFERENCE_HELP)
    plot = "write the PNG chart (needs matplotlib)"
    add("--plot", action=argparse.BooleanOptionalAction, default=True, help=plot)
    add("--quick", action="store_true", help="tiny sizes, few rounds: a smoke test")
    args = parser.parse_args(argv)
    preset = PRESETS[args.preset][1] if args.preset else {}
    args.project_epochs = preset.get("project_epochs")
    for key in ("workload", "variants", "step_ms", "transfer"):
        if getattr(args, key) is None and key in preset:
            setattr(args, key, preset[key])
    args.workload = args.workload or "all"
    args.step_ms = 0.5 if args.step_ms is None else args.step_ms
    if args.quick:
        args.rounds = min(args.rounds, 2)
        args.step_batches = min(args.step_batches, 20)
        args.slow_batches = min(args.slow_batches, 10)
        args.max_epoch_s = min(args.max_epoch_s, 0.2)
    for name in ("rounds", "warmup", "slow_batches", "step_batches", "epochs"):
        value, minimum = getattr(args, name), 0 if name == "warmup" else 1
        if value is not None and value < minimum:
            parser.error(f"--{name.replace('_', '-')} must be >= {minimum}")
    args.epochs_per_round = 1
    if args.epochs is not None:  # spread over the rounds
        args.rounds = min(args.rounds, args.epochs)
        args.epochs_per_round = -(-args.epochs // args.rounds)
    if args.reference and args.out is not None:
        parser.error("--reference and --out: give one")
    return args


def _split(text: str | None) -> list[str] | None:
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]


def best_device(backends: list[str]) -> str:
    """``"cuda"`` when one of ``backends`` (imported) sees a CUDA GPU, else ``"cpu"``."""
    for name in backends:
        gpu = kit(name).gpu
        with contextlib.suppress(RuntimeError):
            if gpu is not None and gpu():
                return "cuda"
    return "cpu"


def _check_device(device: str, backends: list[str]) -> str:
    name, _, index = device.partition(":")
    if name not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise ValueError(f"`--device` must be cpu, cuda or cuda:N, got {device!r}.")
    if name == "cuda" and best_device(backends) != "cuda":
        raise ValueError(f"`--device cuda`: none of {', '.join(backends)} sees a CUDA GPU here.")
    return device


def load_backends(
    wanted: list[str] | None, progress: Progress | None = None
) -> tuple[list[str], dict[str, str]]:
    """Import the wanted backends quietly; return those present and why the others are not.

    A backend runs when its framework imports and it has variants (a registered kit).
    """
    from looptoolkit.adapters import BACKENDS, get_backend

    present: list[str] = []
    skipped: dict[str, str] = {}
    for name, (_, module, _) in BACKENDS.items():
        if wanted is not None and name not in wanted:
            continue
        if progress is not None:
            progress.stage(f"importing {module}")
        try:
            quiet_import(module)
            get_backend(name)
            kit(name)
        except (ImportError, ValueError) as e:
            skipped[name] = str(e)
        else:
            present.append(name)
    return present, skipped


def _workload_names(text: str) -> list[str]:
    names = list(WORKLOADS) if text == "all" else _split(text) or []
    for name in names:
        if name not in WORKLOADS:
            known = ", ".join(WORKLOADS)
            raise ValueError(f"`--workload`: unknown workload {name!r}; known: {known}, all.")
    return names


def _intro(args: argparse.Namespace, device: str, out: Path, backends: list[str]) -> str:
    lines = [
        f"looptoolkit compare on {device}: backends {', '.join(backends)}; results go to {out}/."
    ]
    if args.preset:
        lines.append(f"Preset {args.preset}: {PRESETS[args.preset][0]}.")
    lines.append(
        f"Each loop is timed on {args.epochs or args.rounds} epoch(s) after {args.warmup} warm-up "
        f"round(s); loops slower than {args.max_epoch_s:g} s per epoch on their first batches "
        "only, scaled to an epoch (marked *)."
    )
    if args.project_epochs:
        lines.append(
            f"The {args.project_epochs}-epoch figures multiply the median epoch "
            f"(add --epochs {args.project_epochs} --max-epoch-s 0 to time them all; "
            "that takes hours)."
        )
    return "\n".join(wrap(line) for line in lines)


# The flags of every workload's timing (Settings), then all the flags kept in the results.
_TIMING = ("rounds", "epochs_per_round", "warmup", "seed", "max_epoch_s", "slow_batches")
_STEP = ("step_ms", "step_workload", "step_batches")
_RECORDED = (*_TIMING, *_STEP, "quick", "preset", "project_epochs")


def run(argv: Sequence[str] | None = None) -> int:
    """Run ``looptoolkit compare`` with command-line arguments ``argv``; return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    quiet_env()
    progress = Progress()
    try:
        workload_names = _workload_names(args.workload)
        out = results_dir(args.out, reference=args.reference)
        backends, skipped = load_backends(_split(args.backends), progress)
        device = _check_device(args.device, backends) if args.device else best_device(backends)
    except (ValueError, FileNotFoundError) as e:
        progress.clear()
        print(f"looptoolkit compare: error: {e}", file=sys.stderr)
        return 2
    gpu = device != "cpu"
    progress.emit(_intro(args, device, out, backends))
    for name, why in skipped.items():
        progress.emit(wrap(f"backend {name} skipped: {why}"))
    timing = {key: getattr(args, key) for key in _TIMING}
    settings = Settings(device, backends, _split(args.variants), _split(args.skip), **timing)
    step_workloads = [w for w in _split(args.step_workload) or [] if w in workload_names]
    step_workloads = step_workloads or workload_names[-1:]
    args.step_workload = ",".join(step_workloads) if args.step_ms > 0 else None
    extras: dict[str, Any] = {"step": [], "skipped_backends": skipped}
    extras["accelerator_only"] = (
        [] if gpu else [v.name for v in variants(backends) if v.accelerator]
    )
    command = " ".join(["looptoolkit compare", *argv])
    run_settings = {key: getattr(args, key) for key in _RECORDED}
    result = Run("compare", device, command, {}, run_settings, [], extras=extras)
    for name in workload_names:
        progress.stage(f"{name}: building the data")
        workload = make_workload(name, quick=args.quick, seed=args.seed)
        entries = run_workload(workload, settings, progress)
        title = f"{name} ({device}): {workload.description}; {workload.num_batches} batches/epoch"
        info = {"description": workload.description, "n": workload.n, "bytes": workload.nbytes}
        rows = [e.row() for e in entries]
        group = Group(name, title, rows, "epoch", BASELINE, workload.num_batches, info)
        result.groups.append(group)
        if len(result.groups) == 1:
            progress.emit(f"\n{render.legend(result.groups)}\n{wrap(report.CHECK_LEGEND)}")
        progress.emit("\n" + wrap(report.headline(group, args.project_epochs)))
        progress.emit("\n" + render.group_table(group, epochs=args.project_epochs).text())
        if args.step_ms > 0 and name in step_workloads:
            focus = STEP_FOCUS.get(name) if settings.patterns is None else None
            step = Step(args.step_ms, device)
            steps = run_step(workload, entries, settings, step, args.step_batches, progress, focus)
            extras["step"] += [{"workload": name, **row} for row in steps]
            progress.emit("\n" + report.step_table(result, name).text())
        for entry in entries:
            entry.close()
        del entries, workload
        gc.collect()
    if args.transfer or (args.transfer is None and gpu):
        from looptoolkit.bench.transfer_sections import by_batch_size, sweep_table

        progress.stage("transfer of an images batch by batch size")
        extras["transfer"] = by_batch_size(device, args.quick, args.seed, progress)
        progress.emit("\n" + sweep_table(extras["transfer"]).text())
    if args.memmap_gb > 0:
        from looptoolkit.bench import memory

        extras["memory"] = memory.measure(args.memmap_gb, progress)
        progress.emit("\n" + memory.table(extras["memory"]).text())
    if any(g.name == "tabular" for g in result.groups):
        values = {r.name: r.median_s for r in result.group("tabular").rows if r.timed}
        for row in extras["step"]:
            if "error" not in row and row["workload"] == "tabular":
                values[f"wait:{row['name']}"] = row["wait_ms_per_batch"]
                values[f"step:{row['name']}"] = row["step_ms_per_batch"]
        result.verdicts = evaluate("compare", values, gpu=gpu, judged=not args.quick)
        progress.emit("\n" + render.targets_table(result.verdicts).text())
    result.machine = machine_info()
    # A preset's results sit beside the default run's, not over them.
    stem = "-".join(["compare", *([args.preset] if args.preset else []), device.replace(":", "")])
    charts: list[Path] = []
    if args.plot:
        progress.stage("drawing the chart")
        try:
            charts = report.plot(result, out, stem)
        except ImportError as e:
            progress.emit(f"no chart: {e}")
    result.charts, result.wall_s = [p.name for p in charts], progress.elapsed()
    files = result.save(out, stem, report.markdown(result))
    progress.emit("\n" + "\n".join(wrap(line, indent="  ") for line in report.summary(result)))
    wrote = ", ".join(str(p) for p in [*files, *charts])
    progress.emit("\n" + wrap(f"Wrote {wrote} ({progress.elapsed():.0f} s)."))
    return 0


def main() -> None:
    """``python -m looptoolkit.bench.compare``."""
    raise SystemExit(run())


if __name__ == "__main__":
    main()
