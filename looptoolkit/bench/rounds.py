"""Epoch rounds of ``looptoolkit compare``: check each variant, bound the slow ones, time them.

A round is one epoch (scaled when bounded), interleaved with the workload's other variants by
[`interleave`][looptoolkit.bench.timing.interleave]; with a synthetic model step after every
batch it also records each batch's wait, step and total.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from looptoolkit.bench.check import Check, check_batches, host_leaves
from looptoolkit.bench.results import Row
from looptoolkit.bench.timing import interleave
from looptoolkit.bench.variants import BASELINE, Context, Variant, kit, variants
from looptoolkit.bench.workloads import Workload

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = ["Entry", "Record", "Settings", "Step", "epoch_round", "run_step", "run_workload"]


_END = object()  # what next() gives at the end of an epoch


def sync_fn(device: str, backends: Iterable[str]) -> Callable[[], None] | None:
    """Waits for these backends' accelerator before a clock is read (None on the CPU)."""
    from looptoolkit.adapters import get_backend
    from looptoolkit.device import parse_device

    loaded = [get_backend(b) for b in backends] if device != "cpu" else []
    if not loaded:
        return None
    target = parse_device(device)

    def sync() -> None:
        for backend in loaded:
            with contextlib.suppress(RuntimeError):
                backend.synchronize(target)

    return sync


class Step:
    """A synthetic model step of ``ms`` ms: a sleep on the host, a calibrated spin on CUDA."""

    def __init__(self, ms: float, device: str) -> None:
        self.seconds, self._cycles = ms / 1000.0, 0
        if device != "cpu" and ms > 0:
            import torch

            self._cuda = torch.cuda
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            torch.cuda._sleep(1_000_000)  # warm up
            start.record()
            torch.cuda._sleep(1_000_000)
            end.record()
            end.synchronize()
            self._cycles = int(1_000_000 / max(start.elapsed_time(end), 1e-3) * ms)

    def __call__(self) -> None:
        """Take one step."""
        if self._cycles:
            self._cuda._sleep(self._cycles)
            self._cuda.synchronize()
        elif self.seconds > 0:
            time.sleep(self.seconds)  # releases the GIL, as a native step does


def _close(iterator: Any) -> None:
    """Close a generator, ignoring what closing raises."""
    with contextlib.suppress(Exception):
        iterator.close()


def probe(pipeline: Iterable[Any], ready: Callable[[Any], None] | None, budget_s: float) -> int:
    """Run an epoch of ``pipeline`` until it ends or ``budget_s`` has passed; return its batches."""
    deadline, done, iterator = time.perf_counter() + budget_s, 0, iter(pipeline)
    for batch in iterator:
        if ready is not None:
            ready(batch)
        done += 1
        if time.perf_counter() > deadline:
            break
    _close(iterator)
    return done


@dataclass
class Record:
    """Per-batch figures of one variant, a value per round: waiting, in the step, both."""

    wait_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    total_s: list[float] = field(default_factory=list)
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
    """One round: ``epochs`` epochs of ``pipeline``, each bounded to ``limit`` batches.

    The round returns seconds per epoch; a bounded epoch is scaled to ``num_batches`` (the time to
    its first batch, plus the mean of the others for the rest). Without a ``step`` the clock is
    read only at the epoch's ends and its first batch: nothing per batch beyond ``next()``. With
    one, each batch's wait and step are timed, the first batch left out. An error is recorded in
    ``record`` and ends the variant's timing.
    """
    clock, stop = time.perf_counter, -1 if limit is None else max(limit, 1)

    def lean(iterator: Iterator[Any], begin: float) -> tuple[int, float, float, float, int]:
        """Batches only: the clock read at the first batch and at the end, nothing per batch."""
        batch = next(iterator, _END)
        if batch is _END:
            return 0, 0.0, 0.0, 0.0, 0
        if ready is not None:
            ready(batch)
        first, k = clock() - begin, 1
        del batch
        if k != stop:
            if ready is None:
                for _ in iterator:
                    k += 1
                    if k == stop:
                        break
            else:
                for batch in iterator:
                    ready(batch)
                    k += 1
                    if k == stop:
                        break
        return k, first, clock() - begin, 0.0, k

    def stepped(iterator: Iterator[Any], begin: float) -> tuple[int, float, float, float, int]:
        """Each batch's wait and step timed, the first batch left out (the steady state)."""
        assert step is not None
        k, first, wait, in_step, mark = 0, 0.0, 0.0, 0.0, begin
        for batch in iterator:
            if ready is not None:
                ready(batch)
            got = clock()
            step()
            done = clock()
            if k:
                wait, in_step = wait + got - mark, in_step + done - got
            else:
                first = got - begin
            k, mark = k + 1, done
            if k == stop:
                break
        return k, first, wait, in_step, k - 1

    epoch = lean if step is None else stepped

    def one_round() -> float:
        if record.error is not None:
            return 0.0
        seconds = wait = in_step = 0.0
        counted = 0
        try:
            for _ in range(epochs):
                begin = clock()
                iterator = iter(pipeline)
                k, first, w, s, c = epoch(iterator, begin)
                if sync is not None:
                    sync()
                elapsed = clock() - begin
                _close(iterator)
                if 1 < k < num_batches:
                    elapsed = first + (elapsed - first) * (num_batches - 1) / (k - 1)
                seconds += elapsed
                wait, in_step, counted = wait + w, in_step + s, counted + c
        except Exception as e:
            record.error = f"{type(e).__name__}: {e}"
            return 0.0
        counted = max(counted, 1)
        record.wait_s.append(wait / counted)
        record.step_s.append(in_step / counted)
        record.total_s.append((wait + in_step) / counted)
        return seconds / epochs

    return one_round


@dataclass
class Entry:
    """One variant on one workload: its check, its timing, its pipeline while it is timed."""

    variant: Variant
    check: Check | None = None
    timing: Row | None = None
    record: Record = field(default_factory=Record)
    limit: int | None = None
    skipped: str | None = None
    pipeline: Any = None

    def row(self) -> Row:
        """The variant's typed result: its check, its status, its timed rounds."""
        v, check, error = self.variant, self.check, self.record.error
        row = Row(v.name, v.label, v.backend, v.floor, check=check.how if check else "")
        if self.skipped is not None:
            row.status, row.detail = "skipped", self.skipped
        elif check is not None and not check.ok:
            row.status, row.detail = "failed", check.detail
        elif error is not None or self.timing is None or not self.timing.rounds_s:
            row.status, row.detail = "error", error or "not timed"
        else:
            row.rounds_s, row.bounded = self.timing.rounds_s, self.limit
        return row

    def close(self) -> None:
        """Stop the pipeline's DataLoader workers now (not at exit) and drop it."""
        shutdown = getattr(getattr(self.pipeline, "_iterator", None), "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
        self.pipeline = None


def selected(name: str, patterns: list[str] | None, skip: list[str] | None = None) -> bool:
    """Whether ``--variants`` / ``--skip`` globs keep ``name`` (the baseline always runs)."""
    match = lambda globs: any(fnmatch.fnmatchcase(name, p) for p in globs)  # noqa: E731
    return name == BASELINE or (
        not (skip and match(skip)) and (patterns is None or match(patterns))
    )


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


# A checked batch costs about three timed ones (the check converts and compares every leaf),
# measured on the default run of every workload on a 2-core machine.
_CHECK_OVERHEAD = 3.0


def _per_batch(entry: Entry) -> float:
    """Seconds per timed batch, estimated from the check."""
    c = entry.check
    return c.seconds / c.batches / _CHECK_OVERHEAD if c is not None and c.batches else 0.0


def _check(entry: Entry, workload: Workload, settings: Settings, data: dict[str, Any]) -> None:
    """Build and check ``entry``'s loop; bound it when its epoch is long."""
    variant = entry.variant
    if variant.backend not in data:
        tree = kit(variant.backend).data(workload.data, settings.device)
        data[variant.backend] = (tree, host_leaves(tree))
    tree, reference = data[variant.backend]
    ctx = Context(workload, tree, settings.device, settings.seed)
    try:
        entry.pipeline = variant.factory(ctx)
        limit = settings.slow_batches if variant.slow else None
        entry.check = check_batches(variant, entry.pipeline, ctx, reference, limit=limit)
    except Exception as e:
        entry.check = Check(False, "error while checking", 0, 0.0, f"{type(e).__name__}: {e}")
    if not entry.check.ok:
        entry.close()
    elif variant.slow:
        entry.limit = settings.slow_batches
    elif 0 < settings.max_epoch_s < entry.check.seconds:
        # The check includes compilation: a probe epoch, stopped at the budget, says whether a
        # warm epoch fits. Nearly a whole epoch in budget: time whole epochs.
        try:
            done = probe(entry.pipeline, kit(variant.backend).ready, settings.max_epoch_s)
        except Exception as e:
            entry.record.error, done = f"{type(e).__name__}: {e}", 0
        if done < 0.75 * workload.num_batches:
            entry.limit = max(settings.slow_batches, done)


def _time(
    entries: list[Entry],
    records: list[Record],
    settings: Settings,
    workload: Workload,
    progress: Progress | None,
    label: str,
    step: Step | None = None,
    batches: int | None = None,
) -> list[Row]:
    """Time ``entries`` interleaved: ``settings.rounds`` rounds of an epoch (or ``batches``)."""
    if not entries:
        return []
    syncs = {b: sync_fn(settings.device, [b]) for b in {e.variant.backend for e in entries}}
    s, n, calls = settings, workload.num_batches, []
    for e, record in zip(entries, records, strict=True):
        b, limit = e.variant.backend, batches or e.limit
        fn = epoch_round(
            e.pipeline, record, s.epochs_per_round, limit, n, kit(b).ready, step, syncs[b]
        )
        calls.append((e.variant.name, fn))
    if progress is not None:
        seconds = sum(
            (step.seconds if step else 0.0) * (batches or 0)
            + _per_batch(e) * (batches or e.limit or n)
            for e in entries
        )
        total = seconds * s.epochs_per_round * (s.rounds + s.warmup)
        plan = f"{s.warmup} warm-up + {s.rounds} rounds, about {total:.0f} s"
        progress.stage(f"{label}: {len(calls)} loops, {plan}")
    return interleave(calls, rounds=s.rounds, warmup=s.warmup, progress=progress, label=label)


def run_workload(
    workload: Workload, settings: Settings, progress: Progress | None = None
) -> list[Entry]:
    """Build, check and time every applicable variant on ``workload``."""
    s = settings
    chosen = [v for v in variants(s.backends) if selected(v.name, s.patterns, s.skip)]
    chosen = [v for v in chosen if v.workloads is None or workload.name in v.workloads]
    # Accelerator-only variants are not run on the CPU (listed once in the results instead).
    chosen = [v for v in chosen if s.device != "cpu" or not v.accelerator]
    entries, data = [Entry(v) for v in chosen], {}  # type: ignore[var-annotated]
    if progress is not None:
        progress.stage(f"{workload.name}: checking {len(chosen)} variants")
    for i, entry in enumerate(entries):
        if progress is not None:
            progress.step(f"{workload.name}: checking {entry.variant.name} ({i + 1}/{len(chosen)})")
        entry.skipped = entry.variant.missing()
        if entry.skipped is None:
            _check(entry, workload, settings, data)
    timed = [e for e in entries if e.pipeline is not None]
    label = f"{workload.name}: timing"
    timings = _time(timed, [e.record for e in timed], settings, workload, progress, label)
    for entry, timing in zip(timed, timings, strict=True):
        entry.timing = timing
    return entries


def run_step(
    workload: Workload,
    entries: list[Entry],
    settings: Settings,
    step: Step,
    batches: int,
    progress: Progress | None = None,
    patterns: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Time ``batches`` batches per round of each checked loop (not floors) with a step after each.

    ``patterns`` (names or globs) narrows the variants (the baseline always runs).
    """
    timed = [e for e in entries if e.pipeline is not None and e.record.error is None]
    timed = [e for e in timed if not e.variant.is_floor and selected(e.variant.name, patterns)]
    records = [Record() for _ in timed]
    brief = dataclasses.replace(
        settings, rounds=max(2, min(settings.rounds, 3)), warmup=1, epochs_per_round=1
    )
    label = f"{workload.name}, step of {step.seconds * 1e3:g} ms"
    _time(timed, records, brief, workload, progress, label, step, batches)
    rows: list[dict[str, Any]] = []
    for e, record in zip(timed, records, strict=True):
        row: dict[str, Any] = {"name": e.variant.name, "backend": e.variant.backend}
        if record.error is not None:
            rows.append({**row, "error": record.error})
            continue
        total, wait, stepped = (
            statistics.median(x[1:]) for x in (record.total_s, record.wait_s, record.step_s)
        )
        rows.append(
            {
                **row,
                "batches_per_round": batches,
                "total_ms_per_batch": total * 1e3,
                "step_ms_per_batch": stepped * 1e3,
                "wait_ms_per_batch": wait * 1e3,
                "added_ms_per_batch": (total - stepped) * 1e3,
                "wait_fraction": wait / total if total > 0 else 0.0,
                "wait_of_step": wait / stepped if stepped > 0 else None,
            }
        )
    return rows
