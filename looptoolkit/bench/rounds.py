"""A workload's section of ``looptoolkit compare``: check each variant, bound slow ones, time."""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import importlib.util
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from looptoolkit.bench.check import Check, check_batches, host_leaves
from looptoolkit.bench.check_augment import check_augment
from looptoolkit.bench.check_bucket import check_bucket
from looptoolkit.bench.check_documents import check_documents
from looptoolkit.bench.check_mixture import check_mixture
from looptoolkit.bench.progress import Progress
from looptoolkit.bench.results import Row
from looptoolkit.bench.timing import CudaEventClock, interleave
from looptoolkit.bench.variants import BASELINE, Context, Variant, kit, variants
from looptoolkit.bench.workloads import Workload

__all__ = ["Entry", "Record", "Settings", "Step", "epoch_round", "run_step", "run_workload"]


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


def selected(name: str, patterns: list[str] | None, skip: list[str] | None = None) -> bool:
    """Whether ``--variants`` / ``--skip`` globs keep ``name`` (the baseline always runs)."""

    def hit(globs: list[str] | None) -> bool:
        return any(fnmatch.fnmatchcase(name, g) for g in globs or [])

    return name == BASELINE or ((patterns is None or hit(patterns)) and not hit(skip))


def sync_fn(device: str, backends: Iterable[str]) -> Callable[[], None] | None:
    """Waits for these backends' accelerator before a clock is read (None on the CPU)."""
    from looptoolkit.adapters import get_backend
    from looptoolkit.device._move import parse_device

    loaded = [get_backend(b) for b in backends] if device != "cpu" else []
    target = parse_device(device) if loaded else None

    def sync() -> None:
        for backend in loaded:
            with contextlib.suppress(RuntimeError):
                backend.synchronize(target)

    return sync if loaded else None


class Step:
    """A synthetic model step of ``ms`` ms: a sleep on the host, a calibrated spin on CUDA."""

    def __init__(self, ms: float, device: str) -> None:
        self.seconds, self._cycles = ms / 1000.0, 0
        if device != "cpu" and ms > 0:
            import torch

            self._cuda, clock = torch.cuda, CudaEventClock()
            torch.cuda._sleep(1_000_000)  # warm up
            clock.start()
            torch.cuda._sleep(1_000_000)
            self._cycles = int(1_000_000 / max(clock.stop() * 1e3, 1e-3) * ms)

    def __call__(self) -> None:
        """Take one step."""
        if self._cycles:
            self._cuda._sleep(self._cycles)
            # The loop's own stream only: a device-wide sync would also wait for the
            # copies of later batches on the prefetch side stream, which it should overlap.
            self._cuda.current_stream().synchronize()
        elif self.seconds > 0:
            time.sleep(self.seconds)  # releases the GIL, as a native step does


_END = object()  # what next() gives at the end of an epoch


def _close(iterator: Any) -> None:
    """Close a generator, ignoring what closing raises."""
    with contextlib.suppress(Exception):
        iterator.close()


@dataclass
class Record:
    """What a variant's rounds leave besides their seconds: (wait, step) per batch, an error."""

    per_batch: list[tuple[float, float]] = field(default_factory=list)
    error: str | None = None


def epoch_round(
    pipeline: Iterable[Any],
    record: Record,
    epochs: int,
    limit: int | None,
    num_batches: int,
    ready: Callable[[Any], None] | None = None,
    step: Callable[[], None] | None = None,
    sync: Callable[[], None] | None = None,
) -> Callable[[], float]:
    """One round of ``pipeline``: seconds per epoch over ``epochs`` epochs of ``limit`` batches.

    A bounded epoch is scaled to ``num_batches``: time to its first batch + steady per-batch time.
    Without a ``step`` the batches are taken in C (nothing per batch beyond ``next()``, ``ready``);
    with one, each batch's wait and step (the first left out) go to ``record``. An error goes
    there too and ends the variant's timing.
    """
    clock, rest = time.perf_counter, None if limit is None else max(limit, 1) - 1

    def epoch() -> tuple[float, float, float, int]:
        """One epoch: its seconds (scaled), waiting and stepping after the first batch, batches."""
        begin, k, first, wait, in_step = clock(), 0, 0.0, 0.0, 0.0
        iterator = iter(pipeline)
        batch = next(iterator, _END)
        if batch is not _END:
            if ready is not None:
                ready(batch)
            k, first, others = 1, clock() - begin, islice(iterator, rest)
            del batch
            if step is None:  # the others counted in C: (2, batch), (3, batch), ...
                last = deque(
                    enumerate(others if ready is None else map(ready, others), 2), maxlen=1
                )
                k = last[0][0] if last else 1
            else:
                step()
                mark = clock()
                for batch in others:
                    if ready is not None:
                        ready(batch)
                    got = clock()
                    step()
                    done = clock()
                    k, wait, in_step, mark = k + 1, wait + got - mark, in_step + done - got, done
        if sync is not None:
            sync()
        elapsed = clock() - begin
        _close(iterator)
        if 1 < k < num_batches:
            elapsed = first + (elapsed - first) * (num_batches - 1) / (k - 1)
        return elapsed, wait, in_step, max(k - 1, 0)

    def one_round() -> float:
        if record.error is not None:
            return 0.0
        try:
            figures = [epoch() for _ in range(epochs)]
        except Exception as e:
            record.error = f"{type(e).__name__}: {e}"
            return 0.0
        seconds, wait, in_step, counted = (sum(x) for x in zip(*figures, strict=True))
        if step is not None:
            record.per_batch.append((wait / max(counted, 1), in_step / max(counted, 1)))
        return seconds / epochs

    return one_round


@dataclass
class Entry:
    """One variant on one workload: its result row, its pipeline while it is timed, its bound."""

    variant: Variant
    row: Row
    pipeline: Any = None
    limit: int | None = None
    record: Record = field(default_factory=Record)

    def batches(self, workload: Workload) -> int:
        """Batches per epoch: the workload's; on documents the loop's ``len()`` (its batching)."""
        if workload.kind != "documents":
            return workload.num_batches
        try:
            return len(self.pipeline) or workload.num_batches
        except TypeError:
            return workload.num_batches

    def close(self) -> None:
        """Stop the pipeline's DataLoader workers now (not at exit) and drop it."""
        shutdown = getattr(getattr(self.pipeline, "_iterator", None), "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
        self.pipeline = None


def _check(entry: Entry, workload: Workload, settings: Settings, data: dict[str, Any]) -> None:
    """Build and check ``entry``'s loop; bound it when a warm epoch takes too long."""
    v, row, budget = entry.variant, entry.row, settings.max_epoch_s
    if v.backend not in data:
        tree = kit(v.backend).data(workload.data, settings.device)
        data[v.backend] = (tree, host_leaves(tree))
    ctx = Context(workload, data[v.backend][0], settings.device, settings.seed)
    entry.limit = settings.slow_batches if v.slow else None
    try:
        entry.pipeline = v.factory(ctx)
        if workload.kind == "documents":
            check = check_documents(v, entry.pipeline, ctx, limit=entry.limit)
        elif workload.kind == "augment":
            check = check_augment(v, entry.pipeline, ctx, limit=entry.limit)
        elif workload.kind == "bucket":
            check = check_bucket(v, entry.pipeline, ctx, limit=entry.limit)
        elif workload.kind == "mixture":
            check = check_mixture(v, entry.pipeline, ctx, data[v.backend][1], limit=entry.limit)
        else:
            check = check_batches(v, entry.pipeline, ctx, data[v.backend][1], limit=entry.limit)
    except Exception as e:
        check = Check(False, "error while checking", 0, f"{type(e).__name__}: {e}")
    row.check, row.extra = check.how, row.extra | check.extra
    if not check.ok:
        row.status, row.detail = "failed", check.detail
        entry.close()
        return
    if v.slow or budget <= 0:
        return
    # A warm probe epoch stopped at the budget: nearly a whole epoch in it, time whole epochs.
    ready, done, deadline = kit(v.backend).ready, 0, time.perf_counter() + budget
    iterator = iter(entry.pipeline)
    try:
        for batch in iterator:
            if ready is not None:
                ready(batch)
            done += 1
            if time.perf_counter() > deadline:
                break
    except Exception as e:
        entry.record.error = f"{type(e).__name__}: {e}"
    _close(iterator)
    if done < 0.75 * entry.batches(workload):
        entry.limit = max(settings.slow_batches, done)
        if entry.limit >= entry.batches(workload):  # the bound is the whole epoch: none
            entry.limit = None


def _time(
    entries: list[Entry], s: Settings, w: Workload, progress: Progress | None, step: Step | None
) -> list[Row]:
    """Time ``entries`` interleaved: ``s.rounds`` rounds of an epoch each (``step``: bounded)."""
    syncs = {b: sync_fn(s.device, [b]) for b in {e.variant.backend for e in entries}}
    calls = []
    for e in entries:
        b = e.variant.backend
        args = (s.epochs_per_round, e.limit, e.batches(w), kit(b).ready, step, syncs[b])
        calls.append((e.variant.name, epoch_round(e.pipeline, e.record, *args)))
    label = f"{w.name}: timing" if step is None else f"{w.name}, step of {step.seconds * 1e3:g} ms"
    if progress is not None:
        progress.stage(f"{label}: {len(calls)} loops, {s.warmup} warm-up + {s.rounds} rounds")
    return interleave(calls, rounds=s.rounds, warmup=s.warmup, progress=progress, label=label)


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (found without importing it; its parents may be)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package is missing
        return False


def run_workload(
    workload: Workload, settings: Settings, progress: Progress | None = None
) -> list[Entry]:
    """Build, check and time every applicable variant on ``workload``.

    A variant whose ``needs`` are not all installed is left out, or (``listed``) kept as a
    row of status ``"not installed"``.
    """
    s, name = settings, workload.name
    entries, missing = [], []
    for v in variants(s.backends):
        if not (selected(v.name, s.patterns, s.skip) and workload.runs(v)):
            continue
        # Accelerator-only variants are not run on the CPU (listed once in the results instead).
        if v.accelerator and s.device == "cpu":
            continue
        entry = Entry(v, Row(v.name, v.label, v.backend, v.floor))
        if absent := [module for module in v.needs if not installed(module)]:
            if v.listed:
                entry.row.status, entry.row.detail = "not installed", ", ".join(absent)
                missing.append(entry)
            continue
        entries.append(entry)
    if progress is not None:
        progress.stage(f"{name}: checking {len(entries)} variants")
    data: dict[str, Any] = {}
    for i, e in enumerate(entries):
        if progress is not None:
            progress.step(f"{name}: checking {e.variant.name} ({i + 1}/{len(entries)})")
        _check(e, workload, s, data)
    timed = [e for e in entries if e.pipeline is not None]
    for e, timing in zip(timed, _time(timed, s, workload, progress, None), strict=True):
        if e.record.error is not None:
            e.row.status, e.row.detail = "error", e.record.error
        else:
            e.row.rounds_s, e.row.bounded = timing.rounds_s, e.limit
    return entries + missing


def run_step(
    workload: Workload,
    entries: list[Entry],
    settings: Settings,
    step: Step,
    batches: int,
    progress: Progress | None = None,
    patterns: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Each timed loop (not floors, narrowed by ``patterns``): ``batches`` a round, each stepped."""
    timed = [e for e in entries if e.row.timed and not e.variant.is_floor]
    timed = [e for e in timed if selected(e.variant.name, patterns)]
    rounds = max(2, min(settings.rounds, 3))
    brief = dataclasses.replace(settings, rounds=rounds, warmup=1, epochs_per_round=1)
    for e in timed:  # the step section's bound (the row keeps the epoch's)
        e.limit = batches
    _time(timed, brief, workload, progress, step)
    rows: list[dict[str, Any]] = []
    for e in timed:
        row: dict[str, Any] = {"name": e.variant.name, "backend": e.variant.backend}
        rows.append(row)
        if e.record.error is not None:
            row["error"] = e.record.error
            continue
        per_batch = e.record.per_batch[1:]  # the warm-up round left out
        total = statistics.median(w + s for w, s in per_batch)
        wait, stepped = (statistics.median(x) for x in zip(*per_batch, strict=True))
        ms = {"total": total, "step": stepped, "wait": wait, "added": total - stepped}
        row["batches_per_round"] = batches
        row |= {f"{key}_ms_per_batch": value * 1e3 for key, value in ms.items()}
        row["wait_fraction"] = wait / total if total > 0 else 0.0
        row["wait_of_step"] = wait / stepped if stepped > 0 else None
    return rows
