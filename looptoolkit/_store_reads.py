"""Reads of store arrays for the Loader: whole chunks through a bounded cache, or sorted rows.

Between the order and the batch, for the leaves that are
[`StoreArray`][looptoolkit.stores.StoreArray]s (zarr, HDF5, Arrow). Two ways to read:

- Chunks (an order that visits chunks whole: sequential, or the chunk-aware
  grouped order): the chunks a batch needs that are not cached are read in one
  call (several ranges at once: zarr decodes them concurrently) into one
  segment, kept in a cache bounded in bytes, least recently used first out.
  An order that uses one chunk at a time (sequential, groups of one chunk)
  reads the chunks of the next ``READ_AHEAD_CHUNKS`` chunks' rows of the order
  in the same call: one call per span of chunks, as a store is read fastest.
  A batch is then one gather from its segment; consecutive rows (a sequential
  order's batches) are a view of it, found by arithmetic per chunk, not per row.
  An evicted segment's array is read into again only once nothing outside the
  cache holds it (no batch, view or tensor of its rows is left: its reference
  count says so), so a view handed out stays valid while it lives, and a loop
  that reads a store start to end cycles through a few arrays instead of
  faulting in new pages for every span. A sequential order drops the segments
  behind it at once. A background thread hands a read-ahead span's batches to
  the loop together. With an order that uses each chunk's rows while the chunk is
  cached, each chunk is read once per epoch.
- Rows (a full shuffle, weights, any order that scatters): each batch's rows are
  read sorted and deduplicated (h5py takes increasing indices only), then put
  back in the batch's order. Every chunk a batch touches is decoded for it;
  a batch over many chunks is read in parts of ``PART_CHUNKS`` chunks, and a
  background read that is told to stop ends after the part it is reading.

The cache lives for one pass (a pass's reads run in its prefetch thread), so
concurrent passes do not share it.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from looptoolkit._prefetch import Stopped, stopping
from looptoolkit._sources import chunk_shards
from looptoolkit.adapters import gather_rows
from looptoolkit.order import DEFAULT_GROUP_SIZE, Order, normalize_shuffle
from looptoolkit.stores import StoreArray

__all__ = ["ChunkCache", "StoreReads"]

# Batches are gathered from the cache in blocks of about this many bytes (at most
# BLOCK_BATCHES batches): one gather per leaf per block, the batches views of it.
GATHER_BYTES = 1 << 21
BLOCK_BATCHES = 32
# Chunks per part of a sorted read: zarr decodes a part's chunks concurrently, and a
# stopped background thread waits for one part (not a whole batch over hundreds of chunks).
PART_CHUNKS = 16
# Evicted segments' arrays a cache keeps to read into again (see `ChunkCache.spare`).
SPARE_ARRAYS = 16


class ChunkCache:
    """Whole chunks of some store arrays, read on demand, bounded by ``budget`` bytes.

    Attributes:
        reads: read calls made; ``chunks_read``: chunks read, per leaf;
            ``allocated``: reads into new memory (not a spare array), per leaf.
    """

    def __init__(self, leaves: Sequence[StoreArray], budget: int, unit: int) -> None:
        self.leaves = list(leaves)
        self.budget = budget
        # A leaf's own chunks; for a leaf without chunks, blocks of the order's unit.
        self.units = [leaf.chunk_rows or unit for leaf in self.leaves]
        counts = [-(-len(leaf) // u) for leaf, u in zip(self.leaves, self.units, strict=True)]
        self.where = [np.full(c, -1, dtype=np.intp) for c in counts]  # segment of each chunk
        self.base = [np.zeros(c, dtype=np.intp) for c in counts]  # chunk's first row in it
        # segment id -> (leaf, its chunks, its rows, bytes)
        self.segments: OrderedDict[int, tuple[int, np.ndarray, np.ndarray, int]] = OrderedDict()
        self.used = 0  # bytes of the cached segments
        self.peak = 0
        # Arrays of evicted segments, to be read into again once nothing outside the
        # cache holds them (no batch, view or transfer of their rows is left). Fresh
        # memory costs a page fault per page: a loop that reads a store from start to
        # end would pay that for every row of every epoch. While a batch holds one,
        # it is that batch's memory; once free, it counts in the budget.
        self.spare: deque[np.ndarray] = deque(maxlen=SPARE_ARRAYS)
        self.owners: deque[int] = deque(maxlen=SPARE_ARRAYS)  # the leaf each was read for
        self.allocated = [0] * len(self.leaves)  # reads into new memory, not a spare array
        self.reads = 0
        self.chunks_read = [0] * len(self.leaves)
        self._next = 0
        # The rows the order visits next (after the rows being taken), whose chunks
        # a read that has to happen reads along; None: read only what is needed.
        self.upcoming: Callable[[], np.ndarray] | None = None
        self._memo: tuple[np.ndarray, int, np.ndarray] | None = None  # (rows, unit, chunks)

    def take(self, j: int, idx: np.ndarray) -> np.ndarray:
        """Rows ``idx`` of leaf ``j``."""
        if _consecutive(idx):
            return self.span(j, int(idx[0]), int(idx[-1]) + 1)
        unit = self.units[j]
        chunk = idx // unit
        where = self.where[j]
        seg = where[chunk]
        missing = seg < 0
        if missing.any():
            need = _distinct(chunk[missing])
            if self.upcoming is not None:
                ahead = self._ahead(unit)
                need = np.union1d(need, ahead[where[ahead] < 0])
            self._read(j, need, np.unique(seg[~missing]))
            seg = where[chunk]
        pos = self.base[j][chunk] + (idx - chunk * unit)
        first = int(seg[0])
        segments = self.segments
        if (seg == first).all():
            segments.move_to_end(first)
            rows = segments[first][2]
            start = int(pos[0])
            if pos[-1] - start + 1 == len(pos) and (np.diff(pos) == 1).all():
                return rows[start : start + len(pos)]  # consecutive rows: a view, no copy
            return rows.take(pos, axis=0)
        leaf = self.leaves[j]
        out = np.empty((len(idx), *leaf.shape[1:]), dtype=leaf.dtype)
        for s in np.unique(seg).tolist():
            at = seg == s
            segments.move_to_end(s)
            out[at] = segments[s][2].take(pos[at], axis=0)
        return out

    def span(self, j: int, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` of leaf ``j``: a view of one segment where they lie in one.

        The arithmetic is per chunk, not per row: a sequential order's batches (and
        blocks of them) cost the same whatever their length.
        """
        parts = self.pieces(j, start, stop)
        if len(parts) == 1:
            return parts[0][1]
        return np.concatenate([part for _, part in parts])

    def pieces(self, j: int, start: int, stop: int) -> list[tuple[int, np.ndarray]]:
        """Rows ``start:stop`` of leaf ``j`` as views, one per segment they lie in.

        Returns:
            ``(first row, view)`` pairs in row order; together they hold ``stop - start`` rows.
        """
        unit = self.units[j]
        first, last = start // unit, (stop - 1) // unit + 1
        where = self.where[j]
        seg = where[first:last]
        missing = seg < 0
        if missing.any():
            need = np.arange(first, last)[missing]
            if self.upcoming is not None:
                ahead = self._ahead(unit)
                need = np.union1d(need, ahead[where[ahead] < 0])
            self._read(j, need, np.unique(seg[~missing]))
            seg = where[first:last]
        base, segments = self.base[j], self.segments
        # Consecutive chunks of one segment lie there in order, back to back.
        runs = [0, *(np.flatnonzero(seg[1:] != seg[:-1]) + 1).tolist(), len(seg)]
        out = []
        for r0, r1 in itertools.pairwise(runs):
            c = first + r0
            a, b = max(start, c * unit), min(stop, (first + r1) * unit)
            s = int(seg[r0])
            segments.move_to_end(s)
            at = int(base[c]) + a - c * unit
            out.append((a, segments[s][2][at : at + b - a]))
        return out

    def _ahead(self, unit: int) -> np.ndarray:
        """The chunks (of ``unit`` rows) of the ``upcoming`` rows.

        Computed once for the leaves of a block: their reads look at the same rows.
        """
        assert self.upcoming is not None
        rows = self.upcoming()
        memo = self._memo
        if memo is not None and memo[0] is rows and memo[1] == unit:
            return memo[2]
        chunks = _distinct(rows // unit)
        self._memo = (rows, unit, chunks)
        return chunks

    def _read(self, j: int, chunks: np.ndarray, keep: np.ndarray) -> None:
        leaf, unit = self.leaves[j], self.units[j]
        n = len(leaf)
        starts = chunks * unit
        stops = np.minimum(starts + unit, n)
        total = int(np.sum(stops - starts))
        size = total * leaf.row_bytes
        # Room for the chunks and for what the read holds while it decodes.
        self._evict(size + leaf.transient_bytes(), set(keep.tolist()))
        # Consecutive chunks make one range.
        breaks = np.flatnonzero(np.diff(chunks) != 1) + 1
        first = np.concatenate(([0], breaks))
        last = np.concatenate((breaks - 1, [len(chunks) - 1]))
        memory = self._memory(j, size)
        rows = memory[:size].view(leaf.dtype).reshape(total, *leaf.shape[1:])
        leaf.read_ranges(starts[first], stops[last], rows)
        sid = self._next
        self._next += 1
        offsets = np.concatenate(([0], np.cumsum(stops - starts)[:-1]))
        self.where[j][chunks] = sid
        self.base[j][chunks] = offsets
        self.segments[sid] = (j, chunks, rows, memory.nbytes)
        self.used += memory.nbytes
        self.peak = max(self.peak, self.used)
        self.reads += 1
        self.chunks_read[j] += len(chunks)

    def _evict(self, incoming: int, keep: set[int]) -> None:
        """Drop least recently used segments (not those in ``keep``) to make room."""
        for sid in list(self.segments):
            if self.used + incoming <= self.budget:
                return
            if sid not in keep:
                self._drop(sid)

    def passed(self, j: int, row: int) -> None:
        """Drop leaf ``j``'s segments that hold only rows before ``row``.

        For an order that never goes back (sequential): their rows are used, and
        their arrays can be read into again once the batches of them are gone.
        """
        unit = self.units[j]
        for sid, (leaf, chunks, _, _) in list(self.segments.items()):
            if leaf == j and (int(chunks[-1]) + 1) * unit <= row:
                self._drop(sid)

    def _drop(self, sid: int) -> None:
        j, chunks, rows, size = self.segments.pop(sid)
        where = self.where[j]
        mine = chunks[where[chunks] == sid]
        where[mine] = -1
        self.used -= size
        memory = rows.base  # the flat bytes the segment's rows view
        assert isinstance(memory, np.ndarray) and memory.base is None
        del rows
        self.spare.append(memory)
        self.owners.append(j)

    def adopt(self, memories: list[np.ndarray]) -> None:
        """Take ``memories`` (an earlier pass's arrays) as spare arrays, of no leaf yet."""
        for memory in memories[-SPARE_ARRAYS:]:
            self.spare.append(memory)
            self.owners.append(-1)

    def leave(self) -> list[np.ndarray]:
        """The arrays of this cache's segments and spares, newest first, within its budget.

        The cache keeps its segments (a view handed out stays valid either way) and
        drops its spares; a later pass reads into these arrays once they are free.
        """
        memories = [rows.base for _, _, rows, _ in reversed(self.segments.values())]
        memories += reversed(self.spare)
        self.spare.clear()
        self.owners.clear()
        out: list[np.ndarray] = []
        room = self.budget
        for memory in memories:
            if isinstance(memory, np.ndarray) and memory.nbytes <= room:
                room -= memory.nbytes
                out.append(memory)
        return out[::-1]

    def _memory(self, j: int, size: int) -> np.ndarray:
        """Flat bytes, at least ``size`` of them, to read a segment of leaf ``j`` into.

        A spare array that nothing outside the cache holds and that fits (``size`` to
        twice ``size`` bytes), else new memory. Free spares are kept within the
        budget, newest first, and besides that the newest of each other leaf: its
        next read takes it, and would take as much new memory without it.
        """
        spare, owners = self.spare, self.owners
        memory = None
        for i in range(len(spare)):
            if size <= spare[i].nbytes <= 2 * size and _refs(spare[i]) <= _ONE_HOLDER:
                memory = spare[i]
                del spare[i], owners[i]
                break
        room = self.budget - self.used - (size if memory is None else memory.nbytes)
        kept = {j}
        for i in reversed(range(len(spare))):
            if _refs(spare[i]) <= _ONE_HOLDER:
                if spare[i].nbytes <= room:
                    room -= spare[i].nbytes
                    kept.add(owners[i])
                elif owners[i] not in kept:
                    kept.add(owners[i])
                else:
                    del spare[i], owners[i]
        if memory is None:
            self.allocated[j] += 1
            memory = np.empty(size, dtype=np.uint8)
        return memory


def _refs(memory: np.ndarray) -> int:
    return sys.getrefcount(memory)


def _one_holder() -> int:
    """What `_refs` gives for an array that one container alone holds (measured, not assumed)."""
    held = deque([np.empty(0)])
    return _refs(held[0])


_ONE_HOLDER = _one_holder()


def _distinct(chunks: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``chunks``, whose equal values mostly come in runs."""
    if len(chunks) > 1:
        chunks = chunks[np.concatenate(([True], chunks[1:] != chunks[:-1]))]
    return np.unique(chunks)


def sorted_take(leaf: StoreArray, idx: np.ndarray) -> np.ndarray:
    """Rows ``idx`` of ``leaf``: read sorted and deduplicated, then put in ``idx``'s order."""
    if len(idx) and (idx[1:] > idx[:-1]).all():
        if idx[-1] - idx[0] + 1 == len(idx):
            return leaf.read(int(idx[0]), int(idx[-1]) + 1)
        return read_parts(leaf, idx)
    rows, back = np.unique(idx, return_inverse=True)
    return read_parts(leaf, rows).take(back, axis=0)


def read_parts(leaf: StoreArray, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` (sorted, distinct) of ``leaf``, read in parts of ``PART_CHUNKS`` chunks.

    Raises:
        Stopped: the Loader's background thread running the read was told to stop.
    """
    unit = leaf.chunk_rows
    if unit is None or len(rows) <= PART_CHUNKS:
        return leaf.read_rows(rows)
    chunk = rows // unit
    firsts = np.flatnonzero(chunk[1:] != chunk[:-1]) + 1  # where each later chunk's rows start
    if len(firsts) < PART_CHUNKS:
        return leaf.read_rows(rows)
    bounds = [0, *firsts[PART_CHUNKS - 1 :: PART_CHUNKS].tolist(), len(rows)]
    out = np.empty((len(rows), *leaf.shape[1:]), dtype=leaf.dtype)
    for a, b in itertools.pairwise(bounds):
        if stopping():
            raise Stopped
        out[a:b] = leaf.read_rows(rows[a:b])
    return out


class StoreReads:
    """The reads of a Loader's store leaves: a backend-like group of its rows.

    ``cache_bytes`` None: sorted row reads per batch. An int: whole chunks through
    a [`ChunkCache`][looptoolkit._store_reads.ChunkCache] of that many bytes, one per pass
    (and one, behind a lock, for single batches read with `take`).
    """

    name = "store"

    def __init__(self, leaves: Sequence[StoreArray], n: int, unit: int) -> None:
        self.leaves = list(leaves)
        self.n = n
        self.unit = unit
        self.cache_bytes: int | None = None
        self.block = 1  # batches gathered at once from the cache (set by `plan_reads`)
        self.handoff = 1  # batches handed over at once by a background thread (`plan_reads`)
        self.ahead = 0  # rows of the order whose chunks a cache read reads along (`plan_reads`)
        self.forward = False  # the order never goes back to rows before a block (`plan_reads`)
        self.last: ChunkCache | None = None  # the cache of the pass that started last
        self._shared: ChunkCache | None = None
        # The arrays the last pass read into, for the next pass to read into again
        # (`ChunkCache.leave`): an epoch then starts without faulting in new pages.
        self._left: list[np.ndarray] = []
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(last=None, _shared=None, _lock=None, _left=[])
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def length(self, leaf: StoreArray) -> int:
        return len(leaf)

    def check(self) -> None:
        """Raise if a store changed its length under the Loader."""
        for leaf in self.leaves:
            now = leaf.length_now()
            if now != self.n:
                raise RuntimeError(
                    f"{leaf.path} changed under the Loader: it had {self.n} rows and now has "
                    f"{now}. Make a new Loader for the new rows."
                )

    def _cache(self) -> ChunkCache:
        assert self.cache_bytes is not None
        return ChunkCache(self.leaves, self.cache_bytes, self.unit)

    def take(self, leaves: Sequence[StoreArray], idx: np.ndarray) -> list[np.ndarray]:
        if self.cache_bytes is None:
            return [self._sorted(leaf, idx) for leaf in leaves]
        with self._lock:
            if self._shared is None:
                self._shared = self._cache()
            cache = self._shared
            return [self._cached(cache, leaf, idx) for leaf in leaves]

    @staticmethod
    def _sorted(leaf: StoreArray, idx: np.ndarray) -> np.ndarray:
        view = leaf.view()
        if view is not None:
            return gather_rows(view, idx)
        gathered = leaf.gather(idx)
        return sorted_take(leaf, idx) if gathered is None else gathered

    @staticmethod
    def _cached(cache: ChunkCache, leaf: StoreArray, idx: np.ndarray) -> np.ndarray:
        view = leaf.view()
        return cache.take(cache.leaves.index(leaf), idx) if view is None else gather_rows(view, idx)

    def take_batches(
        self, leaves: Sequence[StoreArray], batches: Iterable[np.ndarray]
    ) -> Iterator[list[np.ndarray]]:
        self.check()
        if self.cache_bytes is None:
            for idx in batches:
                yield [self._sorted(leaf, idx) for leaf in leaves]
            return
        cache = self._cache()
        left, self._left = self._left, []
        cache.adopt(left)
        del left
        self.last = cache
        try:
            yield from self._through(cache, leaves, batches)
        finally:
            self._left = cache.leave()  # the pass is over: its arrays go to the next one

    def _through(
        self, cache: ChunkCache, leaves: Sequence[StoreArray], batches: Iterable[np.ndarray]
    ) -> Iterator[list[np.ndarray]]:
        """The batches of ``batches`` read through ``cache``."""
        # A leaf that is a zero-copy view is gathered from it; the others through the cache.
        views = [leaf.view() for leaf in leaves]
        fetch = [
            functools.partial(cache.take, cache.leaves.index(leaf))
            if view is None
            else functools.partial(gather_rows, view)
            for leaf, view in zip(leaves, views, strict=True)
        ]
        batches = iter(batches)
        take: Callable[[int], list[np.ndarray]]
        if self.ahead:
            ahead = LookingAhead(batches, self.ahead)
            cache.upcoming, take = ahead.upcoming, ahead.take
        else:
            take = functools.partial(_take, batches)
        where = [
            cache.leaves.index(leaf) if view is None else None
            for leaf, view in zip(leaves, views, strict=True)
        ]
        while True:
            block = take(self.block)
            if len(block) <= 1:
                if block:
                    yield [f(block[0]) for f in fetch]
                    continue
                return
            idx = np.concatenate(block)
            bounds = [0, *itertools.accumulate(map(len, block))]
            start = int(idx[0])
            if _consecutive(idx):
                if self.forward:
                    for j in where:
                        if j is not None:
                            cache.passed(j, start)
                # Consecutive rows: each batch a view of the segment it lies in.
                cols = [
                    _cut(cache.pieces(j, start, start + len(idx)), bounds, start)
                    if j is not None
                    else _cut([(start, f(idx))], bounds, start)
                    for j, f in zip(where, fetch, strict=True)
                ]
                yield from map(list, zip(*cols, strict=True))
                # The block's views are the loop's now: the spans they lie in can be read
                # into again once the loop is done with them (`ChunkCache.spare`).
                del cols
                continue
            # One gather per leaf for the block; each batch a view of it.
            gathered = [f(idx) for f in fetch]
            for a, b in itertools.pairwise(bounds):
                yield [x[a:b] for x in gathered]


def _consecutive(idx: np.ndarray) -> bool:
    """Whether ``idx`` is consecutive rows ``idx[0], idx[0] + 1, ...`` (not empty)."""
    n = len(idx)
    return (
        bool(n)
        and int(idx[-1]) - int(idx[0]) + 1 == n
        and (n == 1 or bool((np.diff(idx) == 1).all()))
    )


def _cut(parts: list[tuple[int, np.ndarray]], bounds: list[int], start: int) -> list[np.ndarray]:
    """Rows ``start + bounds[i]`` to ``start + bounds[i + 1]`` of ``parts``, for each ``i``.

    ``parts``: ``(first row, rows)`` pairs, in order and back to back. A batch is a
    view of the part that holds it; one whose rows straddle parts is a copy of them.
    """
    out: list[np.ndarray] = []
    i, n = 0, len(bounds) - 1
    for first, rows in parts:
        at, end = start - first, first + len(rows) - start
        k = max(i, bisect.bisect_right(bounds, end) - 1)  # batches i to k - 1 end in this part
        out += [rows[at + a : at + b] for a, b in itertools.pairwise(bounds[i : k + 1])]
        i = k
        if i < n and bounds[i] < end:  # batch i begins in this part and ends in a later one
            out.append(_joined(parts, start + bounds[i], start + bounds[i + 1]))
            i += 1
    return out


def _joined(parts: list[tuple[int, np.ndarray]], a: int, b: int) -> np.ndarray:
    """Rows ``a:b`` of ``parts`` (``(first row, rows)`` in order, back to back), copied."""
    return np.concatenate(
        [
            rows[max(a, first) - first : min(b, first + len(rows)) - first]
            for first, rows in parts
            if first < b and first + len(rows) > a
        ]
    )


def _take(batches: Iterator[np.ndarray], k: int) -> list[np.ndarray]:
    return list(itertools.islice(batches, k))


class LookingAhead:
    """An order's batches taken in blocks, and the positions that follow those taken."""

    def __init__(self, batches: Iterator[np.ndarray], rows: int) -> None:
        self.batches = batches
        self.rows = rows  # positions `upcoming` gives (fewer at the end of the order)
        self.pending: deque[np.ndarray] = deque()  # batches looked at, not taken yet
        self.seen: np.ndarray | None = None  # what `upcoming` gave since the last take

    def take(self, k: int) -> list[np.ndarray]:
        """The next ``k`` batches (fewer at the end)."""
        self.seen = None
        pending = self.pending
        out = [pending.popleft() for _ in range(min(k, len(pending)))]
        if len(out) < k:
            out += itertools.islice(self.batches, k - len(out))
        return out

    def upcoming(self) -> np.ndarray:
        """The ``rows`` positions after the batches taken (the leaves of a block share them)."""
        if self.seen is None:
            pending = self.pending
            have = sum(map(len, pending))
            while have < self.rows:
                idx = next(self.batches, None)
                if idx is None:
                    break
                pending.append(idx)
                have += len(idx)
            self.seen = np.concatenate(pending) if pending else np.empty(0, dtype=np.intp)
        return self.seen


# -- how a Loader reads its stores -------------------------------------------------

# Default group of the grouped order over a store: this many chunks, fewer when a
# group of all store leaves would pass STORE_GROUP_BYTES.
STORE_GROUP_CHUNKS = 16
STORE_GROUP_BYTES = 1 << 28
# An order that uses one chunk at a time reads this many chunks ahead per call,
# fewer when they would pass READ_AHEAD_BYTES (all store leaves together).
READ_AHEAD_CHUNKS = 8
READ_AHEAD_BYTES = 1 << 25


def fit_ranks(store: StoreReads, world_size: int) -> None:
    """Blocks of a store without chunks of its own small enough for every rank to get some.

    Arrow columns and contiguous HDF5 datasets are read in blocks of the
    Loader's choosing (``BLOCK_ROWS`` rows or fewer). When ``world_size`` ranks
    would not each get a block, blocks of ``n // world_size`` rows are used, so
    that the grouped order gives every rank whole blocks for any ``world_size
    <= n``. A store with chunks of its own keeps them.
    """
    if any(leaf.chunk_rows is not None for leaf in store.leaves):
        return
    if min(chunk_shards(store.n, store.unit, world_size)) == 0:
        store.unit = max(1, store.n // world_size)


def default_group_size(store: StoreReads) -> int:
    """Rows per group of the grouped order over ``store`` when ``group_size`` is not given.

    Leaves read through zero-copy views only (a plain contiguous HDF5 dataset, a
    one-chunk Arrow column) decode nothing: their groups are the in-memory
    default, [`DEFAULT_GROUP_SIZE`][looptoolkit.order.DEFAULT_GROUP_SIZE] rows
    rounded up to whole blocks.
    """
    if all(leaf.view() is not None for leaf in store.leaves):
        return -(-DEFAULT_GROUP_SIZE // store.unit) * store.unit
    chunk = store.unit * sum(leaf.row_bytes for leaf in store.leaves)
    k = max(1, min(STORE_GROUP_CHUNKS, STORE_GROUP_BYTES // max(1, chunk)))
    return k * store.unit


def block_batches(row_bytes: int, batch_size: int) -> int:
    """Batches per block of gathers and of background hand-offs, for rows of ``row_bytes``."""
    return max(1, min(BLOCK_BATCHES, GATHER_BYTES // max(1, row_bytes * batch_size)))


def plan_reads(store: StoreReads, order: Any, cache_bytes: int | None) -> None:
    """Read whole chunks through a cache when ``order`` visits them whole, else sorted rows.

    Whole chunks: the chunk-grouped order, and the sequential one. The cache
    holds, by default, two groups of chunks of every store leaf (plus a chunk
    on each side of a group for leaves whose chunks are not aligned with it, and
    the buffers a read decodes into), so that the reads' memory stays within it.
    An order that uses one chunk at a time (sequential, groups of one chunk)
    reads ``READ_AHEAD_CHUNKS`` chunks ahead, its cache sized for them; with a
    ``cache_bytes`` too small for them, as many as fit.

    Raises:
        ValueError: ``cache_bytes`` with an order that reads rows, or too small
            for one group.
    """
    whole = order.chunk_rows is not None or (
        order.shuffle == "none" and order.sampling.kind == "permutation"
    )
    if not whole:
        if cache_bytes is not None:
            raise ValueError(
                "`cache_bytes` sizes the chunk cache of the orders that read a store's chunks "
                'whole (`shuffle=False` or `"grouped"`); this order reads sorted rows per batch.'
            )
        store.cache_bytes = None
        store.block = store.handoff = block_batches(
            sum(leaf.row_bytes for leaf in store.leaves), order.batch_size
        )
        return
    group = order.group_size if order.chunk_rows is not None else store.unit
    unit, row_bytes = store.unit, sum(leaf.row_bytes for leaf in store.leaves)

    def needed(ahead: int) -> int:
        return sum(
            (group + ahead + 2 * (leaf.chunk_rows or unit)) * leaf.row_bytes
            + leaf.transient_bytes()
            for leaf in store.leaves
        )

    need = needed(0)
    ahead = 0
    own = any(leaf.chunk_rows is not None for leaf in store.leaves)
    if own and group == unit:  # one chunk of a store's own at a time: read ahead
        ahead = max(1, min(READ_AHEAD_CHUNKS, READ_AHEAD_BYTES // max(1, unit * row_bytes))) * unit
    if cache_bytes is None:
        cache_bytes = 2 * needed(ahead)
    elif not isinstance(cache_bytes, int) or isinstance(cache_bytes, bool):
        raise TypeError(f"`cache_bytes` must be an int, got {type(cache_bytes).__name__}.")
    elif cache_bytes < need:
        raise ValueError(
            f"`cache_bytes` ({cache_bytes}) must hold one group of chunks of every store leaf "
            f"({need} bytes for groups of {group} rows); pass more, or a smaller `group_size`."
        )
    if ahead and cache_bytes < 2 * needed(ahead):  # as many chunks ahead as fit in half
        ahead = max(0, (cache_bytes // 2 - need) // max(1, row_bytes)) // unit * unit
    store.cache_bytes = cache_bytes
    store.ahead = ahead
    store.forward = order.chunk_rows is None  # sequential: each rank's rows in increasing order
    # A block within a group's rows touches at most two groups' chunks: what the cache holds.
    block = block_batches(sum(leaf.row_bytes for leaf in store.leaves), order.batch_size)
    store.block = max(1, min(block, group // order.batch_size))
    # Batches handed to the loop's thread at once. A sequential order's batches are
    # views of a read-ahead span (no copies): its batches go together.
    store.handoff = store.block
    if ahead and order.shuffle == "none":
        store.handoff = max(store.block, (group + ahead) // order.batch_size)
        if order.world_size == 1:  # consecutive rows: a block is views of the spans read
            store.block = store.handoff


ORDER_ARGS = (
    "shuffle", "seed", "group_size", "run_size", "drop_last", "weights", "replacement",
    "num_samples", "indices", "order_fn", "pad_shards",
)  # fmt: skip


def loader_order(
    n: int, batch_size: int, args: dict[str, Any], rank: int, world_size: int, store: Any
) -> Order:
    """The epoch order of a Loader (or ``make_dataloader``) over ``n`` rows.

    Args:
        n: rows of the data.
        batch_size: rows per batch.
        args: the order's options by name (``ORDER_ARGS``), as the Loader's ``_args`` holds them.
        rank: this process's rank, resolved.
        world_size: the number of ranks, resolved.
        store: the data's [`StoreReads`][looptoolkit._store_reads.StoreReads], or None: its
            blocks are fitted to the ranks, its grouped order takes whole chunks (default
            group size: ``default_group_size``).
    """
    options = {k: args[k] for k in ORDER_ARGS}
    if store is not None:
        fit_ranks(store, world_size)
        grouped = normalize_shuffle(options["shuffle"]) == "grouped"
        if options["group_size"] is None and grouped:
            options["group_size"] = default_group_size(store)
    chunk_rows = None if store is None else store.unit
    return Order(n, batch_size, rank=rank, world_size=world_size, chunk_rows=chunk_rows, **options)
