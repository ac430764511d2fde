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
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from looptoolkit._common.background import Stopped, stopping
from looptoolkit._rows.chunk_cache import ChunkCache, _consecutive
from looptoolkit.adapters import gather_rows
from looptoolkit.order._options import ORDER_ARGS
from looptoolkit.order._order import DEFAULT_GROUP_SIZE, Order, normalize_shuffle
from looptoolkit.order._sources import chunk_shards
from looptoolkit.stores import StoreArray

__all__ = ["ChunkCache", "StoreReads"]

# Batches are gathered from the cache in blocks of about this many bytes (at most
# BLOCK_BATCHES batches): one gather per leaf per block, the batches views of it.
GATHER_BYTES = 1 << 21
BLOCK_BATCHES = 32
# Chunks per part of a sorted read: zarr decodes a part's chunks concurrently, and a
# stopped background thread waits for one part (not a whole batch over hundreds of chunks).
PART_CHUNKS = 16


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
    a [`ChunkCache`][looptoolkit._rows.chunk_cache.ChunkCache] of that many bytes, one per pass
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
        # Whether a sequential order's next span may be read in the background (a
        # Loader in the thread mode with `prefetch > 0`; `ChunkCache.later`).
        self.background = False
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

    def remote(self) -> list[Any]:
        """The leaves in a bucket (their chunks fetched ahead of the reads)."""
        return [leaf for leaf in self.leaves if getattr(leaf, "remote", False)]

    def remote_reads(self) -> dict[str, int]:
        """This process's requests and bytes of the leaves in a bucket, summed (empty: none)."""
        return summed([leaf.counters for leaf in self.remote()])

    def take_batches(
        self, leaves: Sequence[StoreArray], batches: Iterable[np.ndarray]
    ) -> Iterator[list[np.ndarray]]:
        self.check()
        remote = [leaf for leaf in leaves if getattr(leaf, "remote", False)]
        if remote:
            yield from self._remote_pass(remote, leaves, batches)
            return
        yield from self._pass(leaves, batches)

    def _remote_pass(
        self, remote: list[Any], leaves: Sequence[StoreArray], batches: Iterable[np.ndarray]
    ) -> Iterator[list[np.ndarray]]:
        """A pass whose leaves in a bucket have the order's next chunks fetched ahead."""
        # Once per object listed: a Parquet file's columns share their file's look.
        owners = list({id(getattr(leaf, "file", leaf)): leaf for leaf in remote}.values())
        # One LIST (a HEAD for a file) each, for sizes and versions: sent together, so a
        # pass over several arrays waits one request's latency for them, not one per array.
        if len(owners) == 1:
            owners[0].start_pass()
        else:
            with ThreadPoolExecutor(min(len(owners), 16)) as pool:
                for _ in pool.map(lambda leaf: leaf.start_pass(), owners):
                    pass  # a failed LIST raises here
        try:
            yield from self._pass(leaves, announced(batches, remote))
        finally:
            for leaf in remote:
                leaf.forget()

    def _pass(
        self, leaves: Sequence[StoreArray], batches: Iterable[np.ndarray]
    ) -> Iterator[list[np.ndarray]]:
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
        # A pass over a bucket reads blocks of at most REMOTE_BLOCK batches: taking a
        # block's batch indices looks the order ahead (`announced`) for each, and with
        # larger blocks the first batch's objects would share the server with many more.
        per_block = min(self.block, REMOTE_BLOCK) if self.remote() else self.block
        take: Callable[[int], list[np.ndarray]]
        if self.background and self.forward and self.ahead:  # the next span, where it can be
            cache.later = max(1, self.ahead // self.unit)
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
            block = take(per_block)
            if len(block) <= 1:
                if block:
                    yield [f(block[0]) for f in fetch]
                    continue
                return
            idx = np.concatenate(block)
            lengths = list(map(len, block))
            bounds = [0, *itertools.accumulate(lengths)]
            start = int(idx[0])
            if _consecutive(idx):
                if self.forward:
                    for j in where:
                        if j is not None:
                            cache.passed(j, start)
                # Consecutive rows: each batch a view of the segment it lies in.
                size = lengths[0] if lengths.count(lengths[0]) == len(lengths) else 0
                cols = [
                    _cut(cache.pieces(j, start, start + len(idx)), bounds, start, size)
                    if j is not None
                    else _cut([(start, f(idx))], bounds, start, size)
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


def summed(counters: Sequence[Any]) -> dict[str, int]:
    """Fetch counters (``Counters``) summed, bounds as their largest; shared ones once."""
    out: dict[str, int] = {}
    # Leaves that share counters (a Parquet file's columns) are counted once.
    shared = {id(c): c for c in counters}
    for one in shared.values():
        for name, value in one.as_dict().items():
            if name in ("in_flight_bound", "max_in_flight", "ahead_bytes_bound"):
                out[name] = max(out.get(name, 0), value)
            else:
                out[name] = out.get(name, 0) + value
    return out


# Batches a block of a pass over a bucket holds at most (see `StoreReads._through`).
REMOTE_BLOCK = 8
# Batches of the order looked at (their chunks asked for) before each batch goes on: the
# look-ahead grows by this many less one a batch until it reaches the bytes bound.
ANNOUNCED_STEP = 8


def announced(batches: Iterable[np.ndarray], leaves: Sequence[Any]) -> Iterator[np.ndarray]:
    """``batches``, looked ahead of: each leaf is told the chunks the order needs next.

    Batches are taken from the order ahead of the reads until the bytes fetched
    ahead and not read reach each leaf's ``ahead_bytes`` bound (at least the next
    batch's chunks); every chunk not announced yet in this pass is announced, in
    the order of its first use. At most ``ANNOUNCED_STEP`` batches are taken from
    the order before each batch is handed on, so the first batch goes after its
    own chunks are asked for, not after a whole epoch's. The order ends with the
    epoch (or the shard's part of it): nothing past it is fetched.
    """
    source = iter(batches)
    pending: deque[np.ndarray] = deque()
    units = [leaf.chunk_rows or 1 for leaf in leaves]
    seen = [np.zeros(-(-len(leaf) // u), dtype=bool) for leaf, u in zip(leaves, units, strict=True)]
    bounds = [leaf.settings.ahead_bytes for leaf in leaves]
    done = False

    def more() -> bool:
        idx = next(source, None)
        if idx is None:
            return False
        pending.append(idx)
        for leaf, unit, mark in zip(leaves, units, seen, strict=True):
            chunks = idx // unit
            if len(chunks) > 1:  # first uses, in order: drop repeats, keep the first
                chunks = chunks[np.concatenate(([True], chunks[1:] != chunks[:-1]))]
            _, first = np.unique(chunks, return_index=True)
            chunks = chunks[np.sort(first)]
            new = chunks[~mark[chunks]]
            if len(new):
                mark[new] = True
                leaf.prefetch(new)
        return True

    while True:
        step = 0
        while not done and (
            not pending
            or (
                step < ANNOUNCED_STEP
                and all(
                    leaf.ahead_bytes() < bound for leaf, bound in zip(leaves, bounds, strict=True)
                )
            )
        ):
            step += 1
            if not more():
                done = True
        if not pending:
            return
        yield pending.popleft()


def _cut(
    parts: list[tuple[int, np.ndarray]], bounds: list[int], start: int, size: int = 0
) -> list[np.ndarray]:
    """Rows ``start + bounds[i]`` to ``start + bounds[i + 1]`` of ``parts``, for each ``i``.

    ``parts``: ``(first row, rows)`` pairs, in order and back to back. A batch is a
    view of the part that holds it; one whose rows straddle parts is a copy of them.
    ``size``: the one length of every batch, if they have one (0: not), so that a
    part's batches are cut by one reshape.
    """
    out: list[np.ndarray] = []
    i, n = 0, len(bounds) - 1
    for first, rows in parts:
        at, end = start - first, first + len(rows) - start
        k = max(i, bisect.bisect_right(bounds, end) - 1)  # batches i to k - 1 end in this part
        if size and k > i:  # views of a (k - i, size, ...) view of the part
            block = rows[at + bounds[i] : at + bounds[k]]
            out += list(block.reshape(k - i, size, *rows.shape[1:]))
        else:
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
                # As many batches as the last one's length says are missing, at once.
                size = len(pending[-1]) if pending else 0
                more = list(
                    itertools.islice(self.batches, -(-(self.rows - have) // size) if size else 1)
                )
                if not more:
                    break
                pending += more
                have += sum(map(len, more))
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
    default, [`DEFAULT_GROUP_SIZE`][looptoolkit.order._order.DEFAULT_GROUP_SIZE] rows
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
    ``cache_bytes`` too small for them, as many as fit. A sequential order's
    default cache has room for one more span: the next one, which a leaf read
    from its file directly reads in the background (`ChunkCache.later`).

    Raises:
        ValueError: ``cache_bytes`` with an order that reads rows, or too small
            for one group.
    """
    whole = order.chunk_rows is not None or (
        order.shuffle == "none" and order.sampling.kind == "permutation"
    )
    if not whole:
        refuse_scattered_remote(store, order)
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
    # One chunk of a store's own at a time: read ahead (a bucket's chunks are fetched
    # ahead by their fetcher instead; a read along would hold the first batch back).
    if own and group == unit and not store.remote():
        ahead = max(1, min(READ_AHEAD_CHUNKS, READ_AHEAD_BYTES // max(1, unit * row_bytes))) * unit
    if cache_bytes is None:
        cache_bytes = 2 * needed(ahead)
        if ahead and order.chunk_rows is None:  # sequential: room for a span read in the background
            cache_bytes += (group + ahead) * row_bytes
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


# An order whose first batch would fetch more than this many times its bytes from a
# bucket (with nothing kept between batches) is refused without a disk cache.
REFUSED_AMPLIFICATION = 2.0
CHECKED_BATCHES = 8  # the first batches whose chunks are counted


def refuse_scattered_remote(store: StoreReads, order: Any) -> None:
    """Refuse an order that reads rows scattered over chunks in a bucket with no disk cache.

    Such an order reads each batch's rows sorted, chunk by chunk: every batch
    fetches the whole of every chunk it touches, except the few kept in memory
    since a batch before (``RECENT_BYTES``). The cost is measured on the
    order's first ``CHECKED_BATCHES`` batches (the rows of the chunks they touch
    over theirs); above ``REFUSED_AMPLIFICATION`` the order is refused.

    Raises:
        ValueError: a leaf in a bucket without a disk cache (named, with the cost).
    """
    leaves = [leaf for leaf in store.remote() if leaf.cache is None]
    if not leaves:
        return
    epoch = order.epoch(0)
    firsts = [epoch.batch(i) for i in range(min(CHECKED_BATCHES, len(epoch)))]
    rows = sum(map(len, firsts))
    for leaf in leaves:
        unit = leaf.chunk_rows or 1
        per_batch = [len(np.unique(idx // unit)) for idx in firsts]
        union = len(np.unique(np.concatenate(firsts) // unit))
        if union * unit / max(1, rows) <= REFUSED_AMPLIFICATION:
            continue
        touched = sum(per_batch) / len(per_batch)
        times = touched * unit * len(firsts) / max(1, rows)
        raise ValueError(
            f"{leaf.path} is in a bucket and this order reads rows scattered over its chunks: "
            f"each of its first batches touches {touched:.0f} of its "
            f"{-(-len(leaf) // unit)} chunks, about {times:.0f}x the bytes it uses. Pass "
            '`shuffle="grouped"` (each chunk fetched about once an epoch; '
            "`looptoolkit.group_size_for(data, memory_bytes)` gives the largest group a memory "
            "budget holds), or read it through a chunk cache on disk: "
            "`looptoolkit.stores.bucket(array, cache_dir=..., cache_bytes=...)`."
        )


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
        store: the data's [`StoreReads`][looptoolkit._rows.store_reads.StoreReads], or None: its
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
