"""Timing loops, epoch by epoch: the rounds of ``looptoolkit compare``.

One round of a variant is one epoch of its loop (or several, with ``--epochs``), run through
[`looptoolkit.bench.timing.interleave`][looptoolkit.bench.timing.interleave] with the other variants
of the workload. A loop whose epoch is too long is bounded to a number of batches per round and
scaled to an epoch. With a synthetic model step after every batch, a round also records the time
spent waiting for batches: what a prefetching loop can hide behind the step.
"""

from __future__ import annotations

import contextlib
import fnmatch
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from looptoolkit.bench.check import Check, check_batches, host_leaves
from looptoolkit.bench.timing import Timing, interleave
from looptoolkit.bench.variants import BASELINE, Context, Variant, kit, variants
from looptoolkit.bench.workloads import Workload

if TYPE_CHECKING:
    from looptoolkit.bench.progress import Progress

__all__ = [
    "Entry",
    "Record",
    "Settings",
    "Step",
    "probe",
    "round_fn",
    "run_step",
    "run_workload",
    "sync_fn",
]

_END = object()  # what next() returns at the end of an epoch


def sync_fn(device: str, backends: Iterable[str]) -> Callable[[], None] | None:
    """Synchronises these backends' accelerator before a clock is read.

    None on the CPU, and where no backend has device work to wait for (NumPy).
    """
    if device == "cpu":
        return None
    from looptoolkit.adapters import get_backend
    from looptoolkit.device import parse_device

    target = parse_device(device)
    loaded = [get_backend(name) for name in backends if name != "numpy"]
    if not loaded:
        return None

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
        """Take one step."""
        if self._cycles:
            self._torch.cuda._sleep(self._cycles)
            self._torch.cuda.synchronize()
        elif self.seconds > 0:
            time.sleep(self.seconds)


def probe(pipeline: Iterable[Any], ready: Callable[[Any], None] | None, budget_s: float) -> int:
    """Run an epoch of ``pipeline`` until it ends or ``budget_s`` has passed; return its batches."""
    deadline = time.perf_counter() + budget_s
    done = 0
    iterator = iter(pipeline)
    for batch in iterator:
        if ready is not None:
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


def _drain(iterator: Iterator[Any], ready: Callable[[Any], None] | None, k: int, stop: int) -> int:
    """Take batches until the epoch ends or ``stop`` in all (``k`` already); return the count."""
    if k == stop:
        return k
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
    return k


def round_fn(
    pipeline: Iterable[Any],
    record: Record,
    *,
    epochs: int,
    limit: int | None,
    num_batches: int,
    ready: Callable[[Any], None] | None,
    step: Callable[[], None] | None,
    sync: Callable[[], None] | None,
    skip_first: bool = False,
) -> Callable[[], None]:
    """One round: ``epochs`` epochs of ``pipeline`` (each bounded to ``limit`` batches).

    A bounded epoch is scaled to ``num_batches``: the time to its first batch
    (which includes the epoch's set-up) plus the mean time of the others for
    the rest. ``skip_first`` leaves the first batch out of the per-batch
    figures (the step section reports the steady state). ``ready`` (None: the
    batches need no wait) runs on every batch before it counts.

    Without a ``step`` the clock is read only around the epoch and at its first
    batch, so that the harness adds nothing per batch beyond ``next()``: every
    batch is then all wait (``wait_s`` = ``total_s``, ``step_s`` = 0). With a
    step, each batch is timed: its wait, its step and both.
    """
    clock = time.perf_counter
    stop = -1 if limit is None else max(limit, 1)  # -1: never reached

    # The loop of one epoch, after iter(): (batches, time to the first, wait, step,
    # total, batches counted).
    def lean(iterator: Iterator[Any], begin: float) -> tuple[int, float, float, float, float, int]:
        batch = next(iterator, _END)
        if batch is _END:
            return 0, 0.0, 0.0, 0.0, 0.0, 0
        if ready is not None:
            ready(batch)
        first = clock() - begin
        del batch
        k = _drain(iterator, ready, 1, stop)
        waited = clock() - begin - (first if skip_first else 0.0)
        counted = k - 1 if skip_first else k
        return k, first, waited, 0.0, waited, counted

    def stepped(
        iterator: Iterator[Any], begin: float, take_step: Callable[[], None]
    ) -> tuple[int, float, float, float, float, int]:
        k = counted = 0
        first = wait = in_step = total = 0.0
        mark = begin
        for batch in iterator:
            if ready is not None:
                ready(batch)
            got = clock()
            if k == 0:
                first = got - begin
            k += 1
            take_step()
            done = clock()
            if k > 1 or not skip_first:
                wait += got - mark
                in_step += done - got
                total += done - mark
                counted += 1
            mark = done
            if k == stop:
                break
        return k, first, wait, in_step, total, counted

    def one_round() -> None:
        if record.error is not None:
            return
        epoch_total = wait = stepped_s = total = 0.0
        counted = 0
        try:
            for _ in range(epochs):
                begin = clock()
                iterator = iter(pipeline)
                if step is None:
                    k, first, w, s, t, c = lean(iterator, begin)
                else:
                    k, first, w, s, t, c = stepped(iterator, begin, step)
                if sync is not None:
                    sync()
                elapsed = clock() - begin
                with contextlib.suppress(Exception):
                    iterator.close()  # type: ignore[attr-defined]
                if k < num_batches and k > 1:
                    elapsed = first + (elapsed - first) * (num_batches - 1) / (k - 1)
                epoch_total += elapsed
                wait += w
                stepped_s += s
                total += t
                counted += c
        except Exception as e:
            record.error = f"{type(e).__name__}: {e}"
            return
        counted = max(counted, 1)
        record.epoch_s.append(epoch_total / epochs)
        record.wait_s.append(wait / counted)
        record.step_s.append(stepped_s / counted)
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
        out: dict[str, Any] = {
            "name": v.name,
            "backend": v.backend,
            "label": v.label,
            "floor": v.floor,
        }
        if self.skipped is not None:
            out["skipped"] = self.skipped
            return out
        if self.check is not None:
            out["check"] = {
                "ok": self.check.ok,
                "how": self.check.how,
                "batches": self.check.batches,
                "detail": self.check.detail,
            }
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


def close_entries(entries: list[Entry]) -> None:
    """Stop every entry's pipeline (DataLoader workers) and drop it."""
    for entry in entries:
        _close(entry.pipeline)
        entry.pipeline = None


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


# A checked batch costs about three timed ones (the check converts and compares every
# leaf): measured on the default run of every workload, 2-core machine.
_CHECK_OVERHEAD = 3.0


def _per_batch(entry: Entry) -> float:
    """Seconds per batch of ``entry``'s loop, estimated from its check."""
    check = entry.check
    if check is None or check.batches == 0:
        return 0.0
    return check.seconds / check.batches / _CHECK_OVERHEAD


def _syncs(device: str, entries: list[Entry]) -> dict[str, Callable[[], None] | None]:
    """Each backend's own synchronisation: a variant's epoch waits for its backend only."""
    backends = {e.variant.backend for e in entries}
    return {backend: sync_fn(device, [backend]) for backend in sorted(backends)}


def run_workload(
    workload: Workload, settings: Settings, progress: Progress | None = None
) -> list[Entry]:
    """Build, check and time every applicable variant on ``workload``."""
    entries: list[Entry] = []
    data_by_backend: dict[str, Any] = {}
    accelerated = settings.device != "cpu"
    chosen = [
        v
        for v in variants(settings.backends)
        if _selected(v, settings.patterns, settings.skip)
        and (v.workloads is None or workload.name in v.workloads)
        and not (v.accelerator and not accelerated)  # listed once in the results instead
    ]
    if progress is not None:
        progress.stage(f"{workload.name}: checking {len(chosen)} variants")
    for i, variant in enumerate(chosen):
        if progress is not None:
            progress.step(f"{workload.name}: checking {variant.name} ({i + 1}/{len(chosen)})")
        entry = Entry(variant)
        entries.append(entry)
        missing = variant.missing()
        if missing is not None:
            entry.skipped = missing
            continue
        if variant.backend not in data_by_backend:
            data = kit(variant.backend).data(workload.data, settings.device)
            data_by_backend[variant.backend] = (data, host_leaves(data))
        data, reference = data_by_backend[variant.backend]
        ctx = Context(workload, data, settings.device, settings.seed)
        try:
            entry.pipeline = variant.factory(ctx)
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
                done = probe(entry.pipeline, kit(variant.backend).ready, settings.max_epoch_s)
            except Exception as e:
                entry.record.error = f"{type(e).__name__}: {e}"
                done = 0
            # Nearly a whole epoch in budget: time whole epochs, no scaling.
            if done < 0.75 * workload.num_batches:
                entry.limit = max(settings.slow_batches, done)

    timed = [e for e in entries if e.pipeline is not None]
    syncs = _syncs(settings.device, timed)
    calls = [
        (
            e.variant.name,
            round_fn(
                e.pipeline,
                e.record,
                epochs=settings.epochs_per_round,
                limit=e.limit,
                num_batches=workload.num_batches,
                ready=kit(e.variant.backend).ready,
                step=None,
                sync=syncs[e.variant.backend],
            ),
        )
        for e in timed
    ]
    if calls:
        if progress is not None:
            per_round = sum(_per_batch(e) * (e.limit or workload.num_batches) for e in timed)
            total = per_round * settings.epochs_per_round * (settings.rounds + settings.warmup)
            progress.stage(
                f"{workload.name}: timing {len(calls)} loops, {settings.warmup} "
                f"warm-up + {settings.rounds} rounds, about {total:.0f} s"
            )
        # Each round records its own figures (synchronised within the epoch): the
        # interleaved timings themselves are not used.
        interleave(
            calls,
            rounds=settings.rounds,
            warmup=settings.warmup,
            progress=progress,
            label=workload.name,
        )
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
    """Time ``batches`` batches per round of each checked variant with a step after each.

    ``patterns`` (names or globs) narrows the variants (the baseline always runs).
    """
    timed = [e for e in entries if e.pipeline is not None and e.record.error is None]
    timed = [e for e in timed if not e.variant.is_floor]
    timed = [e for e in timed if _selected(e.variant, patterns, None)]
    records = {e.variant.name: Record() for e in timed}
    syncs = _syncs(settings.device, timed)
    calls = [
        (
            e.variant.name,
            round_fn(
                e.pipeline,
                records[e.variant.name],
                epochs=1,
                limit=batches,
                num_batches=workload.num_batches,
                ready=kit(e.variant.backend).ready,
                step=step,
                sync=syncs[e.variant.backend],
                skip_first=True,
            ),
        )
        for e in timed
    ]
    rounds = max(2, min(settings.rounds, 3))
    if calls:
        label = f"step of {step.seconds * 1000:g} ms"
        if progress is not None:
            total = (rounds + 1) * batches * sum(step.seconds + _per_batch(e) for e in timed)
            progress.stage(
                f"{workload.name}, {label}: {len(calls)} loops, {rounds + 1} rounds "
                f"of {batches} batches, about {total:.0f} s"
            )
        interleave(calls, rounds=rounds, warmup=1, progress=progress, label=label)
    rows: list[dict[str, Any]] = []
    for e in timed:
        record = records[e.variant.name]
        if record.error is not None:
            rows.append(
                {"name": e.variant.name, "backend": e.variant.backend, "error": record.error}
            )
            continue
        total = float(np.median(record.total_s[1:]))
        wait = float(np.median(record.wait_s[1:]))
        stepped = float(np.median(record.step_s[1:]))
        rows.append(
            {
                "name": e.variant.name,
                "backend": e.variant.backend,
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
