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

__all__ = [
    "Flat",
    "Packed",
    "Padded",
    "copy_pieces",
    "flat_batch",
    "packed_batch",
    "pad_batch",
    "split_packed",
]

# Mean elements per piece above which slice copies beat one fancy-index gather.
_SLICE_MIN = 24


class Padded(NamedTuple):
    """A batch of a ragged column padded to a rectangle (``layout="pad"``).

    Attributes:
        values: ``(B, L, *feature)``: row ``i``'s elements, then ``pad_value``.
        mask: ``(B, L)`` bool, True at real elements.
        lengths: ``(B,)`` int64, each row's length.

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import Loader, Ragged
        >>> col = Ragged.from_rows([np.array([1, 2, 3]), np.array([4])])
        >>> batch = next(iter(Loader(col, 2, shuffle=False)))
        >>> batch.values.tolist(), batch.mask.tolist(), batch.lengths.tolist()
        ([[1, 2, 3], [4, 0, 0]], [[True, True, True], [True, False, False]], [3, 1])
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

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import Loader, Ragged
        >>> col = Ragged.from_rows([np.array([1, 2, 3]), np.array([4])])
        >>> flat = next(iter(Loader(col, 2, layout="flat", shuffle=False)))
        >>> flat.values.tolist(), flat.cu_seqlens.tolist(), flat.position_ids.tolist()
        ([1, 2, 3, 4], [0, 3, 4], [0, 1, 2, 0])
        >>> flat.max_seqlen
        3
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

    Examples:
        >>> import numpy as np
        >>> from looptoolkit import Loader, Ragged
        >>> col = Ragged.from_rows([np.array([1, 2, 3]), np.array([4, 5])])
        >>> packed = next(iter(Loader(col, 2, layout="pack", seq_len=4, shuffle=False)))
        >>> packed.values.tolist()
        [[1, 2, 3, 4], [5, 0, 0, 0]]
        >>> packed.segment_ids.tolist(), packed.position_ids.tolist()
        ([[1, 1, 1, 2], [1, 0, 0, 0]], [[0, 1, 2, 0], [0, 0, 0, 0]])
        >>> packed.cu_seqlens.tolist()
        [0, 3, 4, 5, 8]
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


def padded_length(longest: Any, multiple: int | None, buckets: np.ndarray | None) -> Any:
    """``L`` of a batch whose longest row has ``longest`` elements (an int, or an array of them).

    The smallest of ``buckets`` that holds it (the largest bucket for longer rows, refused at
    construction), else ``longest`` rounded up to a multiple of ``multiple``, else ``longest``.
    """
    if buckets is not None:
        return buckets[np.minimum(np.searchsorted(buckets, longest), len(buckets) - 1)]
    if multiple:
        return -(-longest // multiple) * multiple
    return longest


def _filled(shape: tuple[int, ...], pad_value: Any, dtype: np.dtype) -> np.ndarray:
    # Zeros come from the allocator already zeroed (calloc): no pass over the memory.
    if pad_value == 0:
        return np.zeros(shape, dtype=dtype)
    return np.full(shape, pad_value, dtype=dtype)


def pad_batch(
    values: np.ndarray,
    starts: np.ndarray,
    lens: np.ndarray,
    length: int,
    pad_value: Any,
) -> Padded:
    """Rows ``values[starts[i]:starts[i] + lens[i]]`` padded to ``length``.

    ``lens`` becomes the batch's ``lengths`` (not copied: pass an array of the batch's own).
    """
    b = len(lens)
    feature = values.shape[1:]
    out = _filled((b, length, *feature), pad_value, values.dtype)
    counts = lens.tolist()
    if sum(counts) >= _SLICE_MIN * b:
        for i, (s, n) in enumerate(zip(starts.tolist(), counts, strict=True)):
            out[i, :n] = values[s : s + n]
    else:
        flat = out.reshape(b * length, *feature)
        copy_pieces(flat, np.arange(b, dtype=np.int64) * length, starts, lens, values)
    mask = np.arange(length) < lens[:, None]
    return Padded(out, mask, lens.astype(np.int64, copy=False))


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

    The pieces of a row follow each other from the row's start (``dst`` increasing, no piece
    crossing a row boundary); the rest of each row is padding, a segment of its own.
    """
    size = rows * seq_len
    feature = values.shape[1:]
    out = _filled((size, *feature), pad_value, values.dtype)
    copy_pieces(out, dst, src, lens, values)
    # Each piece's number within its row (from 1), then the padding at each row's end.
    row_of = dst // seq_len
    row_ids = np.arange(rows, dtype=np.int64)
    number = np.arange(len(dst), dtype=np.int64) - np.searchsorted(row_of, row_of) + 1
    last = np.searchsorted(row_of, row_ids, side="right") - 1
    filled = np.zeros(rows, dtype=np.int64)
    if len(dst):
        mine = (last >= 0) & (row_of[np.maximum(last, 0)] == row_ids)
        filled[mine] = (dst + lens)[last[mine]] - row_ids[mine] * seq_len
    has_pad = filled < seq_len
    starts = np.concatenate([dst, (row_ids * seq_len + filled)[has_pad]])
    numbers = np.concatenate([number, np.zeros(int(has_pad.sum()), dtype=np.int64)])
    order = np.argsort(starts, kind="stable")
    cu = np.append(starts[order], size)
    seg_lens = np.diff(cu)
    segment_ids = np.repeat(numbers[order].astype(np.int32), seg_lens)
    positions = np.arange(size, dtype=np.int64) - np.repeat(cu[:-1], seg_lens)
    positions[segment_ids == 0] = 0
    longest = int(seg_lens.max()) if len(seg_lens) else 0
    return Packed(
        out.reshape(rows, seq_len, *feature),
        segment_ids.reshape(rows, seq_len),
        positions.reshape(rows, seq_len),
        cu.astype(np.int32),
        longest,
    )


def split_packed(block: Packed, per: int, rows: list[int]) -> list[Packed]:
    """Batch ``j`` of a block laid out as one: rows ``[j * per, j * per + rows[j])`` (views)."""
    seq_len = block.values.shape[1]
    cu = block.cu_seqlens.astype(np.int64)
    out = []
    for j, r in enumerate(rows):
        r0, r1 = j * per, j * per + r
        a, b = np.searchsorted(cu, [r0 * seq_len, r1 * seq_len])
        part = cu[a : b + 1] - r0 * seq_len
        longest = int(np.diff(part).max()) if b > a else 0
        out.append(
            Packed(
                block.values[r0:r1],
                block.segment_ids[r0:r1],
                block.position_ids[r0:r1],
                part.astype(np.int32),
                longest,
            )
        )
    return out
