"""Batch layouts of ragged columns: padded, padding-free (flat) and packed rows.

The last step of the variable-length path before the transfer: given the rows (or row pieces)
a plan chose for one batch, these functions copy their values out of the column's host array,
once per leaf per batch, and build the batch's layout as NumPy arrays:
[`Padded`][looptoolkit.Padded], [`Flat`][looptoolkit.Flat] or
[`Packed`][looptoolkit.Packed]. The output types are NamedTuples, so every framework's tree
utilities (``to_device``, ``jax.jit``, ``tf.nest``, ``torch.compile``) see pytrees.

Copies: rows of at least ``_SLICE_MIN`` elements on average are copied as slices (one
``memcpy`` each, and a memory-mapped column reads only their pages); shorter rows are gathered
with one fancy index over all their elements.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["Flat", "Packed", "Padded", "copy_pieces", "flat_batch", "packed_batch", "pad_batch"]

# Mean elements per piece above which slice copies beat one fancy-index gather.
_SLICE_MIN = 24


class Padded(NamedTuple):
    """A batch of a ragged column padded to a rectangle (``layout="pad"``).

    Attributes:
        values: ``(B, L, *feature)``: row ``i``'s elements, then ``pad_value``.
        mask: ``(B, L)`` bool, True at real elements.
        lengths: ``(B,)`` int64, each row's length.
    """

    values: Any
    mask: Any
    lengths: Any


class Flat(NamedTuple):
    """A batch of a ragged column concatenated without padding (``layout="flat"``).

    What flash-attention's varlen kernels and HF's padding-free path take.

    Attributes:
        values: ``(T, *feature)``, the batch's rows one after another.
        cu_seqlens: ``(B + 1,)`` int32, where each row starts in ``values``, then ``T``.
        position_ids: ``(T,)`` int64, each element's position in its row (restarts at 0).
        max_seqlen: the longest row's length, a Python int.
    """

    values: Any
    cu_seqlens: Any
    position_ids: Any
    max_seqlen: int


class Packed(NamedTuple):
    """A batch of fixed-length rows packed with documents (``layout="pack"`` or ``"fit"``).

    Attributes:
        values: ``(R, seq_len, *feature)``, the rows; padding (only where a row is not full)
            holds ``pad_value``.
        segment_ids: ``(R, seq_len)`` int32, the documents (pieces) of each row numbered from 1;
            0 at padding.
        position_ids: ``(R, seq_len)`` int64, each element's position in its piece (0 at
            padding).
        cu_seqlens: int32 boundaries of the pieces in the flattened batch (``R * seq_len``
            elements), each row's padding counted as a piece of its own, so the last entry is
            ``R * seq_len``.
        max_seqlen: the longest piece, a Python int.
    """

    values: Any
    segment_ids: Any
    position_ids: Any
    cu_seqlens: Any
    max_seqlen: int


def copy_pieces(
    out: np.ndarray, dst: np.ndarray, src: np.ndarray, lens: np.ndarray, values: np.ndarray
) -> None:
    """``out[dst[k]:dst[k] + lens[k]] = values[src[k]:src[k] + lens[k]]`` for every piece ``k``."""
    total = int(lens.sum())
    if not total:
        return
    if total >= _SLICE_MIN * len(lens):
        for d, s, n in zip(dst.tolist(), src.tolist(), lens.tolist(), strict=True):
            out[d : d + n] = values[s : s + n]
        return
    within = np.arange(total) - np.repeat(np.cumsum(lens) - lens, lens)
    out[np.repeat(dst, lens) + within] = values.take(np.repeat(src, lens) + within, axis=0)


def padded_length(longest: int, multiple: int | None, buckets: np.ndarray | None) -> int:
    """``L`` of a batch whose longest row has ``longest`` elements."""
    if buckets is not None:
        return int(buckets[np.searchsorted(buckets, longest)])
    if multiple:
        return -(-longest // multiple) * multiple
    return longest


def pad_batch(
    values: np.ndarray,
    starts: np.ndarray,
    lens: np.ndarray,
    length: int,
    pad_value: Any,
) -> Padded:
    """Rows ``values[starts[i]:starts[i] + lens[i]]`` padded to ``length``."""
    b = len(lens)
    feature = values.shape[1:]
    out = np.full((b * length, *feature), pad_value, dtype=values.dtype)
    copy_pieces(out, np.arange(b, dtype=np.int64) * length, starts, lens, values)
    mask = np.arange(length) < lens[:, None]
    return Padded(out.reshape(b, length, *feature), mask, lens.astype(np.int64, copy=True))


def flat_batch(values: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> Flat:
    """Rows ``values[starts[i]:starts[i] + lens[i]]`` one after another."""
    cu = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=cu[1:])
    total = int(cu[-1])
    if total >= _SLICE_MIN * len(lens):
        pieces = zip(starts.tolist(), lens.tolist(), strict=True)
        out = np.concatenate([values[s : s + n] for s, n in pieces])
    else:
        out = np.empty((total, *values.shape[1:]), dtype=values.dtype)
        copy_pieces(out, cu[:-1], starts, lens, values)
    positions = np.arange(total, dtype=np.int64) - np.repeat(cu[:-1], lens)
    longest = int(lens.max()) if len(lens) else 0
    return Flat(out, cu.astype(np.int32), positions, longest)


def packed_batch(
    values: np.ndarray,
    src: np.ndarray,
    lens: np.ndarray,
    dst: np.ndarray,
    rows: int,
    seq_len: int,
    pad_value: Any,
) -> Packed:
    """Pieces ``values[src[k]:src[k] + lens[k]]`` placed at flat positions ``dst[k]``.

    ``dst`` is increasing and no piece crosses a row boundary; what no piece covers is padding.
    """
    size = rows * seq_len
    feature = values.shape[1:]
    out = np.full((size, *feature), pad_value, dtype=values.dtype)
    copy_pieces(out, dst, src, lens, values)
    # Pieces and the padding runs between them, as one increasing list of segment starts.
    row_of = dst // seq_len
    first_of_row = np.searchsorted(row_of, np.arange(rows))
    number = np.arange(len(dst), dtype=np.int64) - first_of_row[row_of] + 1
    segment_ids = np.zeros(size, dtype=np.int32)
    positions = np.zeros(size, dtype=np.int64)
    ends = dst + lens
    covered = int(lens.sum())
    if covered:
        within = np.arange(covered) - np.repeat(np.cumsum(lens) - lens, lens)
        at = np.repeat(dst, lens) + within
        segment_ids[at] = np.repeat(number, lens)
        positions[at] = within
    # Padding: each row's part after its last piece (and a row without pieces, whole).
    row_ends = np.arange(1, rows + 1, dtype=np.int64) * seq_len
    last_end = np.full(rows, -1, dtype=np.int64)
    if len(dst):
        np.maximum.at(last_end, row_of, ends)
    pad_start = np.where(last_end < 0, row_ends - seq_len, last_end)
    has_pad = pad_start < row_ends
    bounds = np.concatenate([dst, pad_start[has_pad]])
    bounds.sort(kind="stable")
    cu = np.append(bounds, size).astype(np.int32)
    seg_lens = np.diff(cu)
    longest = int(seg_lens.max()) if len(seg_lens) else 0
    return Packed(
        out.reshape(rows, seq_len, *feature),
        segment_ids.reshape(rows, seq_len),
        positions.reshape(rows, seq_len),
        cu,
        longest,
    )
