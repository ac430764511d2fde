"""Vectorised plans of an epoch of variable-length rows: which rows (or pieces) make each batch.

The order step of the variable-length path. Every plan is a pure function of the epoch's row
order (from [`Order`][looptoolkit.Order], itself a function of ``(seed, epoch)``) and the rows'
lengths, computed with NumPy at the start of the epoch, with no Python loop over rows:

- [`SortedWindows`][looptoolkit.ragged._plans.SortedWindows]: the epoch's order cut into windows,
  each sorted longest first (one sort of packed integer keys, rows of a window at once).
- [`greedy_bounds`][looptoolkit.ragged._plans.greedy_bounds]: token budgets. Rows are taken in
  order while the batch's cost fits the budget (``B * L`` for padded batches, the sum of lengths
  for flat ones), window by window, every window at once, so a batch never crosses a window
  boundary and each window may end on one short batch. Summed costs and windows sorted longest
  first jump a whole batch per array pass (a prefix sum, or ``budget // L`` of the batch's first
  row); padded costs in the epoch's order take one pass per row position of a window.
- [`length_grouped`][looptoolkit.ragged._plans.length_grouped]: windows of 50 batches sorted by
  length, cut into batches, and the whole batches shuffled.
- [`pack_ranges`][looptoolkit.ragged._plans.pack_ranges]: concatenate-then-split; the pieces of
  the rows that fall in a range of the epoch's token stream, cut at row boundaries.
- [`fit_rows`][looptoolkit.ragged._plans.fit_rows]: whole rows into fixed-length rows by first
  fit decreasing within windows of the epoch's order, in lockstep over the windows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "FIT_WINDOW",
    "GROUP_WINDOW_BATCHES",
    "SortedWindows",
    "batch_order",
    "fit_rows",
    "greedy_bounds",
    "length_grouped",
    "pack_ranges",
    "spread",
    "window_size",
]

# Batches per window of a length-grouped order (HF's megabatches).
GROUP_WINDOW_BATCHES = 50
# Rows per window of first-fit packing: each row is placed by one pass over every window.
FIT_WINDOW = 128
# Windows packed together by one pass: their bins stay in the processor's cache.
_FIT_CHUNK = 8192


def window_size(m: int) -> int:
    """Rows per window of the token-budget greedy over ``m`` rows: about ``2 * sqrt(m)``.

    Budgets in the epoch's order cost one array pass per position of a window over
    ``m / window`` windows, and each window may end on one short batch: ``2 * sqrt(m)`` balances
    the two (at 10M rows, 6,325 passes over 1,582 windows).
    """
    return max(256, 2 * math.isqrt(max(m, 1)))


class SortedWindows:
    """Rows ``[w * size, (w + 1) * size)`` of an order, each window sorted longest first.

    Ties keep their order. One sort of integer keys ``(longest first, position)`` per window
    (every window at once); the positions and lengths are read back from the keys when asked.
    Flattened, the first ``m`` sorted positions are the rows (the last window's padding sorts
    last).

    Args:
        lengths: the rows' lengths in the order (non-negative ints).
        size: rows per window.
    """

    def __init__(self, lengths: np.ndarray, size: int) -> None:
        m = len(lengths)
        self.m, self.size = m, size
        self.windows = max(1, -(-m // size))
        self.top = int(lengths.max()) if m else 0
        self.bits = max(1, (size - 1).bit_length())
        wide = (self.top + 2) << self.bits >= 1 << 32
        dtype = np.uint64 if wide else np.uint32
        # Key: (top + 1 - length) above the position; padding (length -1) sorts last.
        flat = np.full(self.windows * size, self.top + 2, dtype=dtype)
        np.subtract(dtype(self.top + 1), lengths.astype(dtype, copy=False), out=flat[:m])
        key: np.ndarray[Any, Any] = flat.reshape(self.windows, size)
        np.left_shift(key, dtype(self.bits), out=key)
        np.bitwise_or(key, np.arange(size, dtype=dtype), out=key)
        key.sort(axis=1)
        self.key = key
        self.mask = dtype((1 << self.bits) - 1)

    def lengths(self, dtype: np.dtype | type = np.int64) -> np.ndarray:
        """``(windows, size)``: the sorted lengths, the last window's padding 0."""
        out = (self.top + 1) - np.right_shift(self.key, self.bits).astype(np.int64)
        np.maximum(out, 0, out=out)
        return out.astype(dtype, copy=False)

    def order(self) -> np.ndarray:
        """The ``m`` positions of the order, window by window, each window longest first."""
        at = np.empty(self.key.shape, dtype=np.intp)
        np.bitwise_and(self.key, self.mask, out=at, casting="unsafe")
        at += (np.arange(self.windows, dtype=np.intp) * self.size)[:, None]
        return at.reshape(-1)[: self.m]


def greedy_bounds(
    cost: np.ndarray,
    budget: int,
    *,
    mode: str,
    window: int,
    padded: Callable[[np.ndarray], np.ndarray] | None = None,
    sorted_desc: bool = False,
) -> np.ndarray:
    """Batch boundaries of the greedy token budget over rows of ``cost``, window by window.

    Args:
        cost: per row in order, its length (``mode="sum"``: the batch costs the sum) or, for
            ``mode="max"``, its padded length (the batch costs ``count * max``), or its length
            with ``padded`` given (the padded length of a batch whose longest row has it).
        budget: the largest cost of a batch; no row may cost more on its own.
        mode: ``"sum"`` or ``"max"``.
        window: rows per window; no batch crosses a window boundary.
        padded: maps lengths to padded lengths (``mode="max"``; None: ``cost`` is padded).
        sorted_desc: each window of ``cost`` is sorted longest first (``mode="max"``): a
            batch's first row is its longest.

    Returns:
        ``k + 1`` increasing positions from 0 to ``len(cost)``: batch ``j`` is rows
        ``[b[j], b[j + 1])``.
    """
    m = len(cost)
    if m == 0:
        return np.zeros(1, dtype=np.int64)
    first = np.arange(0, m, window, dtype=np.int64)
    end = np.minimum(first + window, m)
    if mode == "sum":
        total = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(cost, out=total[1:])

        def step(at: np.ndarray) -> np.ndarray:
            # The most rows from `at` whose lengths sum to the budget (at least one).
            return np.searchsorted(total, total[at] + budget, side="right") - 1

        return _jumps(first, end, step)
    if sorted_desc:

        def step(at: np.ndarray) -> np.ndarray:
            longest = cost[at].astype(np.int64) if padded is None else padded(cost[at])
            return at + np.where(longest > 0, budget // np.maximum(longest, 1), window)

        return _jumps(first, end, step)
    padded_cost = cost if padded is None else padded(cost.astype(np.int64, copy=False))
    return _lockstep_max(padded_cost, budget, window)


def _jumps(at: np.ndarray, end: np.ndarray, step: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Batch starts from each window's start, ``step`` giving each batch's end (within ``end``)."""
    starts = [at]
    m = int(end[-1])
    while len(at):
        at = np.maximum(np.minimum(step(at), end), at + 1)
        more = at < end
        at, end = at[more], end[more]
        starts.append(at)
    out = np.concatenate(starts)
    out.sort()
    return np.append(out, m)


def _lockstep_max(cost: np.ndarray, budget: int, window: int) -> np.ndarray:
    """Padded budgets in any order: one array pass per row position of a window."""
    m = len(cost)
    windows = -(-m // window)
    flat = np.zeros(windows * window, dtype=np.int64)
    flat[:m] = cost
    # Position-major: row j holds the j-th row of every window (contiguous per pass).
    grid = np.ascontiguousarray(flat.reshape(windows, window).T)
    starts = np.zeros((window, windows), dtype=bool)
    starts[0] = True
    acc = grid[0].copy()
    grown = np.empty_like(acc)
    count = np.ones(windows, dtype=np.int64)
    for j in range(1, window):
        c, over = grid[j], starts[j]
        np.maximum(acc, c, out=grown)
        np.greater((count + 1) * grown, budget, out=over)
        np.copyto(grown, c, where=over)
        acc, grown = grown, acc
        count += 1
        count[over] = 1
    flags = starts.T.reshape(-1)[:m]
    return np.append(np.flatnonzero(flags), m).astype(np.int64)


def length_grouped(
    lengths: np.ndarray, batch_size: int, rng: np.random.Generator | None
) -> tuple[SortedWindows, np.ndarray, np.ndarray]:
    """Rows sorted by length within windows of 50 batches, then whole batches shuffled.

    Args:
        lengths: the rows' lengths in the epoch's order.
        batch_size: rows per batch.
        rng: shuffles the full batches (None: they keep the windows' order).

    Returns:
        ``(windows, starts, stops)``: the sorted windows, and each batch's flat sorted positions
        ``[starts[u], stops[u])`` (every batch full but the last, which stays last).
    """
    m = len(lengths)
    windows = SortedWindows(lengths, batch_size * GROUP_WINDOW_BATCHES)
    full = m // batch_size
    order = batch_order(full, rng)
    starts = np.append(order * batch_size, full * batch_size)[: -(-m // batch_size)]
    stops = np.minimum(starts + batch_size, m)
    return windows, starts, stops


def batch_order(full: int, rng: np.random.Generator | None) -> np.ndarray:
    """The order of ``full`` whole batches of a length-grouped epoch (``rng``: shuffled)."""
    if rng is None:
        return np.arange(full, dtype=np.int64)
    return rng.permutation(full)  # `arange(full)[rng.permutation(full)]`, one array


def spread(lo: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``concatenate([arange(l, l + c) for l, c in zip(lo, counts)])``, in one pass."""
    total = int(counts.sum())
    return np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(total)


def pack_ranges(
    stream: np.ndarray, starts: np.ndarray, stops: np.ndarray, seq_len: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pieces of token ranges of the epoch's stream, cut at row boundaries, all at once.

    Args:
        stream: ``m + 1`` cumulative lengths of the rows in the epoch's order.
        starts: first token of each range (multiples of ``seq_len``).
        stops: end of each range.
        seq_len: tokens per packed row.

    Returns:
        ``(row, offset, length, k)``: position ``row`` of each piece in the epoch's order, its
        first token within that row, its length, and ``k`` its range; pieces in stream order,
        range by range.
    """
    k = np.arange(len(starts))
    # Cuts: each range's start, its inner row boundaries, the row boundaries inside it.
    lo = np.searchsorted(stream, starts, side="right")
    hi = np.searchsorted(stream, stops, side="left")
    inner = np.maximum(hi - lo, 0)
    rows = np.maximum(-(-(stops - starts) // seq_len) - 1, 0)
    row_cuts = np.repeat(starts, rows) + (spread(np.ones(len(k), np.int64), rows) * seq_len)
    values = np.concatenate([starts, stream[spread(lo, inner)], row_cuts, stops])
    owner = np.concatenate([k, np.repeat(k, inner), np.repeat(k, rows), k])
    order = np.lexsort((values, owner))
    values, owner = values[order], owner[order]
    begin, end = values[:-1], values[1:]
    keep = (owner[:-1] == owner[1:]) & (end > begin)
    begin, end, which = begin[keep], end[keep], owner[:-1][keep]
    row = np.searchsorted(stream, begin, side="right") - 1
    return row, begin - stream[row], end - begin, which


def fit_rows(
    lengths: np.ndarray, seq_len: int, max_segments: int | None, window: int = FIT_WINDOW
) -> tuple[np.ndarray, np.ndarray]:
    """Whole rows into fixed-length rows of ``seq_len``: first fit decreasing within windows.

    Each window's pieces, longest first, go one by one to the first of its packed rows with
    room (a new row when none has). One array pass per position of a window places that
    position's piece of every window at once, comparing it with the rows opened so far.

    Args:
        lengths: the pieces' lengths in the epoch's order, each in ``[0, seq_len]``.
        seq_len: elements per packed row.
        max_segments: at most this many pieces per packed row (None: no limit).
        window: pieces per window; a packed row holds pieces of one window only.

    Returns:
        ``(piece, row_first)``: the pieces' positions in the epoch's order grouped by packed
        row (each row's pieces in the epoch's order), and the ``rows + 1`` positions in
        ``piece`` where each packed row starts.
    """
    m = len(lengths)
    if m == 0:
        return np.zeros(0, np.int64), np.zeros(1, np.int64)
    sw = SortedWindows(lengths, window)
    count, size, bits = sw.windows, sw.size, sw.bits
    dtype = np.int16 if seq_len < 1 << 14 else np.int32 if seq_len < 1 << 30 else np.int64
    group = np.uint16 if 2 * bits <= 16 else np.uint32
    piece = np.empty(count * size, dtype=np.int32 if count * size < 1 << 31 else np.int64)
    rows_of: list[np.ndarray] = []  # each window's packed rows, in order
    tail = m - (count - 1) * size  # the last window's pieces; its padding goes last
    for lo in range(0, count, _FIT_CHUNK):
        hi = min(lo + _FIT_CHUNK, count)
        key = sw.key[lo:hi]
        # The sorted lengths, the padding 0, position-major (a row of the array per pass).
        top = sw.top + 1
        sizes = np.right_shift(key, bits)
        np.minimum(sizes, top, out=sizes)
        np.subtract(top, sizes, out=sizes)
        place = _first_fit(_transposed(sizes.astype(dtype)), seq_len, max_segments)
        # Each window's pieces grouped by packed row, in the epoch's order within a row.
        by_row: np.ndarray[Any, Any] = _transposed(place)
        same = by_row.dtype.itemsize == np.dtype(group).itemsize  # rows >= 0: a view will do
        by_row = by_row.view(group) if same else by_row.astype(group)
        if hi == count:
            by_row[-1, tail:] = size - 1
        np.left_shift(by_row, bits, out=by_row)
        np.bitwise_or(by_row, np.bitwise_and(key, sw.mask).astype(group), out=by_row)
        by_row.sort(axis=1)
        at = np.bitwise_and(by_row, (1 << bits) - 1).astype(piece.dtype)
        at += (np.arange(lo, hi, dtype=piece.dtype) * size)[:, None]
        piece[lo * size : hi * size] = at.reshape(-1)
        # Where each packed row starts: a window's start, or a change of its row number.
        row = np.right_shift(by_row, bits)
        change = np.empty(row.shape, dtype=bool)
        change[:, 0] = True
        np.not_equal(row[:, 1:], row[:, :-1], out=change[:, 1:])
        rows_of.append(np.flatnonzero(change) + lo * size)
    row_first = np.concatenate(rows_of)
    return piece[:m], np.append(row_first[row_first < m], m)


def _transposed(a: np.ndarray, tile: int = 64) -> np.ndarray:
    """``a.T`` as a new C-ordered array, copied in tiles that stay in cache."""
    out = np.empty(a.shape[::-1], dtype=a.dtype)
    for lo in range(0, a.shape[0], tile):
        out[:, lo : lo + tile] = a[lo : lo + tile].T
    return out


def _first_fit(sizes: np.ndarray, seq_len: int, max_segments: int | None) -> np.ndarray:
    """First fit of ``sizes[j]`` (the j-th piece of each window, longest first), for every j.

    Args:
        sizes: ``(pieces, windows)``, each window's pieces in the order they are placed.
        seq_len: room of a packed row.
        max_segments: at most this many pieces per packed row (None: no limit).

    Returns:
        ``(pieces, windows)``: the packed row of each piece within its window.
    """
    k, windows = sizes.shape
    # room[b, w]: room left in row b of window w; rows past the last opened have all of seq_len
    # (so the first of them is where a piece that fits nowhere goes). A row holding
    # max_segments pieces has room -1.
    room = np.full((k + 1, windows), seq_len, dtype=sizes.dtype)
    used = np.zeros((k + 1, windows), dtype=np.int32) if max_segments is not None else None
    flat_room = room.reshape(-1)
    flat_used = used.reshape(-1) if used is not None else None
    index_type = np.int16 if k < 1 << 14 else np.int32
    rank = np.arange(k + 1, dtype=index_type)[:, None]
    key = np.empty((k + 1, windows), dtype=index_type)
    short = np.empty((k + 1, windows), dtype=bool)
    place = np.empty((k, windows), dtype=index_type)
    column = np.arange(windows, dtype=np.intp)
    at = np.empty(windows, dtype=np.intp)
    width = 1  # rows compared: one past the most opened in any window
    for j in range(k):
        size = sizes[j]
        # The first row with room: its number, or k + 1 + number where it is short.
        np.less(room[:width], size, out=short[:width])
        np.multiply(short[:width], k + 1, out=key[:width], dtype=index_type)
        key[:width] += rank[:width]
        where = key[:width].min(axis=0)
        np.multiply(where, windows, out=at, dtype=np.intp)
        at += column
        flat_room[at] -= size
        if flat_used is not None:
            flat_used[at] += 1
            flat_room[at[flat_used[at] >= max_segments]] = -1
        width = max(width, int(where.max()) + 2)
        place[j] = where
    return place
