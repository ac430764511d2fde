"""``looptoolkit compare``: every loop variant x backend x workload, checked, then timed.

On screen, per workload its headline and the table's rows that place the Loader, then a closing
summary: the Loader against the best manual loop and its floors, the targets' verdicts, the files
written; at most 150 lines of 80 columns. The files in ``--out`` hold every row of every table,
the step and transfer sections and the targets; ``--verbose`` prints them too.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from looptoolkit._common.errors import RepeatedEpochWarning
from looptoolkit.bench import compare_report as report
from looptoolkit.bench import render
from looptoolkit.bench.progress import Progress, quiet_env, quiet_import
from looptoolkit.bench.results import REFERENCE_HELP, Group, Run, results_dir
from looptoolkit.bench.rounds import Settings, Step, run_step, run_workload
from looptoolkit.bench.tables import wrap
from looptoolkit.bench.targets import BASELINE, evaluate
from looptoolkit.bench.timing import machine_info
from looptoolkit.bench.variants import kit, variants
from looptoolkit.bench.workloads import ALL_WORKLOADS, DEFAULT_WORKLOADS, WORKLOADS, make_workload

__all__ = ["PRESETS", "parse_args", "run"]

CLASSIC = (
    *("python", BASELINE, "numpy-index", "numpy-epoch", "floor-memcpy", "floor-seq-take"),
    *("dl-per-sample", "dl-per-sample-w2", "tf-classic", "loader-numpy", "loader-grouped"),
)

PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    "classic": (
        "which loop is fastest for 1000 epochs of 300,000 samples at batch 300: pure Python, "
        "NumPy, DataLoader (0 and 2 workers), tf.data, the Loader; times --rounds epochs of "
        "each and multiplies (--epochs 1000 times all of them)",
        {"workload": "index", "variants": ",".join(CLASSIC), "step_ms": 0.0, "transfer": False}
        | {"project_epochs": 1000},
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
    add, on_off = parser.add_argument, argparse.BooleanOptionalAction
    add("--preset", choices=sorted(PRESETS), help="classic: " + PRESETS["classic"][0])
    add("--device", help="cpu, cuda or cuda:N (default: the best one present)")
    add(
        "--workload",
        default=",".join(DEFAULT_WORKLOADS),
        help="index, tabular, images, tokens, mix, augment, bucket, a comma list, or all "
        "(default: the first three; tokens, variable-length documents, mix, the tabular rows in "
        "sources mixed by weight, augment, a random resized crop + flip + normalise of 256 x 256 "
        "images, and bucket, rows read from a local S3 server with 20 ms a request, have "
        "variants and peers of their own; all: every one but augment and bucket, which run when "
        "named)",
    )
    add("--backends", help="comma list of numpy, torch, jax, tf (default: every installed one)")
    add("--variants", help=f"comma list of variant names or globs ({BASELINE} always runs)")
    add("--skip", help="variant names or globs to leave out (e.g. '*-w2')")
    add("--rounds", type=int, default=5, help="timed rounds per variant, interleaved (5)")
    add("--epochs", type=int, help="timed epochs per variant, spread over the rounds")
    add("--warmup", type=int, default=1, help="warm-up rounds (1)")
    bounded = "longer epochs: timed on their first batches, scaled; 0: whole epochs (0.25)"
    add("--max-epoch-s", type=float, default=0.25, help=bounded)
    add("--slow-batches", type=int, default=50, help="batches per round, always-bounded loops (50)")
    add("--step-ms", type=float, default=0.5, help="step section: model step (0.5; 0: off)")
    add("--step-workload", default="tabular,images", help="its workloads (tabular,images)")
    add("--step-batches", type=int, default=100, help="its batches per round (100)")
    add("--transfer", action=on_off, help="transfer by batch size (default: on a GPU only)")
    docs = "tokens workload: documents (20,000; 600 at --quick; the full corpus is 200,000)"
    add("--docs", type=int, help=docs)
    add("--seed", type=int, default=0, help="seed of every order (0)")
    add("--out", type=Path, help="results directory (default: ./looptoolkit-results)")
    add("--reference", action="store_true", help=REFERENCE_HELP)
    add("--plot", action=on_off, default=True, help="write the PNG chart (needs matplotlib)")
    add("--quick", action="store_true", help="tiny sizes, few rounds: a smoke test")
    verbose = "print every table on screen too: the variants, the step and transfer sections, "
    verbose += "the targets with their notes (default: in the files only)"
    add("--verbose", action="store_true", help=verbose)
    parser.set_defaults(project_epochs=None)
    args = parser.parse_args(argv)
    if args.preset:  # its flags as defaults: a flag given wins
        parser.set_defaults(**PRESETS[args.preset][1])
        args = parser.parse_args(argv)
    if args.quick:  # tiny sizes, few rounds
        caps = {"rounds": 2, "step_batches": 20, "slow_batches": 10, "max_epoch_s": 0.2}
        for key, cap in caps.items():
            setattr(args, key, min(getattr(args, key), cap))
    for name in ("rounds", "warmup", "slow_batches", "step_batches", "epochs", "docs"):
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
    """A comma list's items (None stays None)."""
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]


def load_backends(
    wanted: list[str] | None, progress: Progress | None = None
) -> tuple[list[str], dict[str, str]]:
    """Import the wanted backends quietly: those that import and have a kit, why the others not."""
    from looptoolkit.adapters import BACKENDS, get_backend

    present: list[str] = []
    skipped: dict[str, str] = {}
    for name, (_, module, _) in BACKENDS.items():
        if wanted is None or name in wanted:
            if progress is not None:
                progress.stage(f"importing {module}")
            try:
                quiet_import(module)
                get_backend(name)
                kit(name)
                present.append(name)
            except (ImportError, ValueError) as e:
                skipped[name] = str(e)
    return present, skipped


def _device(device: str | None, backends: list[str]) -> str:
    """``--device`` checked, or else ``"cuda"`` when a backend sees a CUDA GPU, else ``"cpu"``."""
    if device is not None:
        name, _, index = device.partition(":")
        if name not in ("cpu", "cuda") or (index and not index.isdigit()):
            raise ValueError(f"`--device` must be cpu, cuda or cuda:N, got {device!r}.")
        if name == "cpu":
            return device
    for gpu in (kit(name).gpu for name in backends):
        with contextlib.suppress(RuntimeError):
            if gpu is not None and gpu():
                return device or "cuda"
    if device is not None:
        raise ValueError(f"`--device cuda`: none of {', '.join(backends)} sees a CUDA GPU here.")
    return "cpu"


def _intro(args: argparse.Namespace, device: str, out: Path, backends: list[str]) -> str:
    """What the run does, where its results go."""
    n = args.project_epochs
    lines = [
        f"looptoolkit compare on {device} ({', '.join(backends)}); results go to {out}/.",
        f"Preset {args.preset}: {PRESETS[args.preset][0]}." if args.preset else "",
        f"Each loop: {args.epochs or args.rounds} timed epoch(s), interleaved; slower than "
        f"{args.max_epoch_s:g} s per epoch: timed on its first batches, scaled (marked *)"
        + ("; on bucket whole epochs." if "bucket" in args.workload.split(",") else "."),
        f"The {n}-epoch figures multiply the median epoch (add --epochs {n} --max-epoch-s 0 to "
        "time them all; that takes hours)."
        if n
        else "",
    ]
    return "\n".join(wrap(line) for line in lines if line)


# The flags of every workload's timing (Settings), then all the flags kept in the results.
_TIMING = ("rounds", "epochs_per_round", "warmup", "seed", "max_epoch_s", "slow_batches")
_RECORDED = (*_TIMING, "step_ms", "step_workload", "step_batches", "quick", "preset", "docs")


def _workload(
    result: Run, name: str, args: argparse.Namespace, settings: Settings, progress: Progress
) -> None:
    """Check and time every variant on workload ``name``, then its step section when asked."""
    progress.stage(f"{name}: building the data")
    w = make_workload(
        name, quick=args.quick, seed=args.seed, rows=args.docs if name == "tokens" else None
    )
    if w.kind == "bucket":  # whole epochs: a bounded one would hide the read-ahead's start
        settings = dataclasses.replace(settings, max_epoch_s=0.0)
    try:
        entries = run_workload(w, settings, progress)
    except BaseException:
        w.close()
        raise
    rows = [e.row for e in entries]
    info = {"description": w.description, "n": w.n, "bytes": w.nbytes}
    if w.kind == "bucket":  # rows/s, what each loop fetched; ratios to the local grouped epoch
        from looptoolkit.bench.variants.bucket import BUCKET_BASELINE

        title = f"{name} ({result.device}): {w.description}, chunks of {w.info['chunk']:,} rows; "
        title += f"{w.num_batches} batches/epoch"
        info |= w.info | {"convert_s": dict(w.resource.convert_s)}
        group = Group(name, title, rows, "epoch", BUCKET_BASELINE, w.num_batches, info)
    elif w.kind == "augment":  # images/s; ratios to the Loader in the loop's own process
        from looptoolkit.bench.variants.augment import AUGMENT_BASELINE, PIPELINE, draw_share

        title = f"{name} ({result.device}): {w.description}, {PIPELINE}; {w.num_batches} "
        title += "batches/epoch"
        info |= {"images": w.n, "draw": draw_share(w.data, w.batch_size)}
        group = Group(name, title, rows, "epoch", AUGMENT_BASELINE, w.num_batches, info)
    elif w.kind != "documents":
        title = f"{name} ({result.device}): {w.description}; {w.num_batches} batches/epoch"
        group = Group(name, title, rows, "epoch", BASELINE, w.num_batches, info)
    else:  # each row against its own batching's floor, batches per epoch its own
        title = f"{name} ({result.device}): {w.description}; each row against its floor"
        group = Group(name, title, rows, "epoch", None, 0, info | w.info)
    result.groups.append(group)
    if args.verbose and len(result.groups) == 1:
        progress.emit(f"\n{render.legend(result.groups)}\n{wrap(report.CHECK_LEGEND)}")
    progress.emit("\n" + report.workload_text(group, args.project_epochs, verbose=args.verbose))
    if name in (args.step_workload or "").split(","):
        focus = STEP_FOCUS.get(name) if settings.patterns is None else None
        step = Step(args.step_ms, result.device)
        steps = run_step(w, entries, settings, step, args.step_batches, progress, focus)
        result.extras["step"] += [{"workload": name, **row} for row in steps]
        if args.verbose:
            progress.emit("\n" + report.step_table(result, name).text())
    for entry in entries:
        entry.close()
    w.close()
    del entries, w
    gc.collect()


def run(argv: Sequence[str] | None = None) -> int:
    """Run ``looptoolkit compare`` with command-line arguments ``argv``; return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    quiet_env()
    # A bounded round stops each epoch at its first batches on purpose, over and over.
    warnings.filterwarnings("ignore", category=RepeatedEpochWarning)
    progress = Progress()
    try:
        names = list(ALL_WORKLOADS) if args.workload == "all" else _split(args.workload) or []
        if unknown := [name for name in names if name not in WORKLOADS]:
            known = ", ".join(WORKLOADS)
            raise ValueError(f"`--workload`: unknown workload {unknown[0]!r}; known: {known}, all.")
        out = results_dir(args.out, reference=args.reference)
        backends, skipped = load_backends(_split(args.backends), progress)
        device = _device(args.device, backends)
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
    # no step section on documents, the mixtures, augment (their peers are per-sample loops), nor
    # bucket (its loops wait on a server)
    fallback = [w for w in names[-1:] if w not in ("tokens", "mix", "augment", "bucket")]
    steps = [w for w in _split(args.step_workload) or [] if w in names] or fallback
    args.step_workload = ",".join(steps) if args.step_ms > 0 else None
    only = [] if gpu else [v.name for v in variants(backends) if v.accelerator]
    extras: dict[str, Any] = {"step": [], "skipped_backends": skipped, "accelerator_only": only}
    recorded = {key: getattr(args, key) for key in (*_RECORDED, "project_epochs")}
    command = " ".join(["looptoolkit compare", *argv])
    result = Run("compare", device, command, {}, recorded, [], extras=extras)
    for name in names:
        _workload(result, name, args, settings, progress)
    if args.transfer or (args.transfer is None and gpu):
        from looptoolkit.bench.transfer_sections import by_batch_size, sweep_table

        progress.stage("transfer of an images batch by batch size")
        extras["transfer"] = by_batch_size(device, args.quick, args.seed, progress)
        if args.verbose:
            progress.emit("\n" + sweep_table(extras["transfer"]).text())
    own_rows = {"mix", "augment", "bucket"}
    if judged := {"tabular", "tokens", *own_rows} & {g.name for g in result.groups}:
        # the mix, augment and bucket rows by "<workload>:<name>": mix has a loader-numpy of its own
        named = judged - own_rows
        values = {r.name: r.median_s for g in named for r in result.group(g).rows if r.timed}
        for own in own_rows & judged:
            values |= {f"{own}:{r.name}": r.median_s for r in result.group(own).rows if r.timed}
        if "bucket" in judged:  # bytes fetched per byte used, first batches, their bound
            from looptoolkit.bench.variants.bucket import bucket_values

            values |= bucket_values(result.group("bucket"))
        if "augment" in judged:  # the keyed draw and the ops, ms a batch
            draw = result.group("augment").info["draw"]
            values |= {"augment:draw": draw["draw_ms"], "augment:ops": draw["ops_ms"]}
        if "tokens" in judged:  # each tokens row over its floor: the faster hand loop
            group = result.group("tokens")
            for r in group.rows:
                if r.timed and r.floor and (floor := group.fastest(r.floor)) is not None:
                    values[f"floor:{r.name}"] = floor.median_s
        for row in extras["step"]:
            if "error" not in row and row["workload"] == "tabular":
                values[f"wait:{row['name']}"] = row["wait_ms_per_batch"]
                values[f"step:{row['name']}"] = row["step_ms_per_batch"]
        result.verdicts = evaluate("compare", values, gpu=gpu, judged=not args.quick)
        if args.verbose:
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
    progress.emit("\n" + report.closing(result, [*files, *charts], progress.elapsed()))
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
