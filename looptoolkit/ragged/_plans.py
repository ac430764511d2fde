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
- [`pack_pieces`][looptoolkit.ragged._plans.pack_pieces]: concatenate-then-split; the pieces of
  the rows that fall in a range of the epoch's token stream, cut at row boundaries.
- [`fit_rows`][looptoolkit.ragged._plans.fit_rows]: whole rows into fixed-length rows by first
  fit decreasing within windows of the epoch's order, in lockstep over the windows.
"""

from __future__ import annotations

import math
import numpy as np

__all__ = ["fit_rows", "greedy_bounds", "length_grouped", "pack_pieces", "window_size"]

# Batches per window of a length-grouped order (HF's megabatches).
GROUP_WINDOW_BATCHES = 50
# Rows per window of first-fit packing: each row is placed by one pass over every window.
FIT_WINDOW = 256


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
    grid = np.zeros(windows * window, dtype=np.int64)
    grid[:m] = cost
    grid = grid.reshape(windows, window)
    starts = np.zeros((windows, window), dtype=bool)
    starts[:, 0] = True
    acc = grid[:, 0].copy()
    count = np.ones(windows, dtype=np.int64)
    for j in range(1, window):
        c = grid[:, j]
        if mode == "sum":
            grown = acc + c
            over = grown > budget
        else:
            grown = np.maximum(acc, c)
            over = (count + 1) * grown > budget
        if max_count is not None:
            over |= count >= max_count
        starts[:, j] = over
        np.copyto(acc, np.where(over, c, grown))
        count += 1
        count[over] = 1
    flags = starts.reshape(-1)[:m]
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
    within = np.argsort(-grid.reshape(windows, window), axis=1, kind="stable")
    order = (within + (np.arange(windows) * window)[:, None]).reshape(-1)
    order = order[order < m] if windows * window != m else order
    full = m // batch_size
    whole = order[: full * batch_size].reshape(full, batch_size)
    if rng is not None:
        whole = whole[rng.permutation(full)]
    regrouped = np.concatenate([whole.reshape(-1), order[full * batch_size :]])
    cuts = np.append(np.arange(0, m, batch_size), m).astype(np.int64)
    return regrouped, cuts


def pack_pieces(
    stream: np.ndarray, start: int, stop: int, seq_len: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces of tokens ``[start, stop)`` of the epoch's stream, cut at row boundaries.

    Args:
        stream: ``m + 1`` cumulative lengths of the rows in the epoch's order (from 0).
        start: first token of the range (a multiple of ``seq_len``).
        stop: end of the range.
        seq_len: tokens per packed row.

    Returns:
        ``(row, offset, length)`` of each piece: position ``row`` in the epoch's order, the
        piece's first token within that row, its length. Pieces are in stream order.
    """
    first = int(np.searchsorted(stream, start, side="right")) - 1
    last = int(np.searchsorted(stream, stop, side="left"))
    cuts = np.concatenate(
        [
            [start],
            stream[first + 1 : last],
            np.arange(start - start % seq_len + seq_len, stop, seq_len),
            [stop],
        ]
    )
    cuts = np.unique(cuts)
    begin, end = cuts[:-1], cuts[1:]
    row = np.searchsorted(stream, begin, side="right") - 1
    return row, begin - stream[row], end - begin


def fit_rows(
    lengths: np.ndarray, seq_len: int, max_segments: int | None, window: int = FIT_WINDOW
) -> tuple[np.ndarray, np.ndarray, int]:
    """Whole rows into fixed-length rows of ``seq_len``: first fit decreasing within windows.

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
    grid = np.zeros(windows * window, dtype=np.int64)
    grid[:m] = lengths
    grid = grid.reshape(windows, window)
    sorted_at = np.argsort(-grid, axis=1, kind="stable")
    sizes = np.take_along_axis(grid, sorted_at, axis=1)
    real = np.zeros(windows * window, dtype=bool)
    real[:m] = True
    real = np.take_along_axis(real.reshape(windows, window), sorted_at, axis=1)
    cap = np.full((windows, 1), seq_len, dtype=np.int64)
    used = np.zeros((windows, 1), dtype=np.int64)
    place = np.zeros((windows, window), dtype=np.int64)
    limit = max_segments if max_segments is not None else window + 1
    for j in range(window):
        size = sizes[:, j]
        fits = (cap >= size[:, None]) & (used < limit)
        any_fit = fits.any(axis=1)
        where = np.where(any_fit, fits.argmax(axis=1), (cap < seq_len).sum(axis=1))
        # A window that needs a new row opens the next unused column (every column grows
        # together: at most one new column per pass).
        if (where >= cap.shape[1]).any():
            cap = np.concatenate([cap, np.full((windows, 1), seq_len, np.int64)], axis=1)
            used = np.concatenate([used, np.zeros((windows, 1), np.int64)], axis=1)
        take = real[:, j]
        rows_idx = np.arange(windows)[take]
        cap[rows_idx, where[take]] -= size[take]
        used[rows_idx, where[take]] += 1
        place[:, j] = where
    per_window = (used > 0).sum(axis=1)
    row_base = np.concatenate([[0], np.cumsum(per_window)[:-1]])
    rows = int(per_window.sum())
    piece = (sorted_at + (np.arange(windows) * window)[:, None])[real]
    row = (place + row_base[:, None])[real]
    grouped = np.argsort(row, kind="stable")
    return piece[grouped], row[grouped], rows
