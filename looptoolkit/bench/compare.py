"""``looptoolkit compare``: every loop variant x backend x workload, checked, then timed.

For each workload (``index``, ``tabular``, ``images``) and each installed
backend, every variant of :mod:`looptoolkit.bench.variants` is built and its
first epoch is checked against a NumPy gather of the same order (or, for loops
with their own order, for coverage and row alignment); a variant that fails is
reported and not timed. The variants are then timed interleaved (A B C A B C
...) after warm-up, one epoch per round, and reported as ms/epoch median
[min, max], batches/s and the ratio to the NumPy manual loop. A loop whose
epoch takes longer than ``--max-epoch-s`` is timed on a bounded number of
batches per round and scaled to an epoch (time to the first batch, plus the
steady per-batch time for the rest), and the table says so.

Two more sections: a synthetic model step of ``--step-ms`` after every batch,
showing the time each loop adds to training and its data wait (where prefetch
overlaps with the step), and the transfer time of an ``images`` batch by batch
size, uint8 copied then cast on the device against cast to float16 then copied.

Results: a rich table on the terminal; ``compare-<device>.json``, ``.md``,
``.png`` (batches/s) and ``-transfer.png`` under ``--out``.

Run with ``looptoolkit compare`` or ``python -m looptoolkit.bench.compare``.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import gc
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from looptoolkit import tree as _tree
from looptoolkit.bench import report
from looptoolkit.bench.timing import Timing, interleave, machine_info, write_results
from looptoolkit.bench.variants import (
    BACKEND_ORDER,
    BASELINE,
    VARIANTS,
    WORKLOADS,
    Context,
    Variant,
    Workload,
    backend_data,
    make_workload,
)

__all__ = ["main", "parse_args", "run"]

_FRAMEWORK = {"numpy": "numpy", "torch": "torch", "jax": "jax", "tf": "tensorflow"}
DEFAULT_OUT = Path("benchmarks") / "results"


# -- command line ----------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``looptoolkit compare`` flags."""
    parser = argparse.ArgumentParser(
        prog="looptoolkit compare",
        description="Time every loop variant x backend x workload, checked first, interleaved.",
    )
    parser.add_argument(
        "--device", default=None, help="cpu, cuda or cuda:N (default: the best one present)"
    )
    parser.add_argument(
        "--workload",
        default="all",
        help="index, tabular, images, a comma list, or all (default: all)",
    )
    parser.add_argument(
        "--backends",
        default=None,
        help="comma list of numpy, torch, jax, tf (default: every installed one)",
    )
    parser.add_argument(
        "--variants",
        default=None,
        help="comma list of variant names or globs (numpy-manual always runs)",
    )
    parser.add_argument(
        "--skip",
        default=None,
        help="comma list of variant names or globs to leave out (e.g. '*-w2')",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="timed rounds per variant, interleaved (default: 5)"
    )
    parser.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="timed epochs per variant, spread over the rounds "
        "(default: one per round; the seed talk ran 1000)",
    )
    parser.add_argument("--warmup", type=int, default=1, help="warm-up rounds (default: 1)")
    parser.add_argument(
        "--max-epoch-s",
        type=float,
        default=0.5,
        help="a loop whose epoch takes longer is timed on a bounded number of "
        "batches per round and scaled; 0 times whole epochs (default: 0.5)",
    )
    parser.add_argument(
        "--slow-batches",
        type=int,
        default=50,
        help="batches per round for the always-bounded loops (default: 50)",
    )
    parser.add_argument(
        "--step-ms",
        type=float,
        default=0.5,
        help="synthetic model step after every batch in the step section; "
        "0 skips it (default: 0.5)",
    )
    parser.add_argument(
        "--step-workload", default="tabular", help="workload of the step section (default: tabular)"
    )
    parser.add_argument(
        "--step-batches",
        type=int,
        default=200,
        help="batches per round in the step section (default: 200)",
    )
    parser.add_argument(
        "--transfer",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time uint8 vs float16 transfer by batch size (images)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of every order (default: 0)")
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help=f"directory for JSON, Markdown and PNG (default: {DEFAULT_OUT})",
    )
    parser.add_argument(
        "--plot",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write the PNG charts (needs matplotlib)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes and few rounds: a smoke test, not a measurement",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds = min(args.rounds, 2)
        args.step_batches = min(args.step_batches, 20)
        args.slow_batches = min(args.slow_batches, 10)
        args.max_epoch_s = min(args.max_epoch_s, 0.2)
    for name in ("rounds", "warmup", "slow_batches", "step_batches"):
        minimum = 0 if name == "warmup" else 1
        if getattr(args, name) < minimum:
            parser.error(f"--{name.replace('_', '-')} must be >= {minimum}")
    if args.epochs is not None and args.epochs < 1:
        parser.error("--epochs must be >= 1")
    return args


def _split(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]


def best_device() -> str:
    """``"cuda"`` when torch or JAX sees a GPU, else ``"cpu"``."""
    with contextlib.suppress(ImportError):
        import torch

        if torch.cuda.is_available():
            return "cuda"
    with contextlib.suppress(ImportError, RuntimeError):
        import jax

        if any(d.platform == "gpu" for d in jax.devices()):
            return "cuda"
    return "cpu"


def _check_device(device: str) -> str:
    name, _, index = device.partition(":")
    if name not in ("cpu", "cuda") or (index and not index.isdigit()):
        raise ValueError(f"`--device` must be cpu, cuda or cuda:N, got {device!r}.")
    if name == "cuda" and best_device() != "cuda":
        raise ValueError("`--device cuda`: no CUDA GPU is visible to torch or JAX here.")
    return device


# -- backends --------------------------------------------------------------------


def load_backends(wanted: list[str] | None) -> tuple[list[str], dict[str, str]]:
    """Import the wanted backends; return those present and why the others are skipped."""
    from looptoolkit.adapters import get_backend

    present: list[str] = []
    skipped: dict[str, str] = {}
    for name in BACKEND_ORDER:
        if wanted is not None and name not in wanted:
            continue
        try:
            get_backend(name)
        except ImportError as e:
            skipped[name] = str(e)
            continue
        present.append(name)
    return present, skipped


def ready_fn(backend: str) -> Callable[[Any], None]:
    """Blocks until a batch of ``backend`` is computed (JAX dispatches asynchronously)."""
    if backend == "jax":
        import jax

        def ready(batch: Any) -> None:
            jax.block_until_ready(batch)

        return ready
    return _nothing


def _nothing(batch: Any = None) -> None:
    return None


def sync_fn(device: str, backends: Iterable[str]) -> Callable[[], None] | None:
    """Synchronises every backend's accelerator before a clock is read (None on CPU)."""
    if device == "cpu":
        return None
    from looptoolkit.adapters import get_backend
    from looptoolkit.device import parse_device

    target = parse_device(device)
    loaded = [get_backend(name) for name in backends if name != "numpy"]

    def sync() -> None:
        for backend in loaded:
            with contextlib.suppress(RuntimeError):
                backend.synchronize(target)

    return sync


class Step:
    """A synthetic model step of known length.

    On the host: ``time.sleep`` (it releases the GIL, as a real step running
    native code does, so a background prefetcher can work meanwhile). On CUDA:
    a spinning kernel of about that length (``torch.cuda._sleep``), waited for.
    The measured length of every step is what the tables subtract.
    """

    def __init__(self, ms: float, device: str) -> None:
        self.seconds = ms / 1000.0
        self._cycles = 0
        if device != "cpu" and ms > 0:
            import torch

            self._torch = torch
            self._cycles = self._calibrate(ms)

    def _calibrate(self, ms: float) -> int:
        torch = self._torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 1_000_000
        torch.cuda._sleep(cycles)  # warm up
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        per_ms = cycles / max(start.elapsed_time(end), 1e-3)
        return int(per_ms * ms)

    def __call__(self) -> None:
        if self._cycles:
            self._torch.cuda._sleep(self._cycles)
            self._torch.cuda.synchronize()
        elif self.seconds > 0:
            time.sleep(self.seconds)


# -- checking --------------------------------------------------------------------


def host_array(x: Any) -> np.ndarray:
    """A NumPy copy (or view) of an array of any framework, on any device."""
    if type(x).__module__.startswith("torch"):
        return np.asarray(x.detach().cpu().numpy())
    return np.asarray(x)


def host_leaves(tree: Any) -> dict[str, np.ndarray]:
    """The leaves of a batch as NumPy arrays, by key path."""
    leaves, spec = _tree.flatten(tree)
    return dict(zip(_tree.leaf_paths(spec), map(host_array, leaves), strict=True))


@dataclass
class Check:
    """The result of checking a variant's batches before timing it."""

    ok: bool
    how: str
    batches: int
    seconds: float
    detail: str = ""


def check_batches(
    variant: Variant,
    pipeline: Iterable[Any],
    ctx: Context,
    reference: dict[str, np.ndarray],
    *,
    limit: int | None = None,
) -> Check:
    """Check one epoch (or its first ``limit`` batches) of ``pipeline``.

    Exact variants must yield the NumPy gather of their Loader order, epoch 0,
    batch for batch (values and dtypes). Loops with their own order must yield
    full batches (the last may be partial), every row at most once (every row
    exactly once over a whole epoch), each leaf's rows matching the row ids.
    """
    from looptoolkit.bench.epochs import split_batches
    from looptoolkit.order import epoch_indices

    ready = ready_fn(variant.backend)
    convert = variant.convert
    got: list[dict[str, np.ndarray]] = []
    start = time.perf_counter()
    iterator = iter(pipeline)
    for batch in iterator:
        ready(batch)
        got.append(host_leaves(convert(batch) if convert else batch))
        if limit is not None and len(got) >= limit:
            break
    seconds = time.perf_counter() - start
    with contextlib.suppress(Exception):
        iterator.close()  # type: ignore[attr-defined]
    whole = limit is None or len(got) < limit
    batch_size = ctx.batch_size
    n = ctx.workload.n
    id_path = ctx.workload.id_path

    def fail(detail: str, how: str) -> Check:
        return Check(False, how, len(got), seconds, detail)

    if variant.shuffle is not None:
        how = f"exact: the Loader's batches (shuffle={variant.shuffle!r}, epoch 0)"
        expected = split_batches(epoch_indices(ctx.order(variant.shuffle), 0), batch_size)
        if whole and len(got) != len(expected):
            return fail(f"{len(got)} batches, expected {len(expected)}", how)
        for b, (batch, idx) in enumerate(zip(got, expected, strict=False)):
            if set(batch) != set(reference):
                return fail(f"batch {b} has leaves {sorted(batch)}, expected "
                            f"{sorted(reference)}", how)  # fmt: skip
            for path, leaf in reference.items():
                want = leaf[idx]
                have = batch[path]
                if have.dtype != want.dtype or not np.array_equal(have, want):
                    return fail(f"batch {b}: {path} differs from the reference "
                                f"({have.dtype}{list(have.shape)} vs "
                                f"{want.dtype}{list(want.shape)})", how)  # fmt: skip
        if not whole:
            how += f", first {len(got)} batches"
        return Check(True, how, len(got), seconds)

    how = "coverage: every row once, rows aligned with their ids"
    seen = np.zeros(n, dtype=bool)
    for b, batch in enumerate(got):
        if set(batch) != set(reference):
            return fail(f"batch {b} has leaves {sorted(batch)}, expected {sorted(reference)}", how)
        ids = batch[id_path].astype(np.int64)
        last = b == len(got) - 1 and whole
        if len(ids) != batch_size and not (last and 0 < len(ids) <= batch_size):
            return fail(f"batch {b} has {len(ids)} rows, batch size {batch_size}", how)
        if ids.min() < 0 or ids.max() >= n or seen[ids].any() or len(np.unique(ids)) != len(ids):
            return fail(f"batch {b} repeats rows or has rows out of range", how)
        seen[ids] = True
        for path, leaf in reference.items():
            have = batch[path]
            if have.dtype != leaf.dtype or not np.array_equal(have, leaf[ids]):
                return fail(f"batch {b}: {path} is not aligned with {id_path}", how)
    if whole and not seen.all():
        return fail(f"{int((~seen).sum())} rows never appeared in the epoch", how)
    if not whole:
        how += f", first {len(got)} batches"
    return Check(True, how, len(got), seconds)


# -- timing ----------------------------------------------------------------------


def probe(pipeline: Iterable[Any], ready: Callable[[Any], None], budget_s: float) -> int:
    """Run an epoch of ``pipeline`` until it ends or ``budget_s`` has passed; return its batches."""
    deadline = time.perf_counter() + budget_s
    done = 0
    iterator = iter(pipeline)
    for batch in iterator:
        ready(batch)
        done += 1
        if time.perf_counter() > deadline:
            break
    with contextlib.suppress(Exception):
        iterator.close()  # type: ignore[attr-defined]
    return done


@dataclass
class Record:
    """Per-round measurements of one variant, filled by its round function."""

    epoch_s: list[float] = field(default_factory=list)  # seconds per epoch (scaled if bounded)
    wait_s: list[float] = field(default_factory=list)  # waiting for batches, per batch
    step_s: list[float] = field(default_factory=list)  # in the step, per batch
    total_s: list[float] = field(default_factory=list)  # everything, per batch
    error: str | None = None


def round_fn(
    pipeline: Iterable[Any],
    record: Record,
    *,
    epochs: int,
    limit: int | None,
    num_batches: int,
    ready: Callable[[Any], None],
    step: Callable[[], None] | None,
    sync: Callable[[], None] | None,
    skip_first: bool = False,
) -> Callable[[], None]:
    """One round: ``epochs`` epochs of ``pipeline`` (each bounded to ``limit`` batches).

    A bounded epoch is scaled to ``num_batches``: the time to its first batch
    (which includes the epoch's set-up) plus the mean time of the others for
    the rest. ``skip_first`` leaves the first batch out of the per-batch
    figures (the step section reports the steady state).
    """
    clock = time.perf_counter

    def one_round() -> None:
        if record.error is not None:
            return
        epoch_total = wait = stepped = total = 0.0
        counted = 0
        try:
            for _ in range(epochs):
                begin = clock()
                iterator = iter(pipeline)
                k = 0
                first = 0.0
                mark = begin
                while True:
                    try:
                        batch = next(iterator)
                    except StopIteration:
                        break
                    ready(batch)
                    got = clock()
                    if k == 0:
                        first = got - begin
                    k += 1
                    spent = 0.0
                    if step is not None:
                        step()
                        spent = clock() - got
                    if k > 1 or not skip_first:
                        wait += got - mark
                        stepped += spent
                        total += clock() - mark
                        counted += 1
                    mark = clock()
                    if limit is not None and k >= limit:
                        break
                if sync is not None:
                    sync()
                elapsed = clock() - begin
                with contextlib.suppress(Exception):
                    iterator.close()  # type: ignore[attr-defined]
                if k < num_batches and k > 1:
                    elapsed = first + (elapsed - first) * (num_batches - 1) / (k - 1)
                epoch_total += elapsed
        except Exception as e:
            record.error = f"{type(e).__name__}: {e}"
            return
        counted = max(counted, 1)
        record.epoch_s.append(epoch_total / epochs)
        record.wait_s.append(wait / counted)
        record.step_s.append(stepped / counted)
        record.total_s.append(total / counted)

    return one_round


@dataclass
class Entry:
    """One variant on one workload: how it was checked and what it measured."""

    variant: Variant
    check: Check | None = None
    record: Record = field(default_factory=Record)
    limit: int | None = None
    skipped: str | None = None
    pipeline: Any = None

    def summary(self, warmup: int) -> dict[str, Any]:
        """JSON-ready figures (seconds), warm-up rounds dropped."""
        v = self.variant
        out: dict[str, Any] = {"name": v.name, "backend": v.backend, "label": v.label}
        if self.skipped is not None:
            out["skipped"] = self.skipped
            return out
        if self.check is not None:
            out["check"] = {"ok": self.check.ok, "how": self.check.how,
                            "batches": self.check.batches, "detail": self.check.detail}  # fmt: skip
        if self.record.error is not None:
            out["error"] = self.record.error
        epochs = self.record.epoch_s[warmup:]
        if epochs and self.record.error is None:
            timing = Timing(v.name, epochs)
            out.update(timing.summary())
            out["bounded_batches"] = self.limit
        return out


def _close(pipeline: Any) -> None:
    # DataLoader's persistent workers stop with their iterator; do it now, not at exit.
    iterator = getattr(pipeline, "_iterator", None)
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()


def _selected(variant: Variant, patterns: list[str] | None, skip: list[str] | None) -> bool:
    if variant.name == BASELINE:
        return True
    if skip is not None and any(fnmatch.fnmatchcase(variant.name, p) for p in skip):
        return False
    return patterns is None or any(fnmatch.fnmatchcase(variant.name, p) for p in patterns)


@dataclass
class Settings:
    """What every workload run needs from the command line."""

    device: str
    backends: list[str]
    patterns: list[str] | None
    skip: list[str] | None
    rounds: int
    epochs_per_round: int
    warmup: int
    max_epoch_s: float
    slow_batches: int
    seed: int


def run_workload(workload: Workload, settings: Settings) -> list[Entry]:
    """Build, check and time every applicable variant on ``workload``."""
    entries: list[Entry] = []
    data_by_backend: dict[str, Any] = {}
    accelerated = settings.device != "cpu"
    for variant in VARIANTS:
        if variant.backend not in settings.backends:
            continue
        if not _selected(variant, settings.patterns, settings.skip):
            continue
        if variant.workloads is not None and workload.name not in variant.workloads:
            continue
        if variant.accelerator and not accelerated:
            continue  # listed once in the results, not in every table
        entry = Entry(variant)
        entries.append(entry)
        missing = variant.missing()
        if missing is not None:
            entry.skipped = missing
            continue
        if variant.backend not in data_by_backend:
            data_by_backend[variant.backend] = backend_data(
                workload.data, variant.backend, settings.device
            )
        data = data_by_backend[variant.backend]
        ctx = Context(workload, data, settings.device, settings.seed)
        try:
            entry.pipeline = variant.factory(ctx)
            reference = host_leaves(data)
            limit = settings.slow_batches if variant.slow else None
            entry.check = check_batches(variant, entry.pipeline, ctx, reference, limit=limit)
        except Exception as e:
            entry.check = Check(False, "error while checking", 0, 0.0, f"{type(e).__name__}: {e}")
        if not entry.check.ok:
            _close(entry.pipeline)
            entry.pipeline = None
            continue
        if variant.slow:
            entry.limit = settings.slow_batches
        elif settings.max_epoch_s > 0 and entry.check.seconds > settings.max_epoch_s:
            # The check includes compilation and checking; a probe epoch, stopped at
            # the time budget, says whether a warm epoch fits.
            try:
                done = probe(entry.pipeline, ready_fn(variant.backend), settings.max_epoch_s)
            except Exception as e:
                entry.record.error = f"{type(e).__name__}: {e}"
                done = 0
            # Nearly a whole epoch in budget: time whole epochs, no scaling.
            if done < 0.75 * workload.num_batches:
                entry.limit = max(settings.slow_batches, done)

    timed = [e for e in entries if e.pipeline is not None]
    sync = sync_fn(settings.device, settings.backends)
    calls = [
        (
            e.variant.name,
            round_fn(
                e.pipeline,
                e.record,
                epochs=settings.epochs_per_round,
                limit=e.limit,
                num_batches=workload.num_batches,
                ready=ready_fn(e.variant.backend),
                step=None,
                sync=sync,
            ),
        )
        for e in timed
    ]
    if calls:
        interleave(calls, rounds=settings.rounds, warmup=settings.warmup, sync=sync,
                   description=f"{workload.name}: {len(calls)} variants")  # fmt: skip
    return entries


def run_step(
    workload: Workload, entries: list[Entry], settings: Settings, step: Step, batches: int
) -> list[dict[str, Any]]:
    """Time ``batches`` batches per round of each checked variant with a step after each."""
    timed = [e for e in entries if e.pipeline is not None and e.record.error is None]
    records = {e.variant.name: Record() for e in timed}
    sync = sync_fn(settings.device, settings.backends)
    calls = [
        (
            e.variant.name,
            round_fn(
                e.pipeline,
                records[e.variant.name],
                epochs=1,
                limit=batches,
                num_batches=workload.num_batches,
                ready=ready_fn(e.variant.backend),
                step=step,
                sync=sync,
                skip_first=True,
            ),
        )
        for e in timed
    ]
    rounds = max(2, min(settings.rounds, 3))
    if calls:
        label = f"step {step.seconds * 1000:g} ms: {len(calls)} variants"
        interleave(calls, rounds=rounds, warmup=1, sync=sync, description=label)
    rows: list[dict[str, Any]] = []
    for e in timed:
        record = records[e.variant.name]
        if record.error is not None:
            rows.append({"name": e.variant.name, "backend": e.variant.backend,
                         "error": record.error})  # fmt: skip
            continue
        total = float(np.median(record.total_s[1:]))
        wait = float(np.median(record.wait_s[1:]))
        stepped = float(np.median(record.step_s[1:]))
        rows.append({
            "name": e.variant.name,
            "backend": e.variant.backend,
            "batches_per_round": batches,
            "total_ms_per_batch": total * 1e3,
            "step_ms_per_batch": stepped * 1e3,
            "wait_ms_per_batch": wait * 1e3,
            "added_ms_per_batch": (total - stepped) * 1e3,
            "wait_fraction": wait / total if total > 0 else 0.0,
            "wait_of_step": wait / stepped if stepped > 0 else None,
        })  # fmt: skip
    return rows


# -- transfer by batch size ------------------------------------------------------


def run_transfer(device: str, quick: bool, seed: int) -> dict[str, Any]:
    """Time moving an ``images`` batch by batch size: uint8 then cast, vs cast then copy.

    On CPU there is no bus to cross: both paths are the host cast (and the
    allocation of the float16 result); on a GPU they are the real host-to-device
    copy of 1 or 2 bytes per pixel, with the cast on either side of it.
    """
    from looptoolkit.device import to_device

    sizes = [8, 32] if quick else [16, 32, 64, 128, 256, 512, 1024]
    reps = 3 if quick else 15
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, (max(sizes) * 2, 3, 64, 64), dtype=np.uint8)
    target: Any = "cpu"
    sync: Callable[[], None] = _nothing

    def buffer(size: int) -> np.ndarray:
        return np.empty((size, 3, 64, 64), dtype=np.uint8)

    if device != "cpu":
        import torch

        target = torch.device(device)
        sync = torch.cuda.synchronize

        def buffer(size: int) -> np.ndarray:
            # The batch is gathered into pinned memory, as the Loader's staging is.
            return torch.empty((size, 3, 64, 64), dtype=torch.uint8).pin_memory().numpy()

    policy = {np.uint8: np.float16}

    def uint8_then_cast(batch: np.ndarray) -> Any:
        return to_device(batch, target, dtype=policy)

    def cast_then_copy(batch: np.ndarray) -> Any:
        return to_device(batch.astype(np.float16), target)

    def uint8_only(batch: np.ndarray) -> Any:
        return to_device(batch, target)

    paths: dict[str, Callable[[np.ndarray], Any]] = {
        "uint8 copy, cast on the device": uint8_then_cast,
        "cast to float16, then copy": cast_then_copy,
    }
    if device != "cpu":
        paths["uint8 copy, no cast"] = uint8_only
    results: dict[str, list[float]] = {name: [] for name in paths}
    for size in sizes:
        idx = np.sort(rng.choice(len(pool), size, replace=False))
        batch = buffer(size)
        np.take(pool, idx, axis=0, out=batch)
        times: dict[str, list[float]] = {name: [] for name in paths}
        for rep in range(reps + 1):
            for name, fn in paths.items():
                sync()
                start = time.perf_counter()
                fn(batch)
                sync()
                if rep:  # the first repetition warms up
                    times[name].append(time.perf_counter() - start)
        for name in paths:
            results[name].append(float(np.median(times[name])) * 1e3)
    return {
        "device": device,
        "batch_sizes": sizes,
        "bytes_per_image_uint8": 3 * 64 * 64,
        "ms_per_batch": results,
        "note": "host cast only (no bus on CPU)" if device == "cpu" else "host-to-device",
    }


# -- the run ---------------------------------------------------------------------


def _workload_names(text: str) -> list[str]:
    if text == "all":
        return list(WORKLOADS)
    names = _split(text) or []
    for name in names:
        if name not in WORKLOADS:
            raise ValueError(f"`--workload`: unknown workload {name!r}; known: "
                             f"{', '.join(WORKLOADS)}, all.")  # fmt: skip
    return names


def run(argv: Sequence[str] | None = None) -> int:
    """Run ``looptoolkit compare`` with command-line arguments ``argv``; return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # Three frameworks share one GPU here: JAX would take 75% of its memory up
    # front and tf all of it; let both grow as they need instead.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    try:
        workload_names = _workload_names(args.workload)
        device = _check_device(args.device) if args.device else best_device()
    except ValueError as e:
        print(f"looptoolkit compare: error: {e}", file=sys.stderr)
        return 2
    wanted = _split(args.backends)
    backends, skipped_backends = load_backends(wanted)
    for name, why in skipped_backends.items():
        print(f"skipping backend {name}: {why}", file=sys.stderr)
    rounds = args.rounds
    epochs_per_round = 1
    if args.epochs is not None:
        rounds = min(rounds, args.epochs)
        epochs_per_round = -(-args.epochs // rounds)
    settings = Settings(
        device=device,
        backends=backends,
        patterns=_split(args.variants),
        skip=_split(args.skip),
        rounds=rounds,
        epochs_per_round=epochs_per_round,
        warmup=args.warmup,
        max_epoch_s=args.max_epoch_s,
        slow_batches=args.slow_batches,
        seed=args.seed,
    )
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    step_rows: list[dict[str, Any]] = []
    step_workload = args.step_workload if args.step_workload in workload_names else None
    if step_workload is None and workload_names:
        step_workload = workload_names[-1]
    for name in workload_names:
        workload = make_workload(name, quick=args.quick, seed=args.seed)
        entries = run_workload(workload, settings)
        results[name] = {
            "description": workload.description,
            "n": workload.n,
            "batch_size": workload.batch_size,
            "batches_per_epoch": workload.num_batches,
            "bytes": workload.nbytes,
            "variants": [e.summary(settings.warmup) for e in entries],
        }
        if args.step_ms > 0 and name == step_workload:
            step = Step(args.step_ms, device)
            step_rows = run_step(workload, entries, settings, step, args.step_batches)
        for entry in entries:
            _close(entry.pipeline)
            entry.pipeline = None
        del entries, workload
        gc.collect()
        _add_ratios(results[name])
    transfer = run_transfer(device, args.quick, args.seed) if args.transfer else None
    accelerator_only = [v.name for v in VARIANTS if v.accelerator and v.backend in backends]
    targets = report.evaluate_targets(results, step_rows, transfer, device)
    info = machine_info()
    info["command"] = " ".join(["looptoolkit compare", *argv])
    payload: dict[str, Any] = {
        "suite": "compare",
        "device": device,
        "machine": info,
        "settings": {
            "rounds": settings.rounds,
            "epochs_per_round": settings.epochs_per_round,
            "warmup": settings.warmup,
            "max_epoch_s": settings.max_epoch_s,
            "slow_batches": settings.slow_batches,
            "step_ms": args.step_ms,
            "step_workload": step_workload if step_rows else None,
            "step_batches": args.step_batches,
            "seed": settings.seed,
            "quick": args.quick,
        },
        "baseline": BASELINE,
        "skipped_backends": skipped_backends,
        "accelerator_only": [] if device != "cpu" else accelerator_only,
        "workloads": results,
        "step": step_rows,
        "transfer": transfer,
        "targets": targets,
        "wall_s": time.perf_counter() - started,
    }
    stem = f"compare-{device.replace(':', '')}"

    out = Path(args.out)
    files = write_results(out, stem, payload, "")
    charts: list[Path] = []
    if args.plot:
        try:
            charts = report.plot(payload, out, stem)
        except ImportError as e:
            print(f"no charts: {e}", file=sys.stderr)
    payload["charts"] = [p.name for p in charts]
    files = write_results(out, stem, payload, report.markdown(payload))
    report.print_tables(payload)
    payload_wall = payload["wall_s"]
    print(f"wrote {', '.join(str(p) for p in [*files, *charts])} ({payload_wall:.0f} s)")
    return 0


def _add_ratios(result: dict[str, Any]) -> None:
    rows = result["variants"]
    base = next((r for r in rows if r["name"] == BASELINE and "median_s" in r), None)
    for row in rows:
        if "median_s" not in row:
            continue
        row["ms_per_epoch"] = row["median_s"] * 1e3
        row["batches_per_s"] = result["batches_per_epoch"] / row["median_s"]
        row["vs_baseline"] = row["median_s"] / base["median_s"] if base else None


def main() -> None:
    """``python -m looptoolkit.bench.compare``."""
    raise SystemExit(run())


if __name__ == "__main__":
    main()
