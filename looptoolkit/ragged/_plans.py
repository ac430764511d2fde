"""Vectorised plans of an epoch of variable-length rows: which rows (or pieces) make each batch.

The order step of the variable-length path. Every plan is a pure function of the epoch's row
order (from [`Order`][looptoolkit.Order], itself a function of ``(seed, epoch)``) and the rows'
lengths, computed with NumPy at the start of the epoch, with no Python loop over rows:

- [`greedy_bounds`][looptoolkit.ragged._plans.greedy_bounds]: token budgets. Rows are taken in
  order while the batch's cost fits the budget (``B * L`` for padded batches, the sum of lengths
  for flat ones). The greedy runs in lockstep over windows of rows (one array pass per row
  position of a window, every window at once), so a batch never crosses a window boundary:
  ``O(sqrt(n))`` array passes, and one short batch at most per window.
- [`length_grouped`][looptoolkit.ragged._plans.length_grouped]: windows of 50 batches sorted by
  length, cut into batches, and the whole batches shuffled.
- [`pack_ranges`][looptoolkit.ragged._plans.pack_ranges]: concatenate-then-split; the pieces of
  the rows that fall in a range of the epoch's token stream, cut at row boundaries.
- [`fit_rows`][looptoolkit.ragged._plans.fit_rows]: whole rows into fixed-length rows by first
  fit decreasing within windows of the epoch's order, in lockstep over the windows.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "fit_rows",
    "greedy_bounds",
    "length_grouped",
    "pack_ranges",
    "sort_desc",
    "spread",
    "window_size",
]

# Batches per window of a length-grouped order (HF's megabatches).
GROUP_WINDOW_BATCHES = 50
# Rows per window of first-fit packing: each row is placed by one pass over every window.
FIT_WINDOW = 128


def window_size(m: int) -> int:
    """Rows per window of the token-budget greedy over ``m`` rows: about ``2 * sqrt(m)``.

    The greedy costs one array pass per position of a window, over ``m / window`` windows,
    and each window may end on one short batch: ``2 * sqrt(m)`` balances the two (at 10M rows,
    6,325 passes over 1,582 windows).
    """
    return max(256, 2 * math.isqrt(max(m, 1)))


def greedy_bounds(
    cost: np.ndarray, budget: int, *, mode: str, window: int, max_count: int | None = None
) -> np.ndarray:
    """Batch boundaries of the greedy token budget over rows of ``cost``, window by window.

    Args:
        cost: per row in order, its length (``mode="sum"``: the batch costs the sum) or its
            padded length (``mode="max"``: the batch costs ``count * max``).
        budget: the largest cost of a batch; no row may cost more on its own.
        mode: ``"sum"`` or ``"max"``.
        window: rows per window; no batch crosses a window boundary.
        max_count: at most this many rows per batch (None: no limit).

    Returns:
        ``k + 1`` increasing positions from 0 to ``len(cost)``: batch ``j`` is rows
        ``[b[j], b[j + 1])``.
    """
    m = len(cost)
    if m == 0:
        return np.zeros(1, dtype=np.int64)
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
    counting = mode == "max" or max_count is not None
    for j in range(1, window):
        c, over = grid[j], starts[j]
        if mode == "sum":
            np.add(acc, c, out=grown)
            np.greater(grown, budget, out=over)
        else:
            np.maximum(acc, c, out=grown)
            np.greater((count + 1) * grown, budget, out=over)
        if max_count is not None:
            over |= count >= max_count
        np.copyto(grown, c, where=over)
        acc, grown = grown, acc
        if counting:
            count += 1
            count[over] = 1
    flags = starts.T.reshape(-1)[:m]
    return np.append(np.flatnonzero(flags), m).astype(np.int64)


def length_grouped(
    lengths: np.ndarray, batch_size: int, rng: np.random.Generator | None
) -> tuple[np.ndarray, np.ndarray]:
    """Rows sorted by length within windows of 50 batches, then whole batches shuffled.

    Args:
        lengths: the rows' lengths in the epoch's order.
        batch_size: rows per batch.
        rng: shuffles the full batches (None: they keep the windows' order).

    Returns:
        ``(order, bounds)``: positions into the epoch's order, regrouped, and the batch
        boundaries into ``order`` (every batch full but the last).
    """
    m = len(lengths)
    window = batch_size * GROUP_WINDOW_BATCHES
    windows = -(-m // window)
    grid = np.full(windows * window, -1, dtype=np.int64)
    grid[:m] = lengths
    # Longest first within each window; padding positions (-1) sort last and are dropped.
    within = sort_desc(grid.reshape(windows, window) + 1)
    order = (within + (np.arange(windows) * window)[:, None]).reshape(-1)
    order = order[order < m] if windows * window != m else order
    full = m // batch_size
    whole = order[: full * batch_size].reshape(full, batch_size)
    if rng is not None:
        whole = whole[rng.permutation(full)]
    regrouped = np.concatenate([whole.reshape(-1), order[full * batch_size :]])
    cuts = np.append(np.arange(0, m, batch_size), m).astype(np.int64)
    return regrouped, cuts


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
) -> tuple[np.ndarray, np.ndarray, int]:
    """Whole rows into fixed-length rows of ``seq_len``: first fit decreasing within windows.

    One pass per position of a window places that position's piece of every window at once
    (the first packed row of its window with room, or a new one), so the cost is ``window``
    array passes over ``(windows, rows per window)``.

    Args:
        lengths: the pieces' lengths in the epoch's order, each ``<= seq_len``.
        seq_len: elements per packed row.
        max_segments: at most this many pieces per packed row (None: no limit).
        window: pieces per window; a packed row holds pieces of one window only.

    Returns:
        ``(piece, row, rows)``: the pieces' positions in the epoch's order, grouped by packed
        row (each row's pieces longest first), the packed row of each, and the number of rows.
    """
    m = len(lengths)
    if m == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    windows = -(-m // window)
    flat = np.zeros(windows * window, dtype=np.int64)
    flat[:m] = lengths
    sorted_at = sort_desc(flat.reshape(windows, window))
    sizes = np.take_along_axis(flat.reshape(windows, window), sorted_at, axis=1)
    real = (sorted_at + (np.arange(windows) * window)[:, None]) < m
    # Room left in each window's rows; an unused row has all of seq_len. Pieces that would
    # break `max_segments` see a full row (room -1).
    width = 8
    room = np.full((windows, width), seq_len, dtype=np.int64)
    used = np.zeros((windows, width), dtype=np.int64) if max_segments is not None else None
    place = np.zeros((windows, window), dtype=np.int64)
    every = np.arange(windows)
    for j in range(window):
        size = sizes[:, j]
        fits = room >= size[:, None]
        where = fits.argmax(axis=1)
        if not fits[every, where].all():  # some window needs a row past the last column
            room = np.concatenate([room, np.full((windows, width), seq_len, np.int64)], axis=1)
            if used is not None:
                used = np.concatenate([used, np.zeros((windows, width), np.int64)], axis=1)
            width *= 2
            where = (room >= size[:, None]).argmax(axis=1)
        take = real[:, j]
        at, col = every[take], where[take]
        room[at, col] -= size[take]
        if used is not None:
            used[at, col] += 1
            room[at[used[at, col] >= max_segments], col[used[at, col] >= max_segments]] = -1
        place[:, j] = where
    opened = np.zeros(windows, dtype=np.int64)
    np.maximum.at(opened, every[:, None].repeat(window, 1)[real], place[real] + 1)
    row_base = np.concatenate([[0], np.cumsum(opened)[:-1]])
    rows = int(opened.sum())
    piece = (sorted_at + (np.arange(windows) * window)[:, None])[real]
    row = (place + row_base[:, None])[real]
    grouped = np.argsort(row, kind="stable")
    return piece[grouped], row[grouped], rows


def sort_desc(grid: np.ndarray) -> np.ndarray:
    """Positions sorting each row of ``grid`` (non-negative ints) longest first, ties in order.

    Lengths below 2**16 sort as 16-bit keys: NumPy's stable sort is then a radix sort.
    """
    top = int(grid.max()) if grid.size else 0
    if top < 1 << 16:
        return np.argsort((top - grid).astype(np.uint16), axis=1, kind="stable")
    return np.argsort(-grid, axis=1, kind="stable")
