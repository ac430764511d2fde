"""One epoch's batch stream: gather, move, transform, in the consumer's thread or ahead of it.

Between the order and the user's loop: given the epoch's index batches, the
[`Rows`][looptoolkit._rows.rows.Rows] of the data and a [`Plan`][looptoolkit._pipeline.stream.Plan]
(where batches go, how they are cast, the user's transform),
[`inline`][looptoolkit._pipeline.stream.inline] does every step in the consumer's thread,
[`ahead`][looptoolkit._pipeline.stream.ahead] does them there too but issues the next batches'
moves before handing one out (the copies run while the loop's step runs), and
[`prefetched`][looptoolkit._pipeline.stream.prefetched] does them in one background thread
([`looptoolkit._common.background`][looptoolkit._common.background]);
[`choose_mode`][looptoolkit._pipeline.stream.choose_mode] picks the thread or the consumer's. Moves
go through the backend's staged upload when it offers one (torch on CUDA: pinned buffers and a
side stream, or, in the consumer's thread, blocks of batches gathered and copied at once and
handed out as slices of the device block). The transform runs right after the move, in the
same thread, inside the staged upload's stream, so that it overlaps the consumer's step and is
ordered before it.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

import numpy as np

from looptoolkit._common.background import END, Prefetcher
from looptoolkit._common.dtypes import DtypePolicy, cast_before_copy
from looptoolkit._common.keys import BatchKeys
from looptoolkit._common.target import Target
from looptoolkit._rows.rows import Rows
from looptoolkit.adapters import Stager, backend_of, get_backend
from looptoolkit.device import _tree as _tree
from looptoolkit.device._move import leaf_mover, mover, skipping
from looptoolkit.order._order import EpochOrder

__all__ = [
    "MODES",
    "KeysOf",
    "Plan",
    "Progress",
    "Transform",
    "ahead",
    "choose_mode",
    "inline",
    "prefetched",
    "stager_for",
    "with_masks",
]

MODES = ("auto", "thread", "inline")
"""The values of the Loader's ``prefetch_mode``."""


class Progress:
    """How far the user got through one epoch (batches handed out, not prefetched).

    ``consumed`` is counted by the epoch's iterator, as it hands each batch out.
    """

    __slots__ = ("consumed", "epoch", "first", "start", "total")

    def __init__(self, epoch: int, start: int, total: int, first: int) -> None:
        self.epoch = epoch
        self.start = start  # global sample offset the epoch was started (or resumed) at
        self.total = total  # batches this rank gets from `start` on
        self.first = first  # number, within the epoch, of the first batch from `start`
        self.consumed = 0


class KeysOf:
    """The [`BatchKeys`][looptoolkit._common.keys.BatchKeys] of a pass's batches, from the order.

    A keyed transform (one with ``keyed = True``, such as an augmentation) is called with
    the batch and its keys: the Loader's seed, the epoch, and each row's position in the
    epoch's global order, read from the pass's own epoch order (a resumed pass's too).
    """

    def __init__(self, order: Any) -> None:
        self.order = order
        self._last: Any = None  # the epoch order of the pass asked for last

    def __call__(self, progress: Progress, k: int) -> BatchKeys:
        """The keys of batch ``k`` (from the pass's start) of the pass at ``progress``."""
        schedule = self._last
        if schedule is None or (schedule.epoch, schedule.offset) != (
            progress.epoch,
            progress.start,
        ):
            schedule = self._last = self.order.epoch(progress.epoch, progress.start)
        return BatchKeys(self.order.seed, progress.epoch, schedule.positions(k))


class Transform:
    """The user's ``transform``: compiled once by the batch's backend, its errors located.

    A keyed transform (``fn.keyed``) is called as ``fn(batch, keys)`` with the batch's
    [`BatchKeys`][looptoolkit._common.keys.BatchKeys] and is not compiled here (it compiles
    its own ops); one with ``fn.before_move`` runs on the host, before the batch's move.

    Args:
        fn: the function, from a batch to anything.
        compile: compile it with the backend that owns every array of the first
            batch it sees (``jax.jit`` for JAX, ``tf.function`` for tf; torch and
            NumPy run it as it is).
        skip_keys: leaves held out of ``fn`` and put back.
        keys: the keys of a pass's batches, for a keyed ``fn``.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        compile: bool,
        skip_keys: Any = None,
        keys: KeysOf | None = None,
    ) -> None:
        self.fn = fn
        self.keyed = bool(getattr(fn, "keyed", False))
        self.before_move = bool(getattr(fn, "before_move", False))
        self.keys = keys
        self.compile = compile and not self.keyed
        self._skipped = skipping(skip_keys)
        self._compiled: Callable[..., Any] | None = None
        self._lock = threading.Lock()

    def _compiled_for(self, batch: Any) -> Callable[..., Any]:
        with self._lock:
            if self._compiled is None:
                fn = self.fn
                if self.compile:
                    leaves = _tree.flatten(batch)[0]
                    owners = {b for b in map(backend_of, leaves) if b is not None}
                    if len(owners) == 1:
                        fn = owners.pop().compile_transform(fn)
                self._compiled = fn
            return self._compiled

    def __call__(self, batch: Any, progress: Progress, k: int) -> Any:
        """``fn(batch)`` of batch ``k`` of the pass; an exception gets a note naming it."""
        epoch, number = progress.epoch, progress.first + k
        held: list[tuple[int, Any]] = []
        if self._skipped is not None:
            # Leaves under `skip_keys` are held out (None in their place) and put back.
            leaves, spec = _tree.flatten(batch)
            skipped = self._skipped(spec)
            held = [(i, x) for i, (x, k) in enumerate(zip(leaves, skipped, strict=True)) if k]
            if held:
                for i, _ in held:
                    leaves[i] = None
                batch = _tree.unflatten(spec, leaves)
        fn = self._compiled or self._compiled_for(batch)
        try:
            if self.keyed:
                assert self.keys is not None  # given where a keyed transform is planned
                out = fn(batch, self.keys(progress, k))
            else:
                out = fn(batch)
            return _put_back(out, spec, held) if held else out
        except Exception as e:
            e.add_note(
                f"raised by the `transform` of looptoolkit.Loader on batch {number} "
                f"of epoch {epoch}"
            )
            raise


def _put_back(out: Any, spec: Any, held: list[tuple[int, Any]]) -> Any:
    """The transform's output with the held-out leaves back in their places."""
    leaves, out_spec = _tree.flatten(out)
    if out_spec != spec:
        raise ValueError(
            "with `skip_keys`, `transform` must return the batch's structure (its skipped "
            f"leaves go back in place); it returned {out_spec} for a batch of {spec}."
        )
    for i, leaf in held:
        leaves[i] = leaf
    return _tree.unflatten(spec, leaves)


# A batch's list of leaves and ``non_blocking`` -> the moved leaves (``Plan.leaf_move``).
LeafMove = Callable[[Sequence[Any], bool | None], Any]


class Plan:
    """What happens to a gathered batch: where it goes, how it is cast, what transforms it.

    Built in the thread that builds the Loader: a device that depends on the
    calling thread (torch's current CUDA device) is fixed here.

    Args:
        target: where batches go (None: they stay where the gather made them).
        dtype: the cast policy of [`to_device`][looptoolkit.to_device].
        non_blocking: as [`to_device`][looptoolkit.to_device]'s.
        transform: the user's transform, or None.
        move: False: batches stay where the gather made them (no device, or resident).
        skip_keys: leaves the move leaves where they are ([`to_device`][looptoolkit.to_device]).
    """

    def __init__(
        self,
        target: Target | None,
        dtype: Any,
        non_blocking: bool | None,
        transform: Transform | None,
        move: bool,
        skip_keys: Any = None,
    ) -> None:
        self.non_blocking = non_blocking
        self.transform = transform
        self.move = move
        if target is not None and target.home is not None:
            # In the constructing thread: "cuda" is the device current here, also
            # for the moves the prefetch thread makes.
            target = get_backend(target.home).bind_target(target)
        self.target = target
        # Which of a batch's leaves stay as they are (None: none): they are never staged.
        self.skipped = skipping(skip_keys)
        # The device and the dtype policy are parsed here once, not for every batch.
        self._move = mover(target, dtype, skip_keys) if move else None
        self.dtype = dtype

    def leaf_move(self, rows: Rows) -> LeafMove | None:
        """The move of a batch's list of leaves, where it equals ``finish``'s move of the tree.

        That is where every leaf of the data is a NumPy array or an array of the
        target's backend (one route for all), nothing is skipped, no container is
        cut per batch, and ``to_device``'s view of the data's tree finds exactly
        its leaves. None elsewhere. Decided once per pass.
        """
        target = self.target
        if self._move is None or target is None or target.home is None:
            return None
        if self.transform is not None and self.transform.before_move:
            return None  # the host batch is transformed before it moves
        if self.skipped is not None or not isinstance(rows, Rows) or rows.batched:
            return None  # a ragged batch's leaves are its layout's, not the data's
        home = target.home
        for leaf in rows.leaves:
            backend = backend_of(leaf)
            if isinstance(leaf, np.ndarray) or (backend is not None and backend.name == home):
                continue
            return None
        seen = _tree.flatten_typed(rows.build(list(rows.leaves)), move=True)[0]
        if len(seen) != len(rows.leaves):
            return None
        if any(a is not b for a, b in zip(seen, rows.leaves, strict=True)):
            return None
        return leaf_mover(target, self.dtype)

    def finish(
        self,
        batch: Any,
        progress: Progress,
        k: int,
        non_blocking: bool | None = None,
        *,
        moved: bool = False,
    ) -> Any:
        """Move (unless the gather or ``moved`` made it where it goes), transform batch ``k``.

        A transform that runs before the move (``before_move``) runs on the host batch first.
        """
        transform = self.transform
        if transform is not None and transform.before_move:
            batch = transform(batch, progress, k)
            transform = None
        if self._move is not None and not moved:
            batch = self._move(batch, self.non_blocking if non_blocking is None else non_blocking)
        if transform is not None:
            batch = transform(batch, progress, k)
        return batch

    def finish_leaves(
        self,
        rows: Rows,
        move: LeafMove | None,
        leaves: Sequence[Any],
        progress: Progress,
        k: int,
        non_blocking: bool | None = None,
    ) -> tuple[Any, Sequence[Any] | None]:
        """Batch ``k`` from its gathered ``leaves``, and its leaves where they are at hand.

        Moved as a list by ``move`` (this pass's ``leaf_move``: the batch built once),
        else through ``finish``'s move of the built tree, which also says where a move
        failed. The leaves come back with the batch unless a
        transform made it (None then).
        """
        if move is not None:
            try:
                moved = move(leaves, self.non_blocking if non_blocking is None else non_blocking)
            except Exception:  # the tree's move below says where it failed
                moved = None
            if moved is not None:
                batch = self.finish(rows.build(moved), progress, k, moved=True)
                return batch, (None if self.transform is not None else moved)
        return self.finish(rows.build(leaves), progress, k, non_blocking), None


def inline(
    rows: Rows, batches: Iterator[np.ndarray], progress: Progress, plan: Plan
) -> Iterator[Any]:
    """Every step in the consumer's thread.

    Gathered batches that need nothing more are built by a C-level ``map`` over
    the backend's gathers: the loop adds no Python frame per batch to them.
    """
    gathered = rows.gather(batches)
    if not plan.move and plan.transform is None:
        return rows.built(gathered)
    return _finished(rows, gathered, progress, plan)


def _finished(
    rows: Rows, gathered: Iterator[Sequence[Any]], progress: Progress, plan: Plan
) -> Iterator[Any]:
    move = plan.leaf_move(rows)
    for k, leaves in enumerate(gathered):
        yield plan.finish_leaves(rows, move, leaves, progress, k)[0]


def _staged(
    rows: Rows, batches: Iterator[np.ndarray], progress: Progress, plan: Plan, stager: Stager
) -> Iterator[Any]:
    """As ``inline``, through the backend's staged upload; yields ``(batch, token, leaves)``.

    The stager's context (its side stream) is entered for each batch's gather, move and
    transform only, never across a ``yield``: run in the consumer's thread by ``ahead``,
    the loop's own stream must be the current one while its step runs.
    """
    gathered = rows.gather(batches, staged=(stager.positions, stager.staged))
    non_blocking = True if plan.non_blocking is None else plan.non_blocking
    move = plan.leaf_move(rows)
    # Every leaf staged and nothing cast: where the stager's leaves are already on the
    # device (block uploads), the move has nothing to do, and is not called.
    whole = move is not None and plan.dtype is None and len(stager.positions) == len(rows.leaves)
    moved: Sequence[Any] | None
    for k in itertools.count():
        with stager.context():
            leaves = next(gathered, None)
            if leaves is None:
                return
            if whole and stager.moved:
                batch = plan.finish(rows.build(leaves), progress, k, moved=True)
                moved = None if plan.transform is not None else leaves
            else:
                # The moved leaves, where at hand, spare the hand-over a flatten of the batch.
                batch, moved = plan.finish_leaves(rows, move, leaves, progress, k, non_blocking)
            token = stager.record(k)
        yield batch, token, moved


def _hand_over(stager: Stager, item: tuple[Any, Any, Any]) -> Any:
    """The batch of a staged ``(batch, token, its leaves or None)``, its stream ordered."""
    batch, token, leaves = item
    stager.hand_over(_tree.flatten(batch)[0] if leaves is None else leaves, token)
    return batch


def stager_for(rows: Rows, batch_size: int, plan: Plan, depth: int) -> Stager | None:
    """The staged upload of the plan's target backend for these rows, if it offers one.

    Leaves under ``skip_keys`` are not offered to it (None in their place): they
    take the ordinary gather, which makes fresh arrays of their own type. A staged
    leaf is a view of a reused buffer until its move copies it, and a skipped leaf
    is never moved.
    """
    target = plan.target
    if target is None or target.home is None or not plan.move:
        return None
    if plan.transform is not None and plan.transform.before_move:
        return None  # the host batch is transformed before it moves: nothing to stage
    leaves: list[Any] = rows.leaves
    if plan.skipped is not None:
        kept = plan.skipped(rows.spec)
        leaves = [None if skip else leaf for leaf, skip in zip(leaves, kept, strict=True)]
    if plan.dtype is not None:
        # A cast that shrinks a leaf (float32 -> float16) runs before its copy, on the
        # host: such a leaf is not staged, so that the fewer bytes cross.
        leaves = [None if _shrinks(leaf, plan.dtype) else leaf for leaf in leaves]
    stager = get_backend(target.home).stager(leaves, batch_size, target, depth + 1)
    if stager is not None:
        stager.stats = getattr(rows, "stats", None)  # where it says how it stages
    return stager


def _shrinks(leaf: Any, dtype: Any) -> bool:
    """Whether ``dtype``'s cast of ``leaf`` makes it smaller (cast before the copy)."""
    backend = backend_of(leaf) if leaf is not None else None
    if backend is None:
        return False
    source = backend.dtype_name(leaf)
    cast = DtypePolicy(dtype)(source)
    return cast is not None and cast_before_copy(source, cast)


# A list of batches is handed to the consumer once making its batches took this long
# (or it holds `block` of them): a hand-off costs tens of microseconds.
HANDOFF_S = 0.002


def _blocks(source: Iterator[Any], block: int) -> Generator[list[Any], None, None]:
    """Lists of up to ``block`` batches of ``source``; no batch waits for a list to fill.

    The first batch goes alone; after it a list goes as soon as it holds ``block``
    batches or its batches took ``HANDOFF_S`` to make. A batch that is slow to make
    (a store's sorted read) goes when it is made; cheap ones (from a chunk cache)
    go together.
    """
    clock = time.perf_counter
    try:
        items = list(itertools.islice(source, 1))
        while items:
            yield items
            items = []
            start = clock()
            for item in source:
                items.append(item)
                if len(items) == block or clock() - start >= HANDOFF_S:
                    break
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def prefetched(
    rows: Rows,
    batches: Iterator[np.ndarray],
    progress: Progress,
    plan: Plan,
    depth: int,
    stager: Stager | None,
    block: int = 1,
) -> Generator[Any, None, None]:
    """Every step in one background thread, up to ``depth`` batches ahead.

    ``block > 1`` (no stager): batches are handed over in lists of up to ``block``
    (see ``_blocks``), and the queue holds ``ceil(depth / block)`` of them: a hand-off
    between threads costs tens of microseconds, more than a batch read from a store's
    cache.
    """
    if stager is None and block > 1:
        blocks = _blocks(inline(rows, batches, progress, plan), block)
        prefetcher = Prefetcher(blocks, -(-depth // block))
        try:
            while True:
                items = prefetcher.get()
                if items is END:
                    return
                yield from items
                del items  # held while waiting for the next list, it would keep their memory
        finally:
            prefetcher.close()
    if stager is None:
        prefetcher = Prefetcher(inline(rows, batches, progress, plan), depth)
    else:
        prefetcher = Prefetcher(_staged(rows, batches, progress, plan, stager), depth)
    try:
        get = prefetcher.get
        while True:
            item = get()
            if item is END:
                return
            yield item if stager is None else _hand_over(stager, item)
    finally:
        prefetcher.close()


def choose_mode(requested: str, prefetch: int, store: bool) -> str:
    """Where a Loader's batches are made: ``"thread"`` or ``"inline"`` (the consumer's thread).

    ``"auto"`` takes the thread only where a batch is expensive to make and the
    work releases the GIL: store reads and decoding (``store``). Everything
    else is cheaper than a hand-off between threads (tens of microseconds): an
    in-memory gather, and a move that is queued asynchronously (``ahead``
    issues it early) or is a host copy the thread could not overlap anyway.
    """
    if requested == "auto":
        return "thread" if store and prefetch > 0 else "inline"
    return requested


def ahead(
    rows: Rows,
    batches: Iterator[np.ndarray],
    progress: Progress,
    plan: Plan,
    depth: int,
    stager: Stager | None,
) -> Iterator[Any]:
    """Every step in the consumer's thread, each batch issued ``depth`` batches before it is due.

    The gather, move and transform of batch ``k + depth`` are queued before batch ``k``
    is handed out (apex's ``data_prefetcher``): an asynchronous move (a non-blocking
    copy on a side stream, a JAX ``device_put``) then runs while the loop's step runs,
    with no thread and no hand-off. ``depth == 0`` is
    [`inline`][looptoolkit._pipeline.stream.inline] itself. An error while issuing a batch is
    raised once the batches issued before it have been handed out, as the background thread's
    would be.
    """
    if stager is None and depth == 0:
        return inline(rows, batches, progress, plan)
    if stager is None:
        return _ahead(inline(rows, batches, progress, plan), depth, None)
    return _ahead(_staged(rows, batches, progress, plan, stager), max(depth, 1), stager)


def _ahead(source: Iterator[Any], depth: int, stager: Stager | None) -> Generator[Any, None, None]:
    pending: collections.deque[Any] = collections.deque()
    error: Exception | None = None
    more = True
    try:
        while True:
            while more and len(pending) <= depth:
                try:
                    pending.append(next(source))
                except StopIteration:
                    more = False
                except Exception as e:  # raised in order, after the batches before it
                    error, more = e, False
            if not pending:
                if error is not None:
                    try:
                        raise error
                    finally:
                        error = None  # no cycle through this frame's locals
                return
            item = pending.popleft()
            yield item if stager is None else _hand_over(stager, item)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def with_masks(
    source: Iterator[Any], schedule: EpochOrder, batch_size: int
) -> Generator[tuple[Any, np.ndarray], None, None]:
    """``(batch, mask)`` pairs; ``mask`` is False at padding rows."""
    left = schedule.samples_per_rank
    try:
        for i, batch in enumerate(source):
            padding = schedule.padding_mask(i)
            mask = np.ones(min(batch_size, left), dtype=bool) if padding is None else ~padding
            left -= batch_size
            yield batch, mask
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
