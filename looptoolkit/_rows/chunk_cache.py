"""The chunk cache of the Loader's store reads: whole chunks, read on demand, kept within a budget.

Used by [`StoreReads`][looptoolkit._rows.store_reads.StoreReads] for the orders that
visit chunks whole (sequential, chunk-grouped): a read fills one array (a
segment) with the chunks a batch needs and those the order visits next; batches
are gathers from segments, or views of one. An evicted segment's array is read
into again only once nothing outside the cache holds it (see
[`ChunkCache.spare`][looptoolkit._rows.chunk_cache.ChunkCache]). For a sequential
order, a leaf whose reads can run in the background (plain file reads, no GIL)
has its next span read there while the loop uses the one before
(``ChunkCache.later``); its rows are waited for when they are asked for.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence

import numpy as np

from looptoolkit._common.spare import ONE_HOLDER, refs
from looptoolkit.stores import StoreArray

__all__ = ["SPARE_ARRAYS", "ChunkCache"]

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
        # segment id -> (leaf, its chunks, its rows, the flat bytes they view)
        self.segments: OrderedDict[int, tuple[int, np.ndarray, np.ndarray, np.ndarray]] = (
            OrderedDict()
        )
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
        # Chunks to keep read ahead of the rows asked for, in the background, for the
        # leaves that can read that way (`StoreArray.read_ranges_later`): an order that
        # never goes back (sequential) sets it. 0: no read in the background.
        self.later = 0
        self.frontier = [-1] * len(self.leaves)  # the last chunk read (or being read), per leaf
        self.waiting: dict[int, Callable[[], None]] = {}  # segment -> wait for its read

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
            self._fill(j, _distinct(chunk[missing]), seg[~missing], ahead=True)
            seg = where[chunk]
        if self.waiting:
            self._ready(np.unique(seg).tolist())
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
        later = self.later and self.leaves[j].reads_later()
        if missing.any():
            # With `later`, what lies ahead is read in the background instead.
            self._fill(j, np.arange(first, last)[missing], seg[~missing], ahead=not later)
            seg = where[first:last]
        if later or self.waiting:
            present = np.unique(seg)
            if later:
                self._read_later(j, first, last, present)
            self._ready(present.tolist())
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

    def _fill(self, j: int, need: np.ndarray, present: np.ndarray, ahead: bool) -> None:
        """Read leaf ``j``'s missing chunks ``need``, keeping the segments of ``present``.

        ``ahead``: with the chunks of the ``upcoming`` rows not cached yet, in the same read.
        """
        where = self.where[j]
        if ahead and self.upcoming is not None:
            chunks = self._ahead(self.units[j])
            need = np.union1d(need, chunks[where[chunks] < 0])
        self._read(j, need, np.unique(present))

    def _ready(self, sids: list[int]) -> None:
        """Wait for the background reads of segments ``sids`` (raising what they raised)."""
        for sid in sids:
            wait = self.waiting.pop(sid, None)
            if wait is not None:
                wait()

    def _read_later(self, j: int, first: int, end: int, keep: np.ndarray) -> None:
        """Start reading leaf ``j``'s chunks ahead of chunks ``first:end`` in the background.

        Keeps the frontier ``max(later, end - first)`` chunks past ``end`` (the rows
        asked for next are there, or being read, when asked for), reading at least
        that many chunks at a time, where the leaf can read in the background.
        """
        leaf = self.leaves[j]
        frontier, span = self.frontier[j], max(self.later, end - first)
        count = len(self.where[j])  # the leaf's chunks
        target = min(count, end + span) - 1
        if frontier >= target:
            return
        chunks = np.arange(frontier + 1, min(count, frontier + 1 + max(span, target - frontier)))
        chunks = chunks[self.where[j][chunks] < 0]
        size = len(chunks) * self.units[j] * leaf.row_bytes + leaf.transient_bytes()
        # Only into room the cache has: evicting rows asked for soon would read them twice.
        if len(chunks) and self.used + size <= self.budget:
            self._read(j, chunks, keep, later=True)

    def _read(self, j: int, chunks: np.ndarray, keep: np.ndarray, later: bool = False) -> None:
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
        sid = self._next
        if later:
            self.waiting[sid] = leaf.read_ranges_later(starts[first], stops[last], rows)
        else:
            leaf.read_ranges(starts[first], stops[last], rows)
        self._next += 1
        self.frontier[j] = max(self.frontier[j], int(chunks[-1]))
        offsets = np.concatenate(([0], np.cumsum(stops - starts)[:-1]))
        self.where[j][chunks] = sid
        self.base[j][chunks] = offsets
        self.segments[sid] = (j, chunks, rows, memory)
        self.used += memory.nbytes
        self.peak = max(self.peak, self.used)
        self.reads += 1
        self.chunks_read[j] += len(chunks)

    def _evict(self, incoming: int, keep: set[int]) -> None:
        """Drop least recently used segments (not those in ``keep``) to make room.

        Segments still being read in the background (the rows asked for next) go last.
        """
        for pending in (False, True):
            for sid in list(self.segments):
                if self.used + incoming <= self.budget:
                    return
                if sid not in keep and (sid in self.waiting) == pending:
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
        # A background read not waited for holds its array until it ends: the array is
        # not free to read into again before then, and what it read is not needed.
        self.waiting.pop(sid, None)
        j, chunks, _, memory = self.segments.pop(sid)
        where = self.where[j]
        mine = chunks[where[chunks] == sid]
        where[mine] = -1
        self.used -= memory.nbytes
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
        memories = [memory for *_, memory in reversed(self.segments.values())]
        memories += reversed(self.spare)
        self.spare.clear()
        self.owners.clear()
        out: list[np.ndarray] = []
        room = self.budget
        for memory in memories:
            if memory.nbytes <= room:
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
            if size <= spare[i].nbytes <= 2 * size and refs(spare[i]) <= ONE_HOLDER:
                memory = spare[i]
                del spare[i], owners[i]
                break
        room = self.budget - self.used - (size if memory is None else memory.nbytes)
        kept = {j}
        for i in reversed(range(len(spare))):
            if refs(spare[i]) <= ONE_HOLDER:
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


def _distinct(chunks: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``chunks``, whose equal values mostly come in runs."""
    if len(chunks) > 1:
        chunks = chunks[np.concatenate(([True], chunks[1:] != chunks[:-1]))]
    return np.unique(chunks)


def _consecutive(idx: np.ndarray) -> bool:
    """Whether ``idx`` is consecutive rows ``idx[0], idx[0] + 1, ...`` (not empty)."""
    n = len(idx)
    return (
        bool(n)
        and int(idx[-1]) - int(idx[0]) + 1 == n
        and (n == 1 or bool((np.diff(idx) == 1).all()))
    )
